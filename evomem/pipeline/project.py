"""The projector: keeps the Qdrant read model in step with the Redis system of record.

It tails the change feed from its cursor, reads what the read model holds of each changed node from
the graph store and writes it to the index in batches: for a query, its status and the insights it
supports and harms; for an insight, its text, state and what it inherits. No evidence set of an
insight is ever read or written here, so a popular insight costs the projector no more than a new
one. Node text never changes, so a vector is computed once, when a node first reaches the index;
later versions update the payload only, and the index never replaces a newer version with an older
one. One projector per index: the embedded index can only be opened by one process anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import redis

from evomem import keys
from evomem.adapters.redis.connection import Client
from evomem.core.hashing import Embedder
from evomem.core.ports import EventKey, GraphStore, InsightPoint, QueryPoint, Vector, VectorIndex
from evomem.errors import TransientError
from evomem.logs import get_logger

BATCH = 2048
BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 5.0
log = get_logger("evomem.projector")


@dataclass(frozen=True, slots=True)
class FollowerState:
    """How the following projector is doing: ``following``, ``failing`` (retrying after an error,
    shown), ``stopped``, or ``idle`` before ``follow`` runs; ``dead`` when its thread is gone."""

    status: Literal["idle", "following", "failing", "stopped", "dead"]
    error: str | None
    failures: int
    since: float


@dataclass
class ProjectionReport:
    changes: int = 0
    insights: int = 0
    queries: int = 0


class Projector:
    def __init__(
        self,
        graph: GraphStore,
        index: VectorIndex,
        embedder: Embedder,
        cursor_store: Client | None,
        link_k: int = 5,
    ):
        self.link_k = link_k
        self.graph = graph
        self.index = index
        self.embedder = embedder
        self._cursors = cursor_store
        self._key = keys.projector_cursor(index.identity)
        self.cursor = "0-0" if index.fresh else self._load_cursor()
        self.state = FollowerState("idle", None, 0, time.time())

    def _load_cursor(self) -> str:
        if self._cursors is None:
            return "0-0"
        raw = self._cursors.get(self._key)
        return raw.decode() if raw else "0-0"

    def _save_cursor(self) -> None:
        if self._cursors is not None:
            self._cursors.set(self._key, self.cursor)

    def run_once(self, max_changes: int = 100_000) -> ProjectionReport:
        """Project everything the feed holds past the cursor (up to ``max_changes``)."""
        report = ProjectionReport()
        while report.changes < max_changes:
            batch = self.graph.changes(self.cursor, BATCH)
            if not batch:
                break
            latest: dict[Literal["insight", "query"], dict[EventKey, int]] = {"insight": {}, "query": {}}
            for c in batch:
                ref = (c.namespace, c.id)
                seen = latest[c.kind]
                seen[ref] = max(seen.get(ref, 0), c.version)
            report.queries += self._project_queries(latest["query"])
            report.insights += self._project_insights(latest["insight"])
            report.changes += len(batch)
            self.cursor = batch[-1].cursor
            self._save_cursor()
        return report

    def _held(
        self, kind: Literal["insight", "query"], announced: Mapping[EventKey, int]
    ) -> dict[EventKey, int]:
        """The versions the index holds of the announced nodes, asked once per namespace."""
        by_ns: dict[str, list[str]] = {}
        for ns, i in announced:
            by_ns.setdefault(ns, []).append(i)
        held: dict[EventKey, int] = {}
        for ns, ids in by_ns.items():
            held.update(((ns, i), v) for i, v in self.index.versions(kind, ns, ids).items())
        return held

    def _project_queries(self, announced: Mapping[EventKey, int]) -> int:
        """Queries the index does not hold at the announced version: read, embedded if new, written.
        A query reported without a retrieval record is linked to its most similar queries first."""
        held = self._held("query", announced)
        wanted = [ref for ref, v in announced.items() if held.get(ref, 0) < v]
        points = self.graph.query_points(wanted) if wanted else {}
        if not points:
            return 0
        unseen = [ref for ref in points if ref not in held]
        vectors: dict[EventKey, Vector] = dict(
            zip(unseen, self.embedder.embed([points[ref].text for ref in unseen]), strict=True)
        )
        pending: set[EventKey] = set()
        by_ns: dict[str, list[str]] = {}
        for ns, q in unseen:
            by_ns.setdefault(ns, []).append(q)
        for ns, ids in by_ns.items():
            pending |= {(ns, q) for q in self.graph.unlinked(ns, ids)}
        ready: list[tuple[QueryPoint, Vector | None]] = [
            (p, vectors.get(ref)) for ref, p in points.items() if ref not in pending
        ]
        self.index.write_queries(ready)
        # one at a time, so that queries of the same batch can find each other
        for ref in pending:
            ns, q = ref
            hits = self.index.search_queries(vectors[ref], ns, self.link_k + 1)
            similar = {h.id: h.score for h in hits if h.id != q}
            self.graph.link_queries(ns, q, dict(list(similar.items())[: self.link_k]))
            self.index.write_queries([(points[ref], vectors[ref])])
        return len(points)

    def _project_insights(self, announced: Mapping[EventKey, int]) -> int:
        """Insights the index does not hold at the announced version (a replayed feed, or a node
        changed again since and projected from a later batch, is not read back at all)."""
        held = self._held("insight", announced)
        wanted = [ref for ref, v in announced.items() if held.get(ref, 0) < v]
        points = self.graph.insight_points(wanted) if wanted else {}
        newer = {ref: p for ref, p in points.items() if held.get(ref, 0) < p.version}
        if not newer:
            return 0
        unseen = [ref for ref in newer if ref not in held]
        vectors: dict[EventKey, Vector] = dict(
            zip(unseen, self.embedder.embed([newer[ref].text for ref in unseen]), strict=True)
        )
        pairs: list[tuple[InsightPoint, Vector | None]] = [(p, vectors.get(ref)) for ref, p in newer.items()]
        self.index.write_insights(pairs)
        return len(newer)

    def follow(self, stop: threading.Event, block_ms: int = 500) -> None:
        """Project until ``stop`` is set, waking as soon as a change is published. Supervised: any
        error is logged, shown in ``state`` and retried after a backoff that doubles up to
        ``BACKOFF_MAX_S``, so the index catches up by itself once the cause is gone."""
        failures = 0
        self.state = FollowerState("following", None, 0, time.time())
        try:
            while not stop.is_set():
                try:
                    if self.run_once().changes == 0 and self._cursors is not None:
                        self._cursors.xread({keys.CHANGES_STREAM: self.cursor}, count=1, block=block_ms)
                except Exception as exc:
                    failures += 1
                    unreachable = isinstance(exc, redis.ConnectionError | redis.TimeoutError | TransientError)
                    error = f"{type(exc).__name__}: {exc}"
                    if failures == 1 or failures % 20 == 0:  # not a line every backoff while it lasts
                        if unreachable:
                            log.warning("projector.redis_unreachable", error=str(exc), failures=failures)
                        else:
                            log.exception("projector.failed", error=error, failures=failures)
                    since = self.state.since if self.state.status == "failing" else time.time()
                    self.state = FollowerState("failing", error, failures, since)
                    stop.wait(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** min(failures - 1, 16)))
                    continue
                if failures:
                    log.info("projector.recovered", failures=failures, cursor=self.cursor)
                    failures = 0
                    self.state = FollowerState("following", None, 0, time.time())
        finally:
            self.state = FollowerState("stopped", self.state.error, failures, time.time())

    def lag(self) -> int:
        """Changes in the feed the index has not seen yet."""
        return len(self.graph.changes(self.cursor, BATCH))


__all__ = ["FollowerState", "ProjectionReport", "Projector"]
