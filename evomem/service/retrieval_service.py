"""What the HTTP service does, apart from HTTP: authorise, retrieve (failing open), accept events,
show insights, report health. The process holds the embedded Qdrant store and keeps it in step (the
projector)."""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from evomem.core.review import review_item
from evomem.errors import EvomemError, InvalidEventError, NotFoundError, StoreError, TransientError
from evomem.logs import bind, get_logger
from evomem.pipeline.consolidate import check_target
from evomem.pipeline.event_state import canonical_event_id, event_state
from evomem.pipeline.lookback import audit_retrieval
from evomem.results import EditRecord, EventState, LineageStep
from evomem.runtime import Runtime
from evomem.sdk.calls import build_control, check_namespace
from evomem.service.api import (
    ControlAccepted,
    EventAccepted,
    InsightResponse,
    LineageResponse,
    PinRequest,
    RetrievalAuditResponse,
    RetrieveRequest,
    RetrieveResponse,
    RevertRequest,
    ReviewDecisionRequest,
    ReviewItemBody,
    ReviewsResponse,
    ServedInsight,
    Staleness,
)
from evomem.service.auth import ALL, Principal, TokenAuth
from evomem.service.connections import connection_counts
from evomem.service.metrics import Metrics
from schemas import ControlRequest, InsightNode, TaskEvent

log = get_logger("evomem.service")


@dataclass(frozen=True, slots=True)
class _View:
    node: InsightNode
    lineage: tuple[str, ...]
    history: tuple[EditRecord, ...]


STALENESS_CACHE_S = 0.1
#: What a review id may hold (``schemas.models.ReviewId``).
REVIEW_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: How often a probe pings a Redis that stopped answering, to learn it is back.
PROBE_EVERY_S = 0.2


class RedisProbe:
    """Whether Redis is answering, as far as the service can tell without waiting on it: a request
    that waited past its bound (``EVOMEM_HTTP_REDIS_TIMEOUT_S``) marks it suspect; from then on
    health says so at once, the metrics read no Redis, and the secured routes answer 503 without
    starting work that would wait too, while one background thread pings until Redis answers."""

    def __init__(self, ping: Any) -> None:
        self._ping = ping
        self._lock = threading.Lock()
        self.suspect_since: float | None = None
        self._probing = False

    def ok(self) -> bool:
        return self.suspect_since is None

    def suspect(self) -> None:
        with self._lock:
            if self.suspect_since is None:
                self.suspect_since = time.time()
                log.warning("service.redis_stalled")
            if self._probing:
                return
            self._probing = True
        threading.Thread(target=self._probe, name="evomem-redis-probe", daemon=True).start()

    def _probe(self) -> None:
        while True:
            try:
                self._ping()
            except Exception:  # refused, reset, timed out: not back yet
                time.sleep(PROBE_EVERY_S)
                continue
            with self._lock:
                self._probing = False
                if self.suspect_since is not None:
                    log.info("service.redis_answers", stalled_s=round(time.time() - self.suspect_since, 3))
                self.suspect_since = None
            return


def _namespaces_by_tier(t: dict[str, int]) -> dict[str, float]:
    return {"shared": t["shared_namespaces"], "own": t["promoted_namespaces"]}


def _shards_by_tier(t: dict[str, int]) -> dict[str, float]:
    return {"shared": t["shared_shards"], "own": t["own_shards"], "own_open": t["own_shards_open"]}


