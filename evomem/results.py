"""What the SDK's calls return, one shape each whatever answers them (the memory in this process or a
retrieval service): a retrieval and its scored insights, a consolidation's counts, an insight with its
lineage and its edit history. Plain data, no I/O; the core and the pipeline build them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    note: str | None = None  # a control edit's words: "reverted ... by ...", "pinned by ...: why"
    undoes: str | None = None  # a REVERT: the outcome of the edit it undid (what an as-of read redoes)


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


@dataclass(frozen=True, slots=True)
class SimilarQuery:
    """A past query a retrieval found similar (Eq. 2), with its cosine to the task."""

    id: str
    text: str | None
    similarity: float


@dataclass(frozen=True, slots=True)
class ServedRecord:
    """An insight a retrieval served, with the terms of its score then."""

    id: str
    text: str | None
    score: float | None
    support: int | None
    conflict: int | None
    similarity: float | None


@dataclass(frozen=True, slots=True)
class RetrievalAudit:
    """What a retrieval served and why: the task, when, Eq. 2's similar queries, the ranked insights."""

    id: str
    namespace: str
    query: str
    at: str | None
    similar: tuple[SimilarQuery, ...]
    insights: tuple[ServedRecord, ...]


EventStateName = Literal["queued", "applied", "dead-lettered"]


class AppliedEdit(BaseModel):
    """One edit the event's consolidation applied (or refused: ``outcome`` says)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str = Field(description="KEEP | ARCHIVE | REVISE | ADD")
    insight_id: str | None = None
    outcome: str = Field(description="what became of the edit: kept, archived, revised, added, rejected, ...")
    new_id: str | None = Field(None, description="the insight a REVISE or an ADD created")


class EventState(BaseModel):
    """Where a reported event is (``Memory.event``, ``GET /v1/events/{id}``): still ``queued`` (in
    the stream, delivered or not, retried after a transient failure), ``applied`` (with its edits),
    or ``dead-lettered`` (with the reason)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str
    namespace: str
    state: EventStateName
    edits: list[AppliedEdit] = Field(default_factory=list, description="when applied: what it changed")
    created: list[str] = Field(default_factory=list, description="when applied: the insights it created")
    reason: str | None = Field(None, description="when dead-lettered: why")
    field: str | None = Field(None, description="when dead-lettered: the field that was wrong, if one was")
    dead_letter_id: str | None = Field(None, description="when dead-lettered: its entry (evomem dlq)")


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """An edit held for review (``evomem review list``, ``GET /v1/reviews``): what it would do, why it
    was held, and, once decided, by whom; an approved one names the event it was applied as (what a
    revert takes)."""

    review_id: str
    namespace: str
    state: str  # pending | approved | rejected
    op: str  # KEEP | ARCHIVE | REVISE | ADD
    insight_id: str | None
    new_id: str | None
    text: str | None  # a REVISE's or ADD's new text
    event_id: str  # the event whose edit it is
    decided_by_controller: str
    reason: str
    held_at: str
    decided_by: str | None = None
    decided_at: str | None = None
    note: str | None = None
    applied_event_id: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in self.__slots__}


__all__ = [
    "AppliedEdit",
    "ConsolidationReport",
    "EditRecord",
    "EventState",
    "EventStateName",
    "InsightView",
    "LineageStep",
    "Retrieval",
    "RetrievalAudit",
    "ReviewItem",
    "ScoredInsight",
    "ServedRecord",
    "SimilarQuery",
]
