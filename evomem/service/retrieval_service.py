"""What the HTTP service does, apart from HTTP: authorise, retrieve (failing open), accept events,
show insights, report health. The process holds the embedded Qdrant store and keeps it in step (the
projector)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from evomem.errors import EvomemError, NotFoundError, StoreError, TransientError
from evomem.logs import bind, get_logger
from evomem.results import EditRecord, LineageStep
from evomem.runtime import Runtime
from evomem.service.api import (
    EventAccepted,
    InsightResponse,
    LineageResponse,
    RetrieveRequest,
    RetrieveResponse,
    ServedInsight,
    Staleness,
)
from evomem.service.auth import Principal, TokenAuth
from evomem.service.metrics import Metrics
from schemas import InsightNode, TaskEvent

log = get_logger("evomem.service")


@dataclass(frozen=True, slots=True)
class _View:
    node: InsightNode
    lineage: tuple[str, ...]
    history: tuple[EditRecord, ...]


STALENESS_CACHE_S = 0.1


class RetrievalService:
    def __init__(self, runtime: Runtime, auth: TokenAuth, metrics: Metrics | None = None) -> None:
        self.runtime = runtime
        self.auth = auth
        self.metrics = metrics or Metrics()
        self._stale = (0.0, 0.0)  # (computed at, value)
        self._stale_lock = threading.Lock()
        self._redis_seen = (time.time(), 0.0)  # (when Redis last answered, the lag then)
        self.metrics.gauge(
            "evomem_projector_lag_seconds", "Age of the oldest change not yet in the index.", self.staleness
        )
        self.metrics.gauge(
            "evomem_projector_lag_changes",
            "Changes not yet in the index (-1: Redis unreachable).",
            lambda: float(self._lag_changes()),
        )
        self.metrics.gauge(
            "evomem_projector_following",
            "1 while the projector follows the change feed, 0 while it fails or is stopped.",
            lambda: float(self._following()),
        )

    # -- retrieval, failing open -----------------------------------------------------------------
    def retrieve(self, principal: Principal, body: RetrieveRequest) -> RetrieveResponse:
        bind(namespace=body.namespace)
        principal.check(body.namespace)
        self.runtime.quotas.charge_retrieval(body.namespace)
        degraded = None
        retriever = self.runtime.retriever
        assert retriever is not None  # the service always opens its index
        try:
            r = retriever.retrieve(body.query, body.namespace, top_k=body.top_k, budget=body.budget)
        except TransientError:
            # Redis is unreachable: serve from Qdrant alone, without the query-graph expansion and
            # without a retrieval record, and say so rather than fail the agent.
            r = retriever.retrieve(
                body.query, body.namespace, top_k=body.top_k, budget=body.budget, hops=0, record=False
            )
            degraded = (
                "redis unreachable: no query-graph expansion, and this retrieval id cannot be reported on"
            )
        bind(retrieval_id=r.id)
        self.metrics.served_insights(len(r.insights), degraded is not None)
        return RetrieveResponse(
            retrieval_id=r.id,
            namespace=r.namespace,
            insights=[
                ServedInsight(
                    id=i.id,
                    text=i.text,
                    score=i.score,
                    support=i.support,
                    conflict=i.conflict,
                    similarity=i.similarity,
                )
                for i in r.insights
            ],
            similar_queries=list(r.similar),
            stale=self._staleness(),
            degraded=degraded,
        )

    # -- events ------------------------------------------------------------------------------------
    def publish(self, principal: Principal, event: TaskEvent, size: int) -> EventAccepted:
        bind(namespace=event.namespace, event_id=str(event.event_id))
        principal.check(event.namespace)
        self.runtime.quotas.charge_event(event.namespace, size)
        entry_id = self.runtime.events.publish(event)
        return EventAccepted(event_id=str(event.event_id), entry_id=entry_id)

    # -- insights ------------------------------------------------------------------------------------
    def insight(self, principal: Principal, insight_id: str) -> InsightResponse:
        view = self._visible(principal, insight_id)
        return InsightResponse(insight=view.node, lineage=list(view.lineage), history=list(view.history))

    def lineage(self, principal: Principal, insight_id: str) -> LineageResponse:
        view = self._visible(principal, insight_id)
        nodes = self.runtime.graph.insights(view.lineage)
        return LineageResponse(
            id=insight_id,
            lineage=[
                LineageStep(n.id, n.text, n.state, n.version)
                for n in (nodes[i] for i in view.lineage if i in nodes)
            ],
        )

    def _visible(self, principal: Principal, insight_id: str) -> _View:
        missing = NotFoundError(f"no insight {insight_id!r}")
        graph = self.runtime.graph
        try:
            node = graph.insights([insight_id]).get(insight_id) if insight_id else None
            # another tenant's node does not exist for this token
            if node is None or not principal.may(node.namespace):
                raise missing
            return _View(node, tuple(graph.lineage(insight_id)), tuple(graph.history(insight_id)))
        except StoreError:
            raise missing from None  # a key of another kind under this name: no insight has this id

    # -- health --------------------------------------------------------------------------------------
    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while Redis answers and the projector follows the change feed: a projector that
        fails (and retries) serves an index that no longer moves, which is not healthy."""
        out: dict[str, Any] = {"index": "ok"}
        healthy = True
        try:
            self.runtime.redis.ping()
            out["redis"] = "ok"
        except (TransientError, OSError):
            out["redis"] = "unreachable"
            healthy = False
        state = self.runtime.follower()
        if state is None:
            out["projector"] = {"status": "not following"}
            out["index"] = "not kept in step: no projector follows the change feed"
            healthy = False
        else:
            out["projector"] = {"status": state.status, "error": state.error, "failures": state.failures}
            if state.status != "following":
                out["index"] = f"not kept in step: projector {state.status}" + (
                    f" ({state.error})" if state.error else ""
                )
                healthy = False
        lag = self._staleness()
        out["projector_lag_s"] = lag.projector_lag_s
        # a stale replica stays healthy: it serves the last state it has and says so
        out["stale"] = lag.stale
        projector = self.runtime.projector
        out["replica"] = {
            "pid": os.getpid(),
            "index": projector.index.identity if projector is not None else None,
            "cursor": projector.cursor if projector is not None else None,
        }
        retriever = self.runtime.retriever
        if retriever is not None:
            # warming is healthy: a word set not cached yet is read from the index
            out["text_cache"] = asdict(retriever.text_cache())
        return healthy, out

    def _staleness(self) -> Staleness:
        lag = self.staleness()
        return Staleness(projector_lag_s=lag, stale=lag > self.runtime.settings.stale_after_s)

    def _following(self) -> bool:
        state = self.runtime.follower()
        return state is not None and state.status == "following"

    def staleness(self) -> float:
        """Seconds since the oldest change the index has not applied yet was written (cached briefly)."""
        now = time.time()
        with self._stale_lock:
            at, value = self._stale
            if now - at < STALENESS_CACHE_S:
                return value
        try:
            value = self.runtime.staleness_s()
        except (EvomemError, OSError):
            # nothing is known since Redis last answered: the index is at least that much behind
            seen_at, lag_then = self._redis_seen
            value = lag_then + (now - seen_at)
        else:
            self._redis_seen = (now, value)
        with self._stale_lock:
            self._stale = (now, value)
        return value

    def _lag_changes(self) -> int:
        projector = self.runtime.projector
        try:
            return projector.lag() if projector is not None else 0
        except (EvomemError, OSError):
            return -1


__all__ = ["RetrievalService"]