class RetrievalService:
    def __init__(self, runtime: Runtime, auth: TokenAuth, metrics: Metrics | None = None) -> None:
        self.runtime = runtime
        self.auth = auth
        self.metrics = metrics or Metrics()
        self._stale = (0.0, 0.0)  # (computed at, value)
        self._stale_lock = threading.Lock()
        self._redis_seen = (time.time(), 0.0)  # (when Redis last answered, the lag then)
        self.redis_probe = RedisProbe(lambda: runtime.redis.ping())
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

        tiers = getattr(runtime.index, "tiers", None)
        if tiers is not None:  # the embedded store, a server with shard keys (docs/guides/tenancy.md)
            self.metrics.labelled_gauges(
                "evomem_index_namespaces",
                "Namespaces of the index by tier: shared (in shared shards), own (promoted).",
                "tier",
                lambda: _namespaces_by_tier(tiers()),
            )
            self.metrics.labelled_gauges(
                "evomem_index_shards",
                "Shards of past queries of the index: shared, own (promoted), own_open.",
                "tier",
                lambda: _shards_by_tier(tiers()),
            )
        self.metrics.labelled_gauges(
            "evomem_process_connections",
            "Connections each retrieval process was handed (evomem serve --workers) or holds open.",
            "process",
            lambda: connection_counts(runtime.settings.data_dir),
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
            if body.as_of is not None:  # an audit read: the namespace as it stood then, nothing recorded
                r = self.runtime.retrieve_as_of(
                    body.query, body.namespace, body.as_of, top_k=body.top_k, budget=body.budget
                )
            else:
                # the record written before the answer, so that an unreachable Redis is said
                r = retriever.retrieve(
                    body.query, body.namespace, top_k=body.top_k, budget=body.budget, wait_record=True
                )
        except TransientError:
            # Redis is unreachable: serve from Qdrant alone, without the query-graph expansion and
            # without a retrieval record, and say so rather than fail the agent.
            r = retriever.retrieve(
                body.query, body.namespace, top_k=body.top_k, budget=body.budget, hops=0, record=False
            )
            degraded = (
                "redis unreachable: no query-graph expansion, and this retrieval id cannot be reported on"
            )
        if body.as_of is None and degraded is None:  # a retrieval record was written
            self.runtime.quotas.charge_record(
                body.namespace,
                body.query,
                r.similar,
                [i.id for i in r.insights],
                retriever.record_vector_chars,
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

    def event(self, principal: Principal, event_id: str) -> EventState:
        """The state of a reported event, for a token of its namespace; another's: not found."""
        event_id = canonical_event_id(event_id)
        marker = self.runtime.events.state_of(event_id)
        if marker is not None:
            candidates = [marker["namespace"]]
        else:  # no marker kept (expired, a plain XADD): an applied event in the token's namespaces
            candidates = sorted(ns for ns in principal.namespaces if ns != ALL)
        return event_state(
            event_id, marker, self.runtime.graph, [ns for ns in candidates if principal.may(ns)]
        )

    # -- insights ------------------------------------------------------------------------------------
    def insight(self, principal: Principal, insight_id: str, as_of: str | None = None) -> InsightResponse:
        view = self._visible(principal, insight_id)
        if as_of is not None:
            at = _time("as_of", as_of)
            found = self.runtime.insight_as_of(insight_id, at)
            if found is None:
                raise NotFoundError(f"no insight {insight_id!r} at {as_of}")
            node, history = found
            then = {i for i, n in self.runtime.graph.insights(view.lineage).items() if n.created_at <= at}
            return InsightResponse(
                insight=node,
                lineage=[i for i in view.lineage if i in then],
                history=list(history),
            )
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
            # another tenant's node does not exist for this token, nor takes longer to say so: the
            # id directory alone answers both (one read either way), the node is read only when allowed
            owner = graph.namespace_of([insight_id]).get(insight_id) if insight_id else None
            if owner is None or not principal.may(owner):
                raise missing
            node = graph.insights([insight_id]).get(insight_id)
            if node is None or not principal.may(node.namespace):
                raise missing
            return _View(node, tuple(graph.lineage(insight_id)), tuple(graph.history(insight_id)))
        except StoreError:
            raise missing from None  # a key of another kind under this name: no insight has this id

    def retrieval(self, principal: Principal, retrieval_id: str, namespace: str) -> RetrievalAuditResponse:
        namespace = check_namespace(namespace)
        principal.check(namespace)
        found = audit_retrieval(self.runtime.graph, namespace, retrieval_id)
        if found is None:
            raise NotFoundError(f"no retrieval {retrieval_id!r} in namespace {namespace!r} (or it expired)")
        return RetrievalAuditResponse.model_validate(asdict(found))

    # -- the operator's requests: revert, pin, unpin ---------------------------------------------------
    def revert(self, principal: Principal, body: RevertRequest) -> ControlAccepted:
        bind(namespace=body.namespace)
        principal.check(body.namespace)
        fields = body.model_dump(exclude={"namespace"})
        return self._control(build_control("revert", body.namespace, principal.name, **fields))

    def pin(self, principal: Principal, insight_id: str, body: PinRequest, action: str) -> ControlAccepted:
        node = self._visible(principal, insight_id).node  # another tenant's insight: 404
        fields = body.model_dump()
        return self._control(
            build_control(action, node.namespace, principal.name, insight_id=insight_id, **fields)
        )

    # -- the review queue --------------------------------------------------------------------------
    def reviews(self, principal: Principal, namespace: str, state: str) -> ReviewsResponse:
        namespace = check_namespace(namespace)
        principal.check(namespace)
        if state not in ("pending", "approved", "rejected", "all"):
            raise InvalidEventError("state", "one of pending, approved, rejected, all")
        found = [review_item(r) for r in self.runtime.graph.reviews(namespace)]
        return ReviewsResponse(
            reviews=[ReviewItemBody.model_validate(i.as_dict()) for i in found if state in ("all", i.state)]
        )

    def review(
        self, principal: Principal, review_id: str, body: ReviewDecisionRequest, action: str
    ) -> ControlAccepted:
        bind(namespace=body.namespace)
        principal.check(body.namespace)  # another tenant's namespace: 403; its review ids: 404
        if not REVIEW_ID.fullmatch(review_id):  # no edit is held under an id that cannot be one
            raise NotFoundError(f"no edit held for review {review_id!r} in namespace {body.namespace!r}")
        fields = body.model_dump(exclude={"namespace"})
        return self._control(
            build_control(action, body.namespace, principal.name, review_id=review_id, **fields)
        )

    def _control(self, request: ControlRequest) -> ControlAccepted:
        bind(request_id=str(request.request_id))
        check_target(self.runtime.graph, request)
        entry_id = self.runtime.events.publish_control(request)
        return ControlAccepted(request_id=str(request.request_id), entry_id=entry_id)

    # -- health --------------------------------------------------------------------------------------
    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while Redis answers and the projector follows the change feed: a projector that
        fails (and retries) serves an index that no longer moves, which is not healthy."""
        out: dict[str, Any] = {"index": "ok"}
        healthy = True
        stalled_since = self.redis_probe.suspect_since
        if stalled_since is not None:
            out["redis"] = f"not answering for {time.time() - stalled_since:.1f} s"
            healthy = False
        else:
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
        projector = self.runtime.projector
        if projector is not None and projector.skipped:
            # the index moves on past them; they wait for `evomem changes replay` or `drop`
            out["projector"]["skipped_changes"] = projector.skipped
            out["projector"]["last_skipped"] = projector.last_skipped
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
            if not self.redis_probe.ok():
                raise TransientError("redis is not answering")  # known: do not wait on it
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
        if not self.redis_probe.ok():
            return -1
        try:
            return projector.lag() if projector is not None else 0
        except (EvomemError, OSError):
            return -1


def _time(name: str, value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidEventError(name, "an RFC 3339 time with its zone") from None


__all__ = ["RedisProbe", "RetrievalService"]
