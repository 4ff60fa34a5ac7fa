"""Reading the controller's answer: parse, validate per event, map numbers back to ids.

Each event of a call is judged on its own: one event's bad entry costs that event a retry, not the
whole call. An entry is refused, with a message meant for the model, when it names an insight that
was not retrieved for that event, skips or repeats one, revises an insight into its own text or
into a copy of the task, or breaks the schema. An ADD that repeats one of the event's insights
(embedding cosine at or over the duplicate threshold) or copies the task is not an error: it is
dropped, so the insight is not added twice and no record of one task poses as a lesson.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from evomem.adapters.llm.prompt import EventView, PromptBatch
from evomem.core.editing import text_key
from evomem.core.hashing import HashingEmbedder
from evomem.logs import get_logger
from schemas import AddDecision, ControllerDecision, InsightEdit

log = get_logger("evomem.llm")

_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_WORD = re.compile(r"\w+")
#: Words in a row that a new or revised text may share with its event's report before it counts
#: as a copy of the task rather than a lesson (a general rule rarely repeats six words of one task).
COPIED_WORDS = 6


def _one_line(text: str | None) -> str | None:
    return " ".join(text.split()) if isinstance(text, str) else text


class _Edit(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    insight: int
    operation: Literal["KEEP", "ARCHIVE", "REVISE"]
    revised_insight_text: Annotated[str | None, AfterValidator(_one_line)] = None


class _Add(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    decision: bool
    new_insight_text: Annotated[str | None, AfterValidator(_one_line)] = None


class _EventAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    event: int
    insight_edits: list[_Edit]
    add_new_insight: _Add


class DuplicateCheck:
    """Cosine of the hashing embedder between an ADD and the texts it must not repeat."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.embedder = HashingEmbedder()

    def nearest(self, text: str, others: Sequence[str]) -> tuple[float, int]:
        """The highest similarity to any of ``others`` and its index (-1 when there are none)."""
        vec = self.embedder.embed_one(text)
        best, at = 0.0, -1
        for i, other in enumerate(others):
            ov = self.embedder.embed_one(other)
            sim = sum(v * ov.get(k, 0.0) for k, v in vec.items())
            if sim > best:
                best, at = sim, i
        return best, at


def load_json(text: str) -> Any:
    """The JSON document of a reply, tolerating a code fence or prose around one object (some
    models in JSON mode still wrap it)."""
    body = _FENCE.sub("", text.strip())
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        if start == -1 or end <= start:
            raise ValueError("no JSON object in the answer")
        body = body[start : end + 1]
    # strict=False: a raw line break inside a string (small models on a grammar write them) is
    # read as one; the texts are then put on one line
    return json.loads(body, strict=False)


