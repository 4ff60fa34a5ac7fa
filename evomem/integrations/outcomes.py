"""How the end of an agent run becomes a task event, for every framework adapter alike.

A framework tells how its run ended in one of three ways: a final output, an exception (a guardrail
that tripped is one), or nothing at all. ``Outcome`` is what the application says about that end —
``status``, the verdicts on the insights it was served, a lesson — and a ``Judge`` is the function
that says it from the final output. Without a judge a final output counts as resolved and an
exception as failed. Everything here goes through the public SDK (``retrieve``, ``render``,
``report``) of any client: ``Memory``, ``RemoteMemory`` or an object with the same calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from evomem.results import InsightView, Retrieval
from evomem.sdk.aio import AsyncMemory
from schemas.models import PartialVerdict

Status = Literal["resolved", "failed"]


class MemoryLike(Protocol):
    """The SDK calls the adapters use: ``Memory`` (in process or a service's client) has them."""

    def retrieve(
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval: ...

    def report(
        self,
        retrieval: Retrieval | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str: ...

    def insight(self, insight_id: str, namespace: str | None = None) -> InsightView: ...


VerdictValue = Literal["helpful", "harmful"] | PartialVerdict
MAX_STEP_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run achieved, as the task event says it (``TaskEvent``'s fields).

    ``verdicts`` maps an insight id *or its number in the rendered block* (1 for the first insight
    served) to ``"helpful"``, ``"harmful"`` or a ``PartialVerdict``: a verdict moves an insight's
    evidence where an outcome alone never retires it."""

    status: Status
    final_answer: str | None = None
    feedback: str | None = None
    proposed_insight: str | None = None
    verdicts: Mapping[str | int, VerdictValue] = field(default_factory=dict)
    trajectory: Sequence[str | dict[str, Any]] = ()

    def with_trajectory(self, steps: Sequence[str | dict[str, Any]]) -> Outcome:
        """This outcome with ``steps`` as its trajectory, unless it names its own."""
        return self if self.trajectory else replace(self, trajectory=tuple(steps))


#: From a run's final output to its outcome. Returning a bool is short for ``Outcome(status=...)``.
Judge = Callable[[Any], "Outcome | bool"]


def judged(output: Any, judge: Judge | None) -> Outcome:
    """The outcome of a run that produced ``output``: the judge's, or resolved without one."""
    answer = output if isinstance(output, str) else repr(output)
    if judge is None:
        return Outcome("resolved", final_answer=answer)
    said = judge(output)
    if isinstance(said, Outcome):
        return said if said.final_answer is not None else replace(said, final_answer=answer)
    return Outcome("resolved" if said else "failed", final_answer=answer)


def failed(exc: BaseException, kind: str = "the run raised") -> Outcome:
    """The outcome of a run that ended in ``exc`` (an error, a tripped guardrail, a limit)."""
    return Outcome("failed", feedback=f"{kind} {type(exc).__name__}: {exc}"[:MAX_STEP_CHARS])


def insight_feedback(retrieval: Retrieval, verdicts: Mapping[str | int, VerdictValue]) -> dict[str, Any]:
    """Verdicts keyed by insight id, a number (1-based, as ``render`` numbers them) resolved to the
    id it names; a number that names no served insight is an error, as an unknown id is."""
    out: dict[str, Any] = {}
    for key, verdict in verdicts.items():
        if isinstance(key, int) and not isinstance(key, bool):
            if not 1 <= key <= len(retrieval.insights):
                raise ValueError(f"verdict on insight number {key}: {len(retrieval.insights)} were served")
            key = retrieval.insights[key - 1].id
        out[str(key)] = verdict
    return out


def event_fields(retrieval: Retrieval, outcome: Outcome, agent_id: str | None = None) -> dict[str, Any]:
    """The keyword arguments of ``report(retrieval, **fields)`` for this outcome."""
    fields: dict[str, Any] = {
        "status": outcome.status,
        "final_answer": outcome.final_answer[:MAX_STEP_CHARS] if outcome.final_answer else None,
        "feedback": outcome.feedback,
        "proposed_insight": outcome.proposed_insight,
        "insight_feedback": insight_feedback(retrieval, outcome.verdicts) or None,
        "trajectory": [s[:MAX_STEP_CHARS] if isinstance(s, str) else s for s in outcome.trajectory] or None,
        "agent_id": agent_id,
    }
    return {k: v for k, v in fields.items() if v is not None}


def report(memory: MemoryLike, retrieval: Retrieval, outcome: Outcome, agent_id: str | None = None) -> str:
    """Report ``outcome`` with the retrieval it followed; the event id."""
    return memory.report(retrieval, **event_fields(retrieval, outcome, agent_id))


async def retrieve_async(memory: MemoryLike | AsyncMemory, task: str, namespace: str) -> Retrieval:
    """``retrieve`` from async code: awaited on an ``AsyncMemory``, in a worker thread on a
    ``Memory`` (whose calls block)."""
    if isinstance(memory, AsyncMemory):
        return await memory.retrieve(task, namespace)
    return await asyncio.to_thread(memory.retrieve, task, namespace)


async def report_async(
    memory: MemoryLike | AsyncMemory, retrieval: Retrieval, outcome: Outcome, agent_id: str | None = None
) -> str:
    """``report`` from async code (as ``retrieve_async``)."""
    fields = event_fields(retrieval, outcome, agent_id)
    if isinstance(memory, AsyncMemory):
        return str(await memory.report(retrieval, **fields))
    return await asyncio.to_thread(report, memory, retrieval, outcome, agent_id)


def instructions_with(base: str | None, retrieval: Retrieval) -> str:
    """``base`` with the rendered insights after it (``base`` alone when none were served)."""
    block = retrieval.render()
    return "\n\n".join(part for part in (base, block) if part)


__all__ = [
    "Judge",
    "MemoryLike",
    "Outcome",
    "Status",
    "event_fields",
    "failed",
    "insight_feedback",
    "instructions_with",
    "judged",
    "report",
    "report_async",
    "retrieve_async",
]
