"""Point-in-time reads: an insight's state and evidence at a time T, from its state now and the
history kept since T (``GraphReader.history``), each edit recorded after T undone, newest first.

Each history record is invertible from what it holds: an event's edit by the inverse of its outcome
(``lifecycle.INVERSES``, the same table a revert applies), a REVERT by redoing what it undid (the
record keeps the undone outcome, ``undoes``), a PIN or UNPIN by the other. Queries and insights
created after T did not exist at T: they are left out, and with them the evidence they carry.
What no record can give back: the Ω⁺ an insight inherited when another REVISE merged into it after
T (a union, not recorded member by member), and, with ``QUERY_DEGREE`` > 0, a query-graph edge a
later, more similar query pushed out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from evomem.core.lifecycle import CONTROL_OPS, INVERSES, UndoKind
from evomem.core.ports import EditRecord
from schemas import InsightNode, QueryNode

_REDO: dict[UndoKind, str] = {"-pos": "+pos", "-neg": "+neg", "activate": "archive", "archive": "activate"}


@dataclass
class NodeAt:
    """What an as-of read rolls back: an insight's state, evidence and pin."""

    state: str
    positive: set[str] = field(default_factory=set)
    negative: set[str] = field(default_factory=set)
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A namespace as it stood at ``at``: what a retrieval at that time read."""

    namespace: str
    at: datetime
    insights: dict[str, InsightNode]
    inherits: dict[str, tuple[str, ...]]
    queries: dict[str, QueryNode]
    supports: dict[str, set[str]]  # query -> the insights whose Ω⁺ hold it
    harms: dict[str, set[str]]
    neighbours: dict[str, dict[str, float]]


def recorded_at(record: EditRecord) -> datetime:
    return datetime.fromisoformat(record.at)


def records_after(histories: Iterable[Sequence[EditRecord]], at: datetime) -> list[EditRecord]:
    """Every edit recorded after ``at`` (a record sits in the history of each node it touched: once
    here), newest first."""
    seen: dict[tuple[str | None, ...], tuple[datetime, int, EditRecord]] = {}
    n = 0
    for history in histories:
        for r in history:
            n += 1
            when = recorded_at(r)
            key = (r.event_id, r.op, r.outcome, r.insight_id, r.new_id, r.query_id, r.at)
            if when > at and key not in seen:
                seen[key] = (when, n, r)
    return [r for _, _, r in sorted(seen.values(), key=lambda x: (x[0], x[1]), reverse=True)]


def undo_actions(record: EditRecord) -> list[tuple[str, str]]:
    """(action, insight id) that take one record's edit back: ``-pos``/``+pos``/``-neg``/``+neg``
    of the record's query, ``activate``/``archive``, ``pin``/``unpin``."""
    nodes = {"insight": record.insight_id, "new": record.new_id, "forwarded": record.new_id}
    if record.op in ("PIN", "UNPIN"):
        return [("unpin" if record.op == "PIN" else "pin", record.insight_id or "")]
    if record.op == "REVERT":
        undone = INVERSES.get(record.undoes or "", ())
        return [(_REDO[k], i) for k, which in reversed(undone) if (i := nodes[which])]
    if record.op in CONTROL_OPS:
        return []
    return [(k, i) for k, which in INVERSES.get(record.outcome, ()) if (i := nodes[which])]


def roll_back(nodes: dict[str, NodeAt], records: Sequence[EditRecord]) -> None:
    """Undo ``records`` (newest first) on ``nodes`` in place; nodes not held are skipped."""
    for r in records:
        for action, insight_id in undo_actions(r):
            node = nodes.get(insight_id)
            if node is None:
                continue
            if action == "-pos":
                node.positive.discard(r.query_id)
            elif action == "+pos":
                node.positive.add(r.query_id)
            elif action == "-neg":
                node.negative.discard(r.query_id)
            elif action == "+neg":
                node.negative.add(r.query_id)
            elif action in ("activate", "archive"):
                node.state = "active" if action == "activate" else "archived"
            else:
                node.pinned = action == "pin"


__all__ = ["NodeAt", "Snapshot", "recorded_at", "records_after", "roll_back", "undo_actions"]
