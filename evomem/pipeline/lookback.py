"""As-of reads: an insight, or a whole namespace for a retrieval, as it stood at a time T within
the retention window (``EVOMEM_AS_OF_WINDOW_S``), rolled back from now through the history
(``evomem.core.rollback``). Audit reads, not the hot path: a namespace's snapshot reads all its nodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from evomem.core.ports import EditRecord, GraphReader, ProjectionSource, RetrievalGraph
from evomem.core.rollback import NodeAt, Snapshot, recorded_at, records_after, roll_back
from evomem.errors import InvalidEventError
from evomem.results import RetrievalAudit, ServedRecord, SimilarQuery
from schemas import InsightNode


class SnapshotSource(GraphReader, ProjectionSource, RetrievalGraph, Protocol):
    """What a namespace's snapshot reads (a ``GraphStore`` is one)."""


def check_as_of(at: datetime, window_s: int, now: datetime | None = None) -> datetime:
    """The time of an as-of read, refused (``InvalidEventError`` on ``as_of``) without a zone, in
    the future, or older than the retention window."""
    now = now or datetime.now(UTC)
    if at.tzinfo is None:
        raise InvalidEventError("as_of", "a time with its zone (e.g. 2026-01-02T03:04:05+00:00)")
    if at > now:
        raise InvalidEventError("as_of", "is in the future")
    if at < now - timedelta(seconds=window_s):
        raise InvalidEventError(
            "as_of",
            f"is older than the retention window of as-of reads ({window_s} s, EVOMEM_AS_OF_WINDOW_S)",
        )
    return at


def _node_at(node: InsightNode, state: NodeAt, history: list[EditRecord], exists: set[str]) -> InsightNode:
    return node.model_copy(
        update={
            "state": state.state,
            "positive": frozenset(state.positive & exists),
            "negative": frozenset(state.negative & exists),
            "pinned": state.pinned,
            "version": max(1, len(history)),  # the edits recorded up to then
            "updated_at": recorded_at(history[-1]) if history else node.created_at,
            # revised after then: not yet
            "revised_to": node.revised_to if any(r.new_id == node.revised_to for r in history) else None,
        }
    )


def insight_at(
    graph: GraphReader, insight_id: str, at: datetime
) -> tuple[InsightNode, list[EditRecord]] | None:
    """The insight and its history as they stood at ``at``; None if it did not exist then."""
    node = graph.insights([insight_id]).get(insight_id)
    if node is None or node.created_at > at:
        return None
    history = graph.history(insight_id)
    state = NodeAt(node.state, set(node.positive), set(node.negative), node.pinned)
    roll_back({insight_id: state}, records_after([history], at))
    named = state.positive | state.negative
    exists = {q for q, n in graph.queries(node.namespace, named).items() if n.created_at <= at}
    kept = [r for r in history if recorded_at(r) <= at]
    return _node_at(node, state, kept, exists), kept


def snapshot_at(graph: SnapshotSource, namespace: str, at: datetime) -> Snapshot:
    """Every insight and query of the namespace as it stood at ``at``, with its query graph."""
    nodes = graph.insights(sorted(graph.insight_ids(namespace)))
    histories = {i: graph.history(i) for i in nodes}
    queries = {
        q: n
        for q, n in graph.queries(namespace, sorted(graph.query_ids(namespace))).items()
        if n.created_at <= at
    }
    states = {
        i: NodeAt(n.state, set(n.positive), set(n.negative), n.pinned)
        for i, n in nodes.items()
        if n.created_at <= at
    }
    roll_back(states, records_after(histories.values(), at))
    exists = set(queries)
    insights = {
        i: _node_at(nodes[i], st, [r for r in histories[i] if recorded_at(r) <= at], exists)
        for i, st in states.items()
    }
    points = graph.insight_points([(namespace, i) for i in insights])
    inherits = {i: tuple(x for x in p.inherits if x in insights) for (_, i), p in points.items()}
    supports: dict[str, set[str]] = {q: set() for q in queries}
    harms: dict[str, set[str]] = {q: set() for q in queries}
    for i, n in insights.items():
        for q in n.positive:
            supports[q].add(i)
        for q in n.negative:
            harms[q].add(i)
    links = graph.neighbours(namespace, sorted(queries))
    neighbours = {q: {o: w for o, w in links.get(q, {}).items() if o in queries} for q in queries}
    return Snapshot(namespace, at, insights, inherits, queries, supports, harms, neighbours)


def audit_retrieval(graph: GraphReader, namespace: str, retrieval_id: str) -> RetrievalAudit | None:
    """A retrieval by its id while its record is kept (``EVOMEM_RETRIEVAL_TTL_S``); None after."""
    record = graph.load_retrieval(namespace, retrieval_id)
    if record is None:
        return None
    queries = graph.queries(namespace, record.similar)
    nodes = graph.insights(record.insight_ids)
    scores: list[tuple[float, int, int] | None] = [*record.scores]
    scores += [None] * (len(record.insight_ids) - len(scores))
    similarity: list[float | None] = [*record.similarity]
    similarity += [None] * (len(record.insight_ids) - len(similarity))
    cosines = [*record.similar_scores] + [0.0] * (len(record.similar) - len(record.similar_scores))
    return RetrievalAudit(
        record.id,
        namespace,
        record.query,
        record.at,
        tuple(
            SimilarQuery(q, queries[q].text if q in queries else None, w)
            for q, w in zip(record.similar, cosines, strict=True)
        ),
        tuple(
            ServedRecord(
                i,
                nodes[i].text if i in nodes else None,
                sc[0] if sc else None,
                sc[1] if sc else None,
                sc[2] if sc else None,
                sim,
            )
            for i, sc, sim in zip(record.insight_ids, scores, similarity, strict=True)
        ),
    )


__all__ = [
    "SnapshotSource",
    "audit_retrieval",
    "check_as_of",
    "insight_at",
    "snapshot_at",
]
