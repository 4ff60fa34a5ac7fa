"""One run of the benchmark: a world, an arm and a seed, with the real memory in the loop.

Per task: ``retrieve()`` on the embedded stack, the agent's success drawn from what was served,
``report()`` with the outcome, a trajectory, the judge's verdicts (judged arms) and the agent's
proposal; ``consolidate()`` every ``consolidate_every`` tasks, as a background worker would. The run
returns plain data (it crosses a process boundary): per-task success, the served insights' ground
truth, repeat-query hits, the memory's final state and the edits that made it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.quality.arms import ArmSpec, settings_for
from bench.quality.judge import Verdict, explicit_verdict, llm_judge
from bench.quality.worlds import Lesson, Task, World, WorldSpec
from evomem import Memory
from evomem.testing.llm_server import LLMTestServer

NAMESPACE = "quality"
#: Tasks between two consolidations: the lag of a background worker behind a busy fleet.
CONSOLIDATE_EVERY = 20
#: Lessons shown in a run's evidence (most served first).
TOP_SERVED = 5
_EVENT_NS = uuid.UUID("9d3f6c1e-58b2-4f0e-b7a4-2e6c0f1d7a35")


@dataclass(frozen=True)
class Job:
    world: WorldSpec
    arm: ArmSpec
    seed: int
    tasks: int
    consolidate_every: int = CONSOLIDATE_EVERY
    extra: tuple[tuple[str, str], ...] = ()  # settings for every arm (--set)


@dataclass
class _Tally:
    """What the loop counts as it goes."""

    success: list[int] = field(default_factory=list)
    served: Counter[str] = field(default_factory=Counter)  # lesson key → times served
    harmful: Counter[str] = field(default_factory=Counter)  # lesson key → times served where it harmed
    helpful: int = 0  # served insights that helped where served
    unknown_served: int = 0
    # per kind of return: the taught lesson ranked first, served at all (in the top B), returns counted
    hits: dict[str, dict[str, int]] = field(
        default_factory=lambda: {k: {"first": 0, "served": 0, "n": 0} for k in ("verbatim", "paraphrase")}
    )
    missed_for: Counter[str] = field(default_factory=Counter)  # what was first when the taught lesson was not
    operations: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    deferred: int = 0


class _Teachings:
    """Which query taught which good lesson; a teaching counts once its event is consolidated."""

    def __init__(self) -> None:
        self.by_text: dict[str, str] = {}  # query text → lesson key
        self.by_base: dict[str, tuple[str, str]] = {}  # base query → (lesson key, the teaching text)
        self.pending: list[tuple[str, str, str]] = []

    def taught(self, task: Task, lesson: Lesson) -> None:
        self.pending.append((task.query, task.base, lesson.key))

    def consolidated(self) -> None:
        for text, base, key in self.pending:
            self.by_text[text] = key
            self.by_base[base] = (key, text)
        self.pending.clear()

    def target(self, task: Task) -> tuple[str, str] | None:
        """(kind, lesson key) when this task's query taught a lesson before (``verbatim``) or is a
        paraphrase of one that did (``paraphrase``)."""
        if task.query in self.by_text:
            return "verbatim", self.by_text[task.query]
        taught = self.by_base.get(task.base)
        if taught is not None and taught[1] != task.query:
            return "paraphrase", taught[0]
        return None


#: Told of every task once its insights are served, before its report: (task, the served insights'
#: lessons, the memory, the key of the lesson this task's query taught when it counts as a return, or
#: None). ``bench.quality.trace`` watches a run through one.
Observer = Callable[[Task, list[Lesson | None], Memory, str | None], None]


def run_job(job: Job, observe: Observer | None = None) -> dict[str, Any]:
    """Run one (world, arm, seed) in its own temporary DATA_DIR and return its figures."""
    started = time.perf_counter()
    world = World(job.world, job.seed, job.tasks)
    tally = _Tally()
    final: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        mem: Memory | None = None
        if job.arm.memory:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evomem-q-")))
            url = None
            if job.arm.llm:
                url = stack.enter_context(LLMTestServer(judge=llm_judge(world))).url
            mem = stack.enter_context(Memory.open_local(settings_for(job.arm, root, url, dict(job.extra))))
        _loop(job, world, mem, tally, observe)
        if mem is not None:
            final = _final_state(world, mem, tally, job.arm)
    return {
        "world": job.world.name,
        "arm": job.arm.name,
        "seed": job.seed,
        "tasks": job.tasks,
        "success": tally.success,
        "served": sum(tally.served.values()),
        "harmful_served": sum(tally.harmful.values()),
        "helpful_served": tally.helpful,
        "unknown_served": tally.unknown_served,
        "hits": tally.hits,
        "missed_for": dict(tally.missed_for),
        "operations": dict(tally.operations),
        "outcomes": dict(tally.outcomes),
        "dead_lettered": tally.dead_lettered,
        "deferred": tally.deferred,
        **final,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _loop(job: Job, world: World, mem: Memory | None, tally: _Tally, observe: Observer | None) -> None:
    teachings = _Teachings()
    for task in world.tasks:
        retrieval = mem.retrieve(task.query, NAMESPACE) if mem is not None else None
        insights = retrieval.insights if retrieval is not None else ()
        if job.arm.withhold_harmful and retrieval is not None:
            insights = tuple(i for i in insights if not _harms(world, task, i.text))
            retrieval = dataclasses.replace(retrieval, insights=insights)
        served = [world.by_text.get(i.text) for i in insights]
        taught = _count_served(world, task, served, tally, teachings)
        success = task.u_success < world.success_probability(task, served)
        tally.success.append(int(success))
        if mem is None or retrieval is None:
            continue
        if observe is not None:
            observe(task, served, mem, taught)
        proposal = world.proposal(task, success)
        verdicts: dict[str, Verdict] = {}
        if job.arm.judged and task.u_judge < world.spec.judge_share:
            for ins, lesson in zip(insights, served, strict=True):
                verdict = explicit_verdict(world, task, lesson)
                if verdict is not None:
                    verdicts[ins.id] = verdict
        topic = world.topics[task.topic]
        steps = [f"task #{task.index}: {task.query}"]
        steps += [
            f"applied an insight from memory: {i.text}"
            for i, lesson in zip(insights, served, strict=True)
            if world.applies(lesson, task.topic)
        ]
        steps.append(f"checked the result: it {'matched' if success else 'did not match'} what was asked")
        mem.report(
            retrieval,
            status="resolved" if success else "failed",
            event_id=str(uuid.uuid5(_EVENT_NS, f"{job.seed}:{task.index}")),
            agent_id=f"agent-{task.index % 8}",
            trajectory=steps,
            final_answer=f"{topic.name}: {'done' if success else 'not solved'}",
            feedback=None if success else "the result did not match what was asked",
            insight_feedback=verdicts or None,
            proposed_insight=world.phrasing(proposal, task) if proposal is not None else None,
        )
        if (
            proposal is not None
            and proposal.kind in ("right", "renewed")
            and world.is_good(proposal, task.index)
        ):
            teachings.taught(task, proposal)
        if (task.index + 1) % job.consolidate_every == 0 or task.index + 1 == len(world.tasks):
            _consolidate(mem, tally)
            if job.arm.reviewer_error is not None and _review(world, mem, task.index, job, tally):
                _consolidate(mem, tally)  # the approvals, applied as a worker would
            teachings.consolidated()


def _review(world: World, mem: Memory, t: int, job: Job, tally: _Tally) -> int:
    """Decide every pending edit as a reviewer who knows the world's truth at time ``t`` and errs at
    the arm's rate: an ARCHIVE or REVISE is right where the insight is not good (a REVISE also needs
    a good new text), an ADD or KEEP where the lesson is good; an insight the world does not know
    is let through. Returns how many were decided."""
    err = job.arm.reviewer_error or 0.0
    pending = mem.reviews(NAMESPACE)
    texts = {n.id: n.text for n in mem.insights(NAMESPACE)}
    for item in pending:
        old = world.by_text.get(texts.get(item.insight_id or "", ""))
        new = world.by_text.get(item.text or "")
        if item.op in ("ARCHIVE", "REVISE"):
            right = old is None or not world.is_good(old, t)
            if item.op == "REVISE" and new is not None:
                right = right and world.is_good(new, t)
        else:
            right = new is None or world.is_good(new, t)
        u = uuid.uuid5(_EVENT_NS, f"review:{job.seed}:{item.review_id}").int / 2**128
        approve = right != (u < err)
        tally.outcomes["review_approved" if approve else "review_rejected"] += 1
        tally.outcomes["review_wrong"] += approve != right
        call = mem.approve if approve else mem.reject
        call(item.review_id, namespace=NAMESPACE, by="reviewer")
    return len(pending)


def _harms(world: World, task: Task, text: str) -> bool:
    lesson = world.by_text.get(text)
    return lesson is not None and world.effect(lesson, task.topic, task.index) < 0


def _count_served(
    world: World, task: Task, served: list[Lesson | None], tally: _Tally, teachings: _Teachings
) -> str | None:
    """Tally the servings; the key of the lesson this task's query taught if it counts as a return."""
    for lesson in served:
        if lesson is None:
            tally.unknown_served += 1
            continue
        tally.served[lesson.key] += 1
        effect = world.effect(lesson, task.topic, task.index)
        if effect < 0:
            tally.harmful[lesson.key] += 1
        tally.helpful += effect > 0
    target = teachings.target(task)
    if target is None:
        return None
    kind, key = target
    if not world.is_good(world.lessons[key], task.index):
        return None  # drift turned the taught lesson bad: ranking it first is no longer the goal
    first = served[0] if served else None
    hits = tally.hits[kind]
    hits["n"] += 1
    hits["served"] += any(x is not None and x.key == key for x in served)
    if first is not None and first.key == key:
        hits["first"] += 1
    elif first is None:
        tally.missed_for["nothing served"] += 1
    else:
        same = "" if first.home in (None, task.topic) else ", another topic"
        tally.missed_for[f"{first.kind}{same}"] += 1
    return key


