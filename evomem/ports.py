"""The small interfaces the core talks to; adapters in ``stores/`` and ``index/`` implement them.

``GraphStore`` is the system of record (Redis, or the in-memory reference); ``VectorIndex`` is the
retrieval read model (Qdrant), written only by the projector.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from evomem.editing import EditPlan
from evomem.retrieval import Candidate
from schemas import ControllerDecision, InsightNode, QueryNode

Vector = Mapping[int, float] | Sequence[float]
"""A sparse vector as {index: value} or a dense one as a list of floats."""


@dataclass(frozen=True, slots=True)
class EditOutcome:
    """What one planned edit did once applied (the evidence policy and superseded rules decide)."""

    op: str
    insight_id: str | None
    outcome: (
        str  # kept forwarded evidence_only negative_evidence archived revised merged added duplicate rejected
    )
    new_id: str | None = None
    forwarded_to: str | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    event_id: str
    replayed: bool  # True when the event had been applied before: nothing changed
    outcomes: tuple[EditOutcome, ...] = ()
    created: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.outcome] = out.get(o.outcome, 0) + 1
        return out


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change feed: node ``id`` of ``kind`` reached ``version``."""

    cursor: str
    kind: Literal["insight", "query"]
    id: str
    version: int


@dataclass(frozen=True, slots=True)
class RetrievalRecord:
    """What a retrieval served, so a later report can refer to it by id."""

    id: str
    namespace: str
    query: str
    similar: tuple[str, ...]
    insight_ids: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EditRecord:
    """One entry of the append-only edit history."""

    event_id: str
    op: str
    outcome: str
    insight_id: str | None
    new_id: str | None
    query_id: str
    decided_by: str
    at: str


class GraphStore(Protocol):
    def apply(self, plan: EditPlan) -> ApplyResult:
        """Apply a plan atomically; a plan whose event was applied before changes nothing."""
        ...

    def apply_many(self, plans: Collection[EditPlan]) -> list[ApplyResult | Exception]:
        """Apply plans in order, each atomically; a plan that fails gives its exception in its place."""
        ...

    def insights(self, ids: Collection[str]) -> dict[str, InsightNode]: ...

    def queries(self, ids: Collection[str]) -> dict[str, QueryNode]: ...

    def neighbours(self, query_ids: Collection[str]) -> dict[str, set[str]]: ...

    def states(self, ids: Collection[str]) -> dict[str, str]:
        """The state (active | archived) of each insight id that exists."""
        ...

    def namespace_of(self, ids: Collection[str]) -> dict[str, str]:
        """The namespace of each insight id that exists (missing ids are left out)."""
        ...

    def history(self, insight_id: str) -> list[EditRecord]: ...

    def lineage(self, insight_id: str) -> list[str]:
        """The revision chain through this insight, oldest first."""
        ...

    def edges_into(self, insight_id: str) -> list[tuple[str, str]]:
        """Hyperedges (ι_a, q) that contextualise this insight (Eq. 18)."""
        ...

    def link_queries(self, query_id: str, similar: Collection[str]) -> None:
        """Link a query both ways to similar queries of its namespace (idempotent)."""
        ...

    def unlinked(self, query_ids: Collection[str]) -> set[str]:
        """Those of the queries that still wait for the projector to link them."""
        ...

    def save_decision(self, event_id: str, decision: ControllerDecision) -> ControllerDecision:
        """Store the decision unless one is stored; return the one that is stored."""
        ...

    def save_decisions(self, decisions: Mapping[str, ControllerDecision]) -> dict[str, ControllerDecision]:
        """``save_decision`` for many events in one round trip."""
        ...

    def load_decision(self, event_id: str) -> ControllerDecision | None: ...

    def load_decisions(self, event_ids: Collection[str]) -> dict[str, ControllerDecision]: ...

    def load_retrievals(self, retrieval_ids: Collection[str]) -> dict[str, RetrievalRecord]: ...

    def is_applied(self, event_id: str) -> bool: ...

    def save_retrieval(self, record: RetrievalRecord, ttl_s: int) -> None: ...

    def load_retrieval(self, retrieval_id: str) -> RetrievalRecord | None: ...

    def changes(self, after: str, count: int) -> list[Change]: ...

    def namespaces(self) -> set[str]: ...

    def insight_ids(self, namespace: str) -> set[str]: ...

    def query_ids(self, namespace: str) -> set[str]: ...


class VectorIndex(Protocol):
    identity: str
    fresh: bool
    """True when the index was created empty by this open: the projector starts from the beginning."""

    def upsert_queries(self, points: Sequence[tuple[QueryNode, Vector]]) -> None: ...

    def write_insights(self, nodes: Sequence[InsightNode], vectors: Mapping[str, Vector]) -> None:
        """Write insights, never replacing a stored version with an older one. ``vectors`` holds the
        vector of every node the index does not have yet; the others get their payload updated."""
        ...

    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        """Top-k past queries of the namespace by cosine similarity, best first (Eq. 2)."""
        ...

    def candidate_insights(self, namespace: str, expanded: Collection[str], limit: int) -> list[Candidate]:
        """Active insights of the namespace with Ω⁺ ∩ Q̃ˢ ≠ ∅ (Eq. 7), with their evidence."""
        ...

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        """Active insights nearest to a text vector (for duplicate checks)."""
        ...

    def insight_versions(self, ids: Collection[str]) -> dict[str, int]: ...

    def count(self, kind: Literal["insight", "query"]) -> int: ...

    def close(self) -> None: ...