def entry_text(text: str, number: int) -> str:
    """What the model answered for one event: its entry of the answer, as compact JSON, when the
    answer parses and has one; else the answer as it came."""
    try:
        doc = load_json(text)
    except ValueError:
        return text
    entries = doc.get("events") if isinstance(doc, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("event") == number:
            return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
    return text


def read_answer(
    text: str,
    finish_reason: str | None,
    batch: PromptBatch,
    pending: Sequence[int],
    decided_by: str,
    duplicates: DuplicateCheck,
) -> dict[int, ControllerDecision | str]:
    """For each pending event number, its decision or the reason its answer was refused."""
    try:
        doc = load_json(text)
    except ValueError as exc:
        reason = (
            "the answer was cut off before its JSON was complete; keep the texts shorter"
            if finish_reason == "length"
            else f"the answer is not valid JSON ({exc})"
        )
        return dict.fromkeys(pending, reason)
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        return dict.fromkeys(pending, 'the answer must be one JSON object {"events": [...]}')
    wanted = set(pending)
    entries: dict[int, Any] = {}
    refused: dict[int, str] = {}
    stray: list[str] = []
    for entry in doc["events"]:
        number = entry.get("event") if isinstance(entry, dict) else None
        if not isinstance(number, int) or number not in wanted:
            stray.append(f"an entry for event {number!r}, which was not asked for")
        elif number in entries:
            refused[number] = f"event {number} is answered twice"
        else:
            entries[number] = entry
    out: dict[int, ControllerDecision | str] = {}
    tasks = task_words(batch)
    for n in pending:
        if n in refused:
            out[n] = refused[n]
        elif n not in entries:
            out[n] = f"event {n} has no entry" + (f" (there was {stray[0]})" if stray else "")
        else:
            out[n] = event_decision(entries[n], batch.event(n), decided_by, duplicates, tasks)
    return out


def event_decision(
    entry: Any, view: EventView, decided_by: str, duplicates: DuplicateCheck, tasks: str = " "
) -> ControllerDecision | str:
    """One event's entry as a validated decision, or why it cannot be one. ``tasks``: the words of
    the reports in the call (``task_words``), which a new or revised text must not copy."""
    n = view.number
    try:
        answer = _EventAnswer.model_validate(entry)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "entry"
        return f"event {n}: {where}: {err['msg']}"
    edits: list[InsightEdit] = []
    seen: set[int] = set()
    for edit in answer.insight_edits:
        insight_id = view.insight_id(edit.insight)
        if insight_id is None:
            return (
                f"event {n} names insight {edit.insight}, which was not retrieved for it "
                f"(its insights are {_numbers(view.labels)})"
            )
        if edit.insight in seen:
            return f"event {n} gives insight {edit.insight} more than one operation"
        seen.add(edit.insight)
        problem = _revise_problem(n, edit, view, tasks)
        if problem:
            return problem
        revised = edit.revised_insight_text if edit.operation == "REVISE" else None
        try:
            edits.append(
                InsightEdit(
                    insight_id=insight_id,
                    operation=edit.operation,
                    decided_by=decided_by,
                    revised_insight_text=revised,
                )
            )
        except ValidationError as exc:
            return f"event {n}, insight {edit.insight}: {exc.errors()[0]['msg']}"
    missing = [label for label in view.labels if label not in seen]
    if missing:
        return f"event {n} gives no operation for insight {_numbers(missing)}"
    add = _add_decision(n, answer.add_new_insight, view, edits, decided_by, duplicates, tasks)
    if isinstance(add, str):
        return add
    return ControllerDecision(insight_edits=edits, add_new_insight=add)


def _revise_problem(n: int, edit: _Edit, view: EventView, tasks: str) -> str | None:
    if edit.operation != "REVISE":
        return None
    if not (edit.revised_insight_text or "").strip():
        return f"event {n}: the REVISE of insight {edit.insight} has no revised_insight_text"
    original = view.input.retrieved[view.labels.index(edit.insight)].text
    if text_key(edit.revised_insight_text or "") == text_key(original):
        return (
            f"event {n}: the REVISE of insight {edit.insight} repeats its text; a revision must narrow "
            "or correct it (choose KEEP if it is right as it stands)"
        )
    copied = copied_from_task(edit.revised_insight_text or "", tasks)
    if copied:
        return (
            f"event {n}: the REVISE of insight {edit.insight} copies the tasks' own text (“{copied}”); "
            "an insight is a general rule for other tasks, not a record of this one"
        )
    return None


def task_words(batch: PromptBatch) -> str:
    """The words of every report the model was shown in this call (query, trajectory, answer,
    feedback; not the proposed insights, which are offered to be copied), lower-cased, one space
    apart, with a space at each end. Where a report quotes one of the call's insights (an agent
    saying which insight it applied), the quote is cut out: repeating an insight is the duplicate
    check's business, not a copy of the task."""
    parts = []
    for view in batch.events:
        event = view.input.event
        steps = (s if isinstance(s, str) else json.dumps(s, default=str) for s in event.trajectory)
        parts += [event.query, *steps, event.final_answer or "", event.feedback or ""]
    words = " " + " ".join(_WORD.findall(" ".join(parts).lower())) + " "
    for insight in batch.insights.values():
        quoted = " ".join(_WORD.findall(insight.text.lower()))
        if len(quoted.split()) >= COPIED_WORDS:
            words = words.replace(f" {quoted} ", " | ")
    return words


def copied_from_task(text: str, tasks: str) -> str | None:
    """The first run of ``COPIED_WORDS`` words that ``text`` repeats from ``tasks`` (``task_words``),
    if any. Small models fill an insight with the tasks they were shown."""
    words = _WORD.findall(text.lower())
    for i in range(len(words) - COPIED_WORDS + 1):
        run = " ".join(words[i : i + COPIED_WORDS])
        if f" {run} " in tasks:
            return run
    return None


def _add_decision(
    n: int,
    add: _Add,
    view: EventView,
    edits: Sequence[InsightEdit],
    decided_by: str,
    duplicates: DuplicateCheck,
    tasks: str,
) -> AddDecision | str:
    if not add.decision:
        return AddDecision()
    text = (add.new_insight_text or "").strip()
    if not text:
        return f"event {n}: add_new_insight has decision true but no new_insight_text"
    existing = [x.text for x in view.input.retrieved] + [
        e.revised_insight_text for e in edits if e.revised_insight_text
    ]
    copied = copied_from_task(text, tasks)
    if copied:  # not a lesson: as with a duplicate, the rest of the event's decision stands
        log.info("llm.add_copies_task", event_id=str(view.input.event.event_id), copied=copied)
        return AddDecision()
    similarity, at = duplicates.nearest(text, existing)
    if similarity >= duplicates.threshold:
        log.info(
            "llm.add_duplicate",
            event_id=str(view.input.event.event_id),
            similarity=round(similarity, 3),
            duplicate_of=existing[at][:80],
        )
        return AddDecision()
    try:
        return AddDecision(decision=True, new_insight_text=text, decided_by=decided_by)
    except ValidationError as exc:
        return f"event {n}: new_insight_text: {exc.errors()[0]['msg']}"


def _numbers(labels: Sequence[int]) -> str:
    return ", ".join(str(x) for x in labels) or "none"


__all__ = [
    "COPIED_WORDS",
    "DuplicateCheck",
    "copied_from_task",
    "entry_text",
    "event_decision",
    "load_json",
    "read_answer",
    "task_words",
]