def _consolidate(mem: Memory, tally: _Tally) -> None:
    report = mem.consolidate()
    tally.operations.update(report.operations)
    tally.outcomes.update(report.outcomes)
    tally.dead_lettered += report.dead_lettered
    tally.deferred += report.deferred


def _final_state(world: World, mem: Memory, tally: _Tally, arm: ArmSpec) -> dict[str, Any]:
    """The memory at the end: states, good insights archived (and by whom), every edit by the
    ground-truth kind of its insight, and the most served lessons."""
    end = len(world.tasks) - 1
    nodes = mem.insights(NAMESPACE)
    kind_of = {n.id: getattr(world.by_text.get(n.text), "kind", "unknown") for n in nodes}
    edits: Counter[str] = Counter()
    archived_by: Counter[str] = Counter()
    seen: set[tuple[str, str, str]] = set()
    good = good_archived = 0
    for node in nodes:
        history = mem.graph.history(node.id)
        for h in history:
            ident = (h.event_id, h.op, h.insight_id or h.new_id or "")
            if ident in seen:
                continue
            seen.add(ident)
            about = h.insight_id if h.op != "ADD" else h.new_id
            # an ADD that repeated an active insight made no node: its proposal's kind is unknown here
            kind = kind_of.get(about or "", "repeat" if h.outcome == "duplicate" else "unknown")
            edits[f"{kind}|{h.op}|{h.outcome}|{_who(h.decided_by)}"] += 1
        lesson = world.by_text.get(node.text)
        if lesson is None or not world.is_good(lesson, end):
            continue
        good += 1
        if not node.active:
            good_archived += 1
            retired = [
                h
                for h in history
                if h.insight_id == node.id and h.outcome in ("archived", "revised", "stale")
            ]
            archived_by[_who(retired[-1].decided_by) if retired else "unknown"] += 1
    out: dict[str, Any] = {
        "active": sum(n.active for n in nodes),
        "archived": sum(not n.active for n in nodes),
        "good_insights": good,
        "good_archived": good_archived,
        "good_archived_by": dict(archived_by),
        "edits": dict(edits),
        "top_served": _top_served(world, nodes, tally),
    }
    if arm.llm:
        from evomem.adapters.llm.usage import summary

        usage = summary(mem.redis, mem.settings)
        out["llm"] = {
            k: usage[k]
            for k in (
                "calls",
                "events_judged",
                "prompt_tokens",
                "completion_tokens",
                "prompt_tokens_per_event",
            )
        }
    return out


def _top_served(world: World, nodes: list[Any], tally: _Tally) -> list[dict[str, Any]]:
    rows = []
    for key, times in tally.served.most_common(TOP_SERVED):
        lesson = world.lessons[key]
        mine = [n for n in nodes if world.by_text.get(n.text) is lesson]
        home = world.topics[lesson.home].name if lesson.home is not None else "every topic"
        rows.append(
            {
                "lesson": key,
                "kind": lesson.kind,
                "home": home,
                "text": lesson.texts[0],
                "served": times,
                "harmful_where_served": tally.harmful[key],
                "nodes": len(mine),
                "states": dict(Counter(n.state for n in mine)),
                "positive": sum(len(n.positive) for n in mine),
                "negative": sum(len(n.negative) for n in mine),
            }
        )
    return rows


def _who(decided_by: str) -> str:
    """feedback | rules | llm (the LLM's model and prompt version dropped)."""
    return decided_by.split(":", 1)[0]


__all__ = ["CONSOLIDATE_EVERY", "NAMESPACE", "Job", "Observer", "run_job"]
