"""The ports the pipeline talks to, each sized to one role; ``evomem.adapters`` implements them.

The system of record (Redis, or the in-memory reference) is seen through four roles: ``EditStore``
(what consolidation reads and writes), ``RetrievalGraph`` (what the agent's retrieval reads and the
record it leaves), ``ProjectionSource`` (what the projector reads of a changed node) and
``GraphReader`` (inspection, export, stats); ``GraphStore`` is all four, what a store implements and
the contract suite checks. ``EventLog`` is the task-event stream as consolidation consumes it;
``ChangeFeed`` the change feed as the projector follows it; ``VectorIndex`` the retrieval read model
(Qdrant), written only by the projector; ``Embedder`` turns text into vectors.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from evomem.core.editing import EditPlan
from evomem.core.hashing import DenseVec, SparseVec
from evomem.core.lifecycle import AppliedEvent, ControlPlan, ControlResult
from evomem.core.retrieval import ServingInsight
from evomem.core.review import HeldEdit, Review, ReviewDecision
from evomem.core.staleness import ServedCounts
from evomem.results import EditRecord as EditRecord  # re-exported: the stores build them
from schemas import ControllerDecision, ControlRequest, InsightNode, QueryNode, TaskEvent

Vector = Mapping[int, float] | Sequence[float]
"""A sparse vector as {index: value} or a dense one as a list of floats."""


@dataclass(frozen=True, slots=True)
class EditOutcome:
    """What one planned edit did once applied (the evidence policy and superseded rules decide)."""

    op: str
    insight_id: str | None
    #: kept forwarded evidence_only restored negative_evidence archived revised merged added duplicate
    #: rejected
    outcome: str
    new_id: str | None = None
    forwarded_to: str | None = None
    judged: bool = True  # its evidence counts toward the evidence policy (a revert takes it back)


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
    """One entry of the change feed: node ``id`` of ``kind`` in ``namespace`` reached ``version``."""

    cursor: str
    kind: Literal["insight", "query"]
    namespace: str
    id: str
    version: int
    problem: str | None = None
    """Why the entry cannot be a change (a malformed field): the projector skips it to a dead letter."""


@dataclass(frozen=True, slots=True)
class RetrievalRecord:
    """What a retrieval served, so a later report can refer to it by id.

    ``similar_scores``: Eq. 2's cosine of each similar query (the weights of the query graph's new
    edges); ``similarity``: for each served insight, the similarity of its best supporting query
    (what the rule controller reads as the insight's relevance to the task)."""

    id: str
    namespace: str
    query: str
    similar: tuple[str, ...]
    insight_ids: tuple[str, ...]
    similar_scores: tuple[float, ...] = ()
    similarity: tuple[float, ...] = ()
    #: for the audit of what was served and why: each served insight's (score, support, conflict),
    #: and when (ISO 8601); empty in records written before they were kept
    scores: tuple[tuple[float, int, int], ...] = ()
    at: str | None = None
    #: the task's vector from a dense embedder (``evomem.core.embedding.pack_vector``), so that the
    #: query it becomes reaches every index without being embedded again; None: not kept
    vector: str | None = None


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """A controller decision as stored before it is applied, with the digest of its event."""

    decision: ControllerDecision
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class InsightHead:
    """An insight without its evidence sets: what a decision needs (text, state, counts)."""

    id: str
    namespace: str
    text: str
    state: str
    version: int
    positive_count: int = 0
    negative_count: int = 0
    judged_positive: int = 0  # the evidence the evidence policy weighs (not inferred from outcomes)
    judged_negative: int = 0

    @property
    def active(self) -> bool:
        return self.state == "active"


@dataclass(frozen=True, slots=True)
class QueryPoint:
    """A query as the read model holds it: its text, and the insights it supports and harms."""

    id: str
    namespace: str
    text: str
    status: str
    version: int
    supports: tuple[str, ...] = ()
    harms: tuple[str, ...] = ()
    #: the vector its retrieval computed (``pack_vector``), when it was reported with one
    vector: str | None = None


@dataclass(frozen=True, slots=True)
class InsightPoint:
    """An insight as the read model holds it: what retrieval filters on and serves, no evidence."""

    id: str
    namespace: str
    text: str
    state: str
    version: int
    inherits: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QueryHit:
    """A past query found by similarity (Eq. 2), with the evidence it carries."""

    id: str
    score: float
    supports: tuple[str, ...] = ()
    harms: tuple[str, ...] = ()


#: The format of an export (``evomem export``): 2, neighbours carry their edge similarity; 1 (evomem 0.1)
#: is read too.
EXPORT_FORMAT = 2

#: Events of a namespace the live quality signal looks back over (``GraphStore.recent_quality``).
RECENT_EVENTS = 1000


@dataclass(frozen=True, slots=True)
class QualitySignal:
    """What the last ``events`` applied events of a namespace did to the insights they judged:
    ``judged`` served or named insights, of which ``harmed`` were found harmful (negative evidence),
    and ``retired`` insights archived or revised."""

    events: int = 0
    judged: int = 0
    harmed: int = 0
    retired: int = 0

    @property
    def harmful_share(self) -> float | None:
        """The share of judged insights found harmful where they were served (None: none judged)."""
        return self.harmed / self.judged if self.judged else None

    @property
    def retired_per_100_events(self) -> float | None:
        return 100 * self.retired / self.events if self.events else None


EventKey = tuple[str, str]
"""(namespace, event id): event ids are the client's and scoped to a namespace."""


class EditStore(Protocol):
    """What consolidation reads and writes. Insight ids are unique across namespaces, so insight
    reads take ids alone; query ids, event ids and retrieval ids are scoped to their namespace."""

    def apply(self, plan: EditPlan) -> ApplyResult:
        """Apply a plan atomically; a plan whose event was applied before changes nothing."""
        ...

    def apply_many(self, plans: Collection[EditPlan]) -> list[ApplyResult | Exception]:
        """Apply plans in order, each atomically; a plan that fails gives its exception in its place."""
        ...

    def heads(self, namespace: str, ids: Collection[str]) -> dict[str, InsightHead]:
        """The insights of the namespace among ``ids``, without their evidence sets."""
        ...

    def duplicate_candidates(self, namespace: str, bands: Collection[str]) -> set[str]:
        """Insights of the namespace registered in any of these near-duplicate buckets."""
        ...

    def save_decisions(self, decisions: Mapping[EventKey, StoredDecision]) -> dict[EventKey, StoredDecision]:
        """Store each decision unless one is stored for its event; return the stored ones."""
        ...

    def load_decisions(self, events: Collection[EventKey]) -> dict[EventKey, StoredDecision]: ...

    def load_retrievals(self, retrievals: Collection[EventKey]) -> dict[EventKey, RetrievalRecord]:
        """Retrieval records by (namespace, retrieval id)."""
        ...

    def namespace_of(self, ids: Collection[str]) -> dict[str, str]:
        """The namespace of each insight id that exists (missing ids are left out)."""
        ...


class RetrievalGraph(Protocol):
    """What the agent's retrieval reads of the query graph, and the record it leaves for the report."""

    def neighbours(self, namespace: str, query_ids: Collection[str]) -> dict[str, dict[str, float]]:
        """Each query's neighbours in the query graph with the edge's similarity (Eq. 3)."""
        ...

    def word_counts(self, namespace: str, features: Collection[int]) -> tuple[int, dict[int, int]] | None:
        """How many of the namespace's insights (every node, archived ones too) hold each of these
        word 1-2-gram features (``hashing.word_features``) in their text, and how many insights
        were counted; None while the counts are incomplete (insights written before they were
        kept: ``count_words`` completes them)."""
        ...

    def word_table(self, namespace: str, limit: int) -> tuple[int, dict[int, int]] | None:
        """Every word count of the namespace (``word_counts`` of all the words its insights hold),
        with how many insights were counted; None while the counts are incomplete, or when its
        insights hold more than ``limit`` distinct words."""
        ...

    def count_words(self, namespace: str) -> bool:
        """Complete the word counts of a namespace written before they were kept: the words of every
        insight of the namespace counted afresh, the insights created meanwhile staying counted;
        True once they are complete (whoever completed them)."""
        ...

    def save_retrieval(self, record: RetrievalRecord, ttl_s: int) -> None: ...


class ProjectionSource(Protocol):
    """What the projector reads of changed nodes, and the links it writes for queries reported
    without a retrieval record."""

    def changes(self, after: str, count: int) -> list[Change]: ...

    def query_points(self, refs: Collection[EventKey]) -> dict[EventKey, QueryPoint]:
        """Queries by (namespace, id) as the read model holds them (no trajectory)."""
        ...

    def insight_points(self, refs: Collection[EventKey]) -> dict[EventKey, InsightPoint]:
        """Insights by (namespace, id) as the read model holds them (no evidence)."""
        ...

    def link_queries(self, namespace: str, query_id: str, similar: Mapping[str, float]) -> None:
        """Link a query both ways to similar queries of its namespace (idempotent)."""
        ...

    def unlinked(self, namespace: str, query_ids: Collection[str]) -> set[str]:
        """Those of the queries that still wait for the projector to link them."""
        ...


class GraphReader(Protocol):
    """Inspection, export and stats: whole nodes, history, lineage (not the hot paths)."""

    def insights(self, ids: Collection[str]) -> dict[str, InsightNode]:
        """Whole insights, evidence included."""
        ...

    def queries(self, namespace: str, ids: Collection[str]) -> dict[str, QueryNode]: ...

    def states(self, ids: Collection[str]) -> dict[str, str]:
        """The state (active | archived) of each insight id that exists."""
        ...

    def namespace_of(self, ids: Collection[str]) -> dict[str, str]: ...

    def history(self, insight_id: str) -> list[EditRecord]: ...

    def lineage(self, insight_id: str) -> list[str]:
        """The revision chain through this insight, oldest first."""
        ...

    def edges_into(self, insight_id: str) -> list[tuple[str, str]]:
        """Hyperedges (ι_a, q) that contextualise this insight (Eq. 18)."""
        ...

    def namespaces(self) -> set[str]: ...

    def insight_ids(self, namespace: str) -> set[str]: ...

    def query_ids(self, namespace: str) -> set[str]: ...

    def recent_quality(self, namespace: str) -> QualitySignal:
        """The live pollution signal over the namespace's last ``RECENT_EVENTS`` applied events."""
        ...

    def is_applied(self, namespace: str, event_id: str) -> bool: ...

    def applied_result(self, namespace: str, event_id: str) -> ApplyResult | None:
        """What applying the event did (its edits' outcomes, the insights it created), or None
        while it is not applied."""
        ...

    def load_retrieval(self, namespace: str, retrieval_id: str) -> RetrievalRecord | None: ...


class ControlStore(Protocol):
    """What the workers read and write to apply an operator's request (``evomem.core.lifecycle``)."""

    def applied_events(self, namespace: str, event_ids: Collection[str]) -> dict[str, AppliedEvent]:
        """What each of these events applied, for those that were applied."""
        ...

    def events_since(self, namespace: str, since: datetime) -> list[str]:
        """The events of the namespace whose edits were applied at or after ``since``, oldest first."""
        ...

    def apply_control(self, plan: ControlPlan) -> ControlResult:
        """Apply a control plan atomically; a request applied before changes nothing; an edit a
        request reverted before is not reverted again."""
        ...


class ReviewStore(Protocol):
    """The review queue (``evomem.core.review``): held edits, and the decision on each."""

    def hold(self, held: Sequence[HeldEdit]) -> None:
        """Keep these edits for review; one held before keeps its first record."""
        ...

    def held_ids(self, namespace: str, review_ids: Collection[str]) -> set[str]:
        """Which of these review ids are held already (decided or not)."""
        ...

    def reviews(self, namespace: str) -> list[Review]:
        """Every held edit of the namespace with its decision, oldest first."""
        ...

    def decide_review(self, namespace: str, review_id: str, decision: ReviewDecision) -> Review | None:
        """Record the decision unless one was recorded before (that one stands); the review as it
        stands after, or None when no edit is held under this id."""
        ...


class StalenessSource(Protocol):
    """What the staleness sweep reads (``evomem.core.staleness``)."""

    def namespaces(self) -> set[str]: ...

    def served_records(self, namespace: str) -> list[ServedCounts]:
        """How each active insight of the namespace was served."""
        ...

    def claim_sweep(self, every_s: float) -> bool:
        """Whether this caller sweeps now: once per ``every_s`` across every process of the store."""
        ...


class ConsolidationStore(EditStore, ControlStore, ReviewStore, StalenessSource, Protocol):
    """What the consolidation workers read and write: the task events' edits and the operators' requests."""


class GraphStore(
    EditStore,
    RetrievalGraph,
    ProjectionSource,
    GraphReader,
    ControlStore,
    ReviewStore,
    StalenessSource,
    Protocol,
):
    """The whole system of record: every role above, as a store implements it (the contract suite
    runs the same tests on the Redis store and the in-memory reference)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of the event log as a consumer reads it."""

    id: str
    raw: bytes | None  # None when the entry has no event: trimmed away while pending, or foreign
    deliveries: int = 1
    fields: tuple[str, ...] | None = None  # the entry's field names when it has no "event" field
    kind: Literal["event", "control"] = "event"  # a task event, or an operator's ``ControlRequest``

    @property
    def unreadable(self) -> str:
        """Why ``raw`` is None, as a dead letter's reason."""
        if self.fields is None:
            return "event: the entry was trimmed from the stream before it was consumed"
        names = ", ".join(repr(f) for f in self.fields[:5]) or "none"
        return f"event: the stream entry has no 'event' field (its fields: {names})"


class EventLog(Protocol):
    """The task events, consumed in batches by a group of consumers with at-least-once delivery: an
    entry read and not acknowledged is delivered again (its ``deliveries`` grow), and one another
    consumer left idle is claimed. A dead letter is acknowledged in the same step."""

    def publish(self, event: TaskEvent) -> str:
        """Validate the ids the event names and append it; return the entry id."""
        ...

    def publish_control(self, request: ControlRequest) -> str:
        """Append an operator's request (field ``control``), after the events published before it."""
        ...

    def read(self, consumer: str, count: int, block_ms: int | None = None) -> list[Entry]:
        """A batch for ``consumer``: its own unacknowledged entries first, then new ones."""
        ...

    def claim_stale(self, consumer: str, min_idle_ms: int, count: int) -> list[Entry]:
        """Entries another consumer was given and has not acknowledged for ``min_idle_ms``."""
        ...

    def ack(self, ids: Sequence[str]) -> None: ...

    def release(self, consumer: str, entries: Sequence[Entry]) -> None:
        """Give back the delivery of entries whose batch failed for a reason outside them (the store
        unreachable, a failover): the poison guard counts deliveries that took a worker down, not
        the retries of an outage. They stay pending under ``consumer``."""
        ...

    def dead_letter(self, entry: Entry, reason: str, field: str | None = None) -> None: ...

    def trim(self) -> int:
        """Drop entries every consumer is done with, past the log's length cap."""
        ...


class ChangeFeed(Protocol):
    """The change feed as the projector follows it, with the cursor it keeps per read model."""

    def changes(self, after: str, count: int) -> list[Change]: ...

    def wait(self, after: str, block_ms: int) -> None:
        """Return once a change past ``after`` exists, or after ``block_ms``."""
        ...

    def load_cursor(self, identity: str) -> str:
        """Where the read model ``identity`` stopped ("0-0": the beginning)."""
        ...

    def save_cursor(self, identity: str, cursor: str) -> None: ...

    def dead_letter(self, change: Change, reason: str) -> None:
        """Keep a change that can never be applied, with why, so that it can be replayed or dropped."""
        ...


class Embedder(Protocol):
    kind: Literal["sparse", "dense"]
    dim: int

    def embed(self, texts: Sequence[str]) -> list[SparseVec] | list[DenseVec]: ...


class VectorIndex(Protocol):
    """The retrieval read model: query points carry their evidence, insight points their state."""

    identity: str
    fresh: bool
    """True when the index was created empty by this open: the projector starts from the beginning."""

    def write_queries(self, points: Sequence[tuple[QueryPoint, Vector | None]]) -> None:
        """Write queries, never replacing a stored version with an older one. A point comes with
        its vector when the index does not hold it yet, else with None (payload update)."""
        ...

    def write_insights(self, points: Sequence[tuple[InsightPoint, Vector | None]]) -> None:
        """As ``write_queries``, for insights."""
        ...

    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[QueryHit]:
        """Top-k past queries of the namespace by cosine similarity, best first, with their
        evidence (Eq. 2)."""
        ...

    def search_evidence(
        self,
        vector: Vector,
        namespace: str,
        insights: int,
        k: int,
        exclude: Collection[str] = (),
        about: Vector | None = None,
    ) -> list[QueryHit]:
        """The top-k past queries of the namespace by similarity to ``about`` (default: ``vector``),
        among those that are evidence (support or harm) of one of the ``insights`` active insights
        whose text is nearest to ``about``, or of an insight one of them inherits from, leaving out
        the ``exclude`` ids (those Eq. 2 found already); each scored by its cosine with ``vector``,
        as ``search_queries`` scores."""
        ...

    def query_evidence(self, namespace: str, ids: Collection[str]) -> dict[str, QueryHit]:
        """The evidence of known queries of the namespace (score 0)."""
        ...

    def serving_ids(
        self, namespace: str, ids: Collection[str]
    ) -> tuple[set[str], dict[str, tuple[str, ...]]]:
        """Eq. 7's filter (active state and evidence ids) without reading an insight's text: the ids
        of ``ids`` that are active insights of the namespace, and the active insights that inherit
        from one of ``ids``, each with the ids it inherits from."""
        ...

    def read_insights(self, namespace: str, ids: Collection[str]) -> dict[str, ServingInsight]:
        """The text, version and inheritance of insights of the namespace (missing ones left out)."""
        ...

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        """Active insights nearest to a text vector."""
        ...

    def scan_insights(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        """Every active insight of every namespace as (id, text), ``batch`` at a time, in no set
        order: what a retriever warms its word-set cache from."""
        ...

    def versions(
        self, kind: Literal["insight", "query"], namespace: str, ids: Collection[str]
    ) -> dict[str, int]:
        """The version the index holds of each of these nodes (missing ones are left out)."""
        ...

    def count(self, kind: Literal["insight", "query"]) -> int: ...

    def persist(self) -> None:
        """Make every write so far durable (the projector calls it before it moves its cursor)."""
        ...

    def close(self) -> None: ...
