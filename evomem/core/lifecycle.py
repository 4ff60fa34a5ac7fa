"""Undo and protect: from an operator's ``ControlRequest`` to a ``ControlPlan`` a store applies.

A revert never deletes anything. Each edit an event applied is undone by its inverse, written as
new edits through the same pipeline (the request travels on the event stream, a worker plans it and
the store applies the plan atomically), and recorded in the history as "reverted <edit> by <who>":

* KEEP (kept, evidence_only, forwarded), an ADD that found a twin (duplicate) or an archived
  insight (evidence_only, forwarded, restored): the query is withdrawn from the Ω⁺ it joined; a
  restored insight is archived again.
* ARCHIVE/REVISE that only recorded evidence (negative_evidence, pinned): q withdrawn from Ω⁻.
* ARCHIVE that archived: q withdrawn from Ω⁻ and the insight active again.
* REVISE (revised, merged): the previous version active again, q withdrawn from its Ω⁻; the revised
  node archived (revised) or q withdrawn from the insight it merged into (merged: the evidence that
  insight inherited stays, as inheritance is a union). Lineage (revised_from / revised_to) is kept.
* ADD (added): the new insight archived and q withdrawn from its Ω⁺.

An edit is undone once whatever asks: every store keeps the edits it reverted, so a request
repeated, or two overlapping ``since`` rollbacks, undo nothing twice. A namespace rolled back to T
undoes its events newest first, so a chain of revisions unwinds to what was served at T. Pinning
an insight keeps every controller (explicit verdicts included) from archiving or revising it: a
harmful verdict records its evidence and leaves the insight active.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from schemas import ControlRequest

#: The ops of the edits control requests write into the history (no event's edits: never reverted).
CONTROL_OPS = frozenset({"REVERT", "PIN", "UNPIN"})

UndoKind = Literal["-pos", "-neg", "activate", "archive"]

#: Inverse actions of each outcome an applied edit can have (``EditOutcome.outcome``), as
#: (action, which node: "insight" | "new" | "forwarded").
INVERSES: dict[str, tuple[tuple[UndoKind, str], ...]] = {
    "kept": (("-pos", "insight"),),
    "evidence_only": (("-pos", "insight"),),
    "forwarded": (("-pos", "insight"), ("-pos", "forwarded")),
    "duplicate": (("-pos", "insight"),),
    "restored": (("-pos", "insight"), ("archive", "insight")),
    "negative_evidence": (("-neg", "insight"),),
    "pinned": (("-neg", "insight"),),
    "archived": (("-neg", "insight"), ("activate", "insight")),
    "revised": (("archive", "new"), ("-neg", "insight"), ("activate", "insight")),
    "merged": (("-pos", "new"), ("-neg", "insight"), ("activate", "insight")),
    "added": (("-pos", "new"), ("archive", "new")),
    "stale": (("activate", "insight"),),  # archived by the staleness sweep (evomem.core.staleness)
}


@dataclass(frozen=True, slots=True)
class AppliedEdit:
    """One edit as its event applied it: what the store recorded of it."""

    op: str
    outcome: str
    insight_id: str | None
    new_id: str | None = None
    forwarded_to: str | None = None
    judged: bool = True  # its evidence counted toward the evidence policy


@dataclass(frozen=True, slots=True)
class AppliedEvent:
    event_id: str
    query_id: str
    edits: tuple[AppliedEdit, ...]


class UndoAction(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: UndoKind
    insight_id: str


class UndoStep(BaseModel):
    """The inverse of one applied edit; ``key`` names the edit, so it is undone once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    event_id: str
    query_id: str
    op: str
    outcome: str
    insight_id: str | None
    new_id: str | None
    judged: bool
    actions: list[UndoAction]
    note: str = ""  # the history's words: "reverted <edit> by <who>"


class ControlPlan(BaseModel):
    """Everything one control request does, resolved to ids before it reaches a store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    namespace: str
    action: Literal["revert", "pin", "unpin", "retire"]
    by: str
    reason: str | None = None
    insight_id: str | None = None  # pin / unpin
    steps: list[UndoStep] = []  # revert, in the order they are applied
    note: str = ""  # pin / unpin: the history's words, "pinned by <who>: <why>"; retire: the reason
    expected_version: int | None = None  # retire: the version found stale (edited since: no-op)
    at: datetime

    def to_json(self) -> str:
        return self.model_dump_json()


@dataclass(frozen=True, slots=True)
class ControlResult:
    request_id: str
    replayed: bool
    reverted: int = 0  # edits undone by this request
    skipped: int = 0  # edits named that an earlier request had undone already
    changed: bool = False  # pin / unpin: the insight's pin changed; retire: it was archived


def edit_key(event_id: str, n: int, edit: AppliedEdit) -> str:
    return f"{event_id}|{n}|{edit.op}|{edit.insight_id or ''}|{edit.new_id or ''}"


def undo_steps(event: AppliedEvent, insight_id: str | None = None) -> list[UndoStep]:
    """The inverses of an event's edits, last edit first; only those touching ``insight_id`` if given."""
    steps: list[UndoStep] = []
    for n, edit in reversed(list(enumerate(event.edits))):
        inverse = INVERSES.get(edit.outcome)
        if inverse is None:  # rejected: it changed nothing
            continue
        nodes = {"insight": edit.insight_id, "new": edit.new_id, "forwarded": edit.forwarded_to}
        if insight_id is not None and insight_id not in nodes.values():
            continue
        actions = [UndoAction(kind=k, insight_id=i) for k, which in inverse if (i := nodes[which])]
        steps.append(
            UndoStep(
                key=edit_key(event.event_id, n, edit),
                event_id=event.event_id,
                query_id=event.query_id,
                op=edit.op,
                outcome=edit.outcome,
                insight_id=edit.insight_id,
                new_id=edit.new_id or edit.forwarded_to,
                judged=edit.judged,
                actions=actions,
            )
        )
    return steps


def plan_control(request: ControlRequest, events: Sequence[AppliedEvent], at: datetime) -> ControlPlan:
    """The plan of a request; ``events`` are the events a revert undoes, newest first."""
    steps: list[UndoStep] = []
    why = f": {request.reason}" if request.reason else ""
    if request.action == "revert":
        only = request.insight_id if request.event_id is not None else None
        for event in events:
            steps.extend(
                s.model_copy(
                    update={
                        "note": f"reverted {s.op} ({s.outcome}) of event {s.event_id} by {request.by}{why}"
                    }
                )
                for s in undo_steps(event, only)
            )
    if request.action not in ("revert", "pin", "unpin", "retire"):
        raise ValueError(f"{request.action} is not applied as a control plan")
    note = {
        "revert": "",
        "retire": f"stale: {request.reason or 'not helping'}",
    }.get(request.action, f"{request.action}ned by {request.by}{why}")
    return ControlPlan(
        request_id=str(request.request_id),
        namespace=request.namespace,
        action=request.action,
        by=request.by,
        reason=request.reason,
        insight_id=request.insight_id if request.action != "revert" else None,
        steps=steps,
        note=note,
        expected_version=request.expected_version,
        at=at,
    )


__all__ = [
    "CONTROL_OPS",
    "INVERSES",
    "AppliedEdit",
    "AppliedEvent",
    "ControlPlan",
    "ControlResult",
    "UndoAction",
    "UndoStep",
    "edit_key",
    "plan_control",
    "undo_steps",
]
