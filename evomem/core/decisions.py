"""The graph controller port (paper §3.4) and the controllers that need no LLM.

A controller sees, per event, the event and the insights retrieved for it, and answers a
``ControllerDecision``: KEEP / ARCHIVE / REVISE per insight and a separate ADD decision. Explicit
verdicts carried by the event decide the insights they name; the configured controller decides
the rest and the ADD. Everything a controller answers is re-checked by ``editing.plan_edits``:
it can only touch the insights retrieved for that event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from evomem.core import duplicates
from evomem.core.editing import text_key
from evomem.core.hashing import SparseVec
from evomem.core.ports import InsightHead
from schemas import AddDecision, ControllerDecision, InsightEdit, PartialVerdict, TaskEvent


@dataclass(frozen=True, slots=True)
class DecisionInput:
    """One event to judge, with the insights retrieved for it. ``relevance``: for each insight the
    retrieval served, the similarity of the best query through which it was served (from the
    retrieval record; missing when the event named its insights without one)."""

    event: TaskEvent
    retrieved: tuple[InsightHead, ...]
    allowed_operations: frozenset[str]
    relevance: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DecisionFailure:
    """Why no decision could be made for one event. ``transient``: the judge was unavailable (the
    event stays pending and is tried again); otherwise its answers were unusable (dead letters)."""

    reason: str
    transient: bool


Decision = ControllerDecision | DecisionFailure


class Controller(Protocol):
    name: str
    judges_additions: bool
    """True if the controller decides ADD itself (an LLM may distil an insight nobody proposed)."""

    def decide(self, inputs: Sequence[DecisionInput]) -> Sequence[Decision]:
        """One decision (or failure) per input, in order. May batch several events in one call;
        one event's failure must not cost the others their decision."""
        ...

    def close(self) -> None:
        """Release what the controller holds (an LLM client's connections)."""
        ...


class RuleController:
    """Offline judgement from the outcome alone: a resolved task keeps the insights it gives reason to
    credit, a failed task records them as negative evidence (inferred: it ranks, and never archives).
    ADD takes the agent's ``proposed_insight`` unless it repeats a retrieved one.

    Which insights: with ``credit="relevant"`` (the default) only those the event gives a reason to
    credit or blame: an insight whose own text is at least ``relevance`` similar to a part of the
    task — its query, final answer, feedback or a trajectory step, so one the agent says it applied
    counts — or one served through a past query at least ``REPEAT_SIMILARITY`` similar to this one
    (the same task again: its outcome is direct evidence). The others get no edit and no evidence:
    an insight served on a resemblance is not what made the task succeed or fail, and crediting it
    anyway lets whatever was served first gather evidence from unrelated tasks until it wins every
    ranking. The similarity of the serving query alone is no reason below a repeat: with templated
    tasks, look-alikes of other topics reach 0.8 (the quality benchmark measured crediting from 0.7
    on: repeat-query hit@1 fell by 0.03-0.09). ``credit="all"`` credits or blames every one.
    """

    name = "rules"
    judges_additions = False

    def __init__(self, credit: Literal["relevant", "all"] = "relevant", relevance: float = 0.7) -> None:
        self.credit = credit
        self.relevance = relevance

    def decide(self, inputs: Sequence[DecisionInput]) -> list[ControllerDecision]:
        return [self._decide(i) for i in inputs]

    def close(self) -> None:
        """Nothing to release."""

    def relevant(self, inp: DecisionInput, insight: InsightHead, task: Sequence[SparseVec]) -> bool:
        if self.credit == "all" or inp.relevance.get(insight.id, 0.0) >= REPEAT_SIMILARITY:
            return True
        text = duplicates.vector(insight.text)
        return any(duplicates.similarity(text, piece) >= self.relevance for piece in task)

    def _decide(self, inp: DecisionInput) -> ControllerDecision:
        op = "KEEP" if inp.event.status == "resolved" else "ARCHIVE"
        task = task_pieces(inp.event) if self.credit == "relevant" and inp.retrieved else []
        edits = [
            # an outcome alone is evidence, never grounds to archive: that needs a judge
            InsightEdit(insight_id=n.id, operation=op, decided_by=self.name, inferred=True)
            for n in inp.retrieved
            if self.relevant(inp, n, task)
        ]
        proposed = inp.event.proposed_insight
        seen = {text_key(n.text) for n in inp.retrieved}
        add = AddDecision()
        if proposed and text_key(proposed) not in seen:
            add = AddDecision(decision=True, new_insight_text=proposed, decided_by=self.name)
        return ControllerDecision(insight_edits=edits, add_new_insight=add)


#: Similarity of the serving query from which a task is the same task again (near-verbatim text).
REPEAT_SIMILARITY = 0.95
#: Trajectory steps looked at, at most, when the rule controller reads what an agent did.
TASK_PIECES = 64


def task_pieces(event: TaskEvent) -> list[SparseVec]:
    """The task as the rule controller reads it: its query, final answer, feedback and trajectory
    steps (objects as their JSON), each embedded on its own."""
    texts = [event.query, event.final_answer or "", event.feedback or ""]
    for step in event.trajectory[:TASK_PIECES]:
        texts.append(step if isinstance(step, str) else json.dumps(step, default=str))
    return [v for v in (duplicates.vector(t) for t in texts if t) if v]


def explicit_edits(event: TaskEvent) -> list[InsightEdit]:
    """The verdicts an event carries: helpful → KEEP, harmful → ARCHIVE, partial → REVISE."""
    edits = []
    for insight_id, verdict in event.insight_feedback.items():
        if isinstance(verdict, PartialVerdict):
            edits.append(
                InsightEdit(
                    insight_id=insight_id,
                    operation="REVISE",
                    revised_insight_text=verdict.revised_text,
                    decided_by="feedback",
                )
            )
        else:
            op = "KEEP" if verdict == "helpful" else "ARCHIVE"
            edits.append(InsightEdit(insight_id=insight_id, operation=op, decided_by="feedback"))
    return edits


def decide(inputs: Sequence[DecisionInput], controller: Controller) -> list[Decision]:
    """Explicit verdicts first; the controller is asked only about what they leave open. An event
    the controller failed on gets its failure, not its explicit verdicts alone: never a part."""
    explicit = [explicit_edits(i.event) for i in inputs]
    open_inputs: list[tuple[int, DecisionInput]] = []
    for n, inp in enumerate(inputs):
        named = set(inp.event.insight_feedback)
        rest = tuple(x for x in inp.retrieved if x.id not in named)
        needs_add = controller.judges_additions or inp.event.proposed_insight is not None
        if rest or needs_add:
            open_inputs.append((n, DecisionInput(inp.event, rest, inp.allowed_operations, inp.relevance)))
    answers = controller.decide([i for _, i in open_inputs]) if open_inputs else []
    by_index = {n: a for (n, _), a in zip(open_inputs, answers, strict=True)}
    out: list[Decision] = []
    for n, inp in enumerate(inputs):
        answer = by_index.get(n, ControllerDecision())
        if isinstance(answer, DecisionFailure):
            out.append(answer)
            continue
        named = set(inp.event.insight_feedback)
        edits = explicit[n] + [e for e in answer.insight_edits if e.insight_id not in named]
        out.append(
            ControllerDecision(
                insight_edits=edits, add_new_insight=answer.add_new_insight, confidence=answer.confidence
            )
        )
    return out


__all__ = [
    "Controller",
    "Decision",
    "DecisionFailure",
    "DecisionInput",
    "RuleController",
    "decide",
    "explicit_edits",
    "task_pieces",
]
