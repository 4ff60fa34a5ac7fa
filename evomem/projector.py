"""The projector: keeps the Qdrant read model in step with the Redis system of record.

It tails the change feed from its cursor, reads the changed nodes' current state from the graph
store and writes them to the index in batches. Node text never changes, so a vector is computed
once, when a node first reaches the index; later versions update the payload only, and the index
never replaces a newer version with an older one. One projector per index: the embedded index can
only be opened by one process anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import redis

from evomem import keys
from evomem.embedding import Embedder
from evomem.errors import TransientError
from evomem.logs import get_logger
from evomem.ports import GraphStore, Vector, VectorIndex
from evomem.redis_server import Client

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
            latest: dict[str, int] = {}
            for c in batch:
                if c.kind == "insight":
                    latest[c.id] = max(latest.get(c.id, 0), c.version)
            query_ids = list(dict.fromkeys(c.id for c in batch if c.kind == "query"))
            report.queries += self._project_queries(query_ids)
            report.insights += self._project_insights(latest)
            report.changes += len(batch)
            self.cursor = batch[-1].cursor
            self._save_cursor()
        return report

    def _project_queries(self, ids: list[str]) -> int:
        nodes = list(self.graph.queries(ids).values())
        if not nodes:
            return 0
        vectors: Sequence[Vector] = self.embedder.embed([q.text for q in nodes])
        pending = self.graph.unlinked([q.id for q in nodes])
        ready = [(q, v) for q, v in zip(nodes, vectors, strict=True) if q.id not in pending]
        self.index.upsert_queries(ready)
        # one at a time, so that queries of the same batch can find each other
        for q, v in zip(nodes, vectors, strict=True):
            if q.id in pending:
                similar = [
                    s for s, _ in self.index.search_queries(v, q.namespace, self.link_k + 1) if s != q.id
                ]
                self.graph.link_queries(q.id, similar[: self.link_k])
                self.index.upsert_queries([(q, v)])
        return len(nodes)

    def _project_insights(self, latest: dict[str, int]) -> int:
        """``latest``: the newest version of each insight the batch of changes announces. Nodes the
        index already holds at that version are not read back from Redis at all (a replayed feed,
        or a node changed again since and projected from a later batch)."""
        stored = self.index.insight_versions(list(latest))
        wanted = [i for i, v in latest.items() if stored.get(i, 0) < v]
        nodes = self.graph.insights(wanted) if wanted else {}
        if not nodes:
            return 0
        newer = [n for n in nodes.values() if stored.get(n.id, 0) < n.version]
        unseen = [n for n in newer if n.id not in stored]
        embedded: Sequence[Vector] = self.embedder.embed([n.text for n in unseen])
        vectors: dict[str, Vector] = dict(zip((n.id for n in unseen), embedded, strict=True))
        self.index.write_insights(newer, vectors)
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
