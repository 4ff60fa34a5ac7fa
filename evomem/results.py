"""What the SDK's calls return, one shape each whatever answers them (the memory in this process or a
retrieval service): a retrieval and its scored insights, a consolidation's counts, an insight with its
lineage and its edit history. Plain data, no I/O; the core and the pipeline build them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from schemas import InsightNode


@dataclass(frozen=True, slots=True)
class ScoredInsight:
    """A served insight with the terms of its score r = s − λc.

    ``support`` and ``conflict`` are the counts of Eq. 9 whatever the scoring; ``score`` is what
    ranked; ``similarity`` is the similarity of the most similar query that supports it."""

    id: str
    text: str
    score: float
    support: int
    conflict: int
    version: int = 0
    similarity: float = 0.0


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What ``Memory.retrieve`` returns; ``report`` takes it back after the task."""

    id: str
    namespace: str
    query: str
    insights: tuple[ScoredInsight, ...]
    similar: tuple[str, ...]
    expanded: int
    candidates: int = 0
    """|Eq. 7's candidates|: the active insights Q̃ˢ supports, which were ranked."""

    def render(self, header: str = "Insights from similar past tasks (most reliable first):") -> str:
        """A block to put in the agent's prompt; empty when there is nothing to serve."""
        if not self.insights:
            return ""
        lines = [header, *(f"{n}. {i.text}" for n, i in enumerate(self.insights, 1))]
        return "\n".join(lines)


@dataclass
class ConsolidationReport:
    """What ``Memory.consolidate`` did: events taken, applied, replayed (already applied once),
    dead-lettered, deferred (to be tried again), and the edits by operation and outcome."""

    events: int = 0
    applied: int = 0
    replayed: int = 0
    dead_lettered: int = 0
    deferred: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (operation, outcome)
    #: Where the batch's time went (ns): prepare (parse, retrieval records), decide (stored decisions
    #: and the controller), twins (near-duplicate search), plan, apply (the edit scripts), ack.
    stages_ns: Counter[str] = field(default_factory=Counter)

    def merge(self, other: ConsolidationReport) -> None:
        self.events += other.events
        self.applied += other.applied
        self.replayed += other.replayed
        self.dead_lettered += other.dead_lettered
        self.deferred += other.deferred
        self.operations.update(other.operations)
        self.outcomes.update(other.outcomes)
        self.decisions.update(other.decisions)
        self.stages_ns.update(other.stages_ns)

    def as_dict(self) -> dict[str, object]:
        return {
            "events": self.events,
            "applied": self.applied,
            "replayed": self.replayed,
            "dead_lettered": self.dead_lettered,
            "deferred": self.deferred,
            "operations": dict(self.operations),
            "outcomes": dict(self.outcomes),
        }


@dataclass(frozen=True, slots=True)
class EditRecord:
    """One entry of an insight's append-only edit history: the same record in the store, the SDK,
    the HTTP API and the MCP tools."""

    event_id: str
    op: str
    outcome: str
    insight_id: str | None
    new_id: str | None
    query_id: str
    decided_by: str
    at: str


@dataclass(frozen=True, slots=True)
class LineageStep:
    """One insight of a revision chain, oldest first."""

    id: str
    text: str
    state: str
    version: int


@dataclass(frozen=True, slots=True)
class InsightView:
    """An insight as ``Memory.insight`` shows it: the node, its lineage (ids, oldest first), the
    evidence edges into it (local stores only; a retrieval service sends none) and its edit history.
    The node's fields read through: ``view.text``, ``view.state``, ``view.positive``, ..."""

    node: InsightNode
    lineage: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    history: tuple[EditRecord, ...]

    def __getattr__(self, name: str) -> Any:  # text, state, positive, negative, version, ...
        return getattr(self.node, name)


__all__ = [
    "ConsolidationReport",
    "EditRecord",
    "InsightView",
    "LineageStep",
    "Retrieval",
    "ScoredInsight",
]
