"""The retrieval index on Qdrant Edge (``qdrant-edge-py``): Qdrant's own engine, in process.

Shards under ``DATA_DIR/qdrant``: ``insights`` (every namespace's insights, with their state), and
the namespaces' past queries (with the evidence each carries) in two tiers:

* **shared**: ``shared/0`` .. ``shared/<n-1>`` (``EVOMEM_INDEX_SHARED_SHARDS``), each holding the
  queries of every small namespace whose name hashes to it, partitioned by the ``namespace`` tenant
  index and filtered on it in every search;
* **own**: ``namespaces/<hash>``, the shard of a namespace that passed ``EVOMEM_INDEX_PROMOTE_AT``
  past queries, to which it was promoted online (``_promote``: its points copied, the shard flushed,
  then its ``NAMESPACE`` file written, which is the routing switch, then its points dropped from the
  shared shard). There is no demotion: a namespace's past queries are never deleted, so a namespace
  never shrinks back below the threshold.

Only one process may open a shard, so the process that opens the store is the one projector for it;
the insights shard's write-ahead log holds that lock for the whole store. ``state`` is a keyword, not
a bool: qdrant-edge 0.9.0 never matches a bool payload with ``MatchValue(True)``.

Why a shard for a large namespace: a sparse search walks the posting lists of the query's dimensions
in batches over the range of point offsets they span. In one shard shared by every namespace, a
namespace's queries are interleaved with all the others', so its searches span the whole shard; in
a shard of its own they span its own queries only. On copies of the growth benchmark's 100k-task
memory (10 tenants) Eq. 2's search took 1.5 against 0.85-1.0 ms, and ``python -m bench.growth``'s
paired retrieve p50 ratio (100k over 10k tasks) went from 1.71x to 1.49x (bench/README, "A shard
per namespace"). Why shared shards for the small ones: a shard of its own costs a namespace ~56
files, ~0.18 s to create and a flush of its own in every batch that touches it, so that a batch of
events of 400 namespaces consolidated at 5 events/s against 463 in one namespace (issue 36). A small
namespace's searches are answered from its few points through the tenant index.

IDF stays per namespace in both tiers: an own shard's engine weighs the query by its posting lists
(every point in it is the namespace's); in a shared shard the query is weighed here by the same
formula from the namespace's own counts (``_weights``), which a bounded table keeps
(``EVOMEM_INDEX_DF_TABLE``), so that a namespace serves the same queries before and after promotion.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import qdrant_edge as qe

from evomem.adapters.qdrant.common import (
    INSIGHT_INDEXES,
    QUERY_INDEXES,
    VECTOR_NAME,
    hit_from_payload,
    insight_payload,
    int_point_id,
    int_query_point_id,
    latest,
    named_with_heirs,
    namespaced,
    node_id_of,
    query_payload,
    serving_from_payload,
    sparse_dot,
    top_k_deterministic,
)
from evomem.core.lru import Lru
from evomem.core.ports import InsightPoint, QueryHit, QueryPoint, Vector
from evomem.core.retrieval import ServingInsight
from evomem.errors import ConfigError, EvomemError, StoreError, StoreLockedError

#: Below this many points a sparse search scores points one by one instead of walking the inverted
#: index; Qdrant's default (5000) made the top-k of a namespace of a few thousand queries take
#: milliseconds (bench/README.md). Applies to shards created from now on.
SPARSE_FULL_SCAN_THRESHOLD = 500
#: payload, vectors and point ids (evomem/adapters/qdrant/common.py); 3: sparse dimensions per
#: namespace; 4: 64-bit integer point ids; 5: a shard of past queries per namespace; 6: shared shards
#: for small namespaces, a shard of its own for a large one
LAYOUT = "6"
_LAYOUT_FILE = "LAYOUT"
_NAMESPACES = "namespaces"  # one directory per promoted namespace, named by its hash: its queries' shard
_NAMESPACE_FILE = "NAMESPACE"  # the namespace a directory under namespaces/ belongs to, as written
_EMBEDDER_FILE = "EMBEDDER"  # the embedder (name:dim) whose vectors the store holds
_SIMILARITY_FILE = "SIMILARITY"  # idf or cosine: what the namespaces' shards were built for
_SHARED = "shared"  # shared/<i>: the queries of the small namespaces that hash to i
_SHARED_FILE = "SHARED"  # how many shared shards the store was built with
_COPY_BATCH = 256  # points copied per scroll when a namespace is promoted
#: a namespace's own shard needs no namespace index: every point in it is the namespace's
_NAMESPACE_QUERY_INDEXES = tuple(f for f in QUERY_INDEXES if f[0] != "namespace")


class _Guarded:
    """A shard of the engine behind the error boundary: whatever the engine raises from a call (its
    errors are bare exception types) leaves as ``StoreError`` naming the call and the store; a
    ``ValueError``/``TypeError`` (a bad argument: a bug here) and evomem's own errors pass as they are."""

    def __init__(self, shard: Any, where: str) -> None:
        self._shard = shard
        self._where = where

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._shard, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except (EvomemError, ValueError, TypeError):
                raise
            except Exception as exc:
                raise StoreError(f"qdrant edge refused {name} on {self._where}: {exc}") from exc

        setattr(self, name, call)  # wrapped once: the next call finds it without __getattr__
        return call


_MEMORY = {"pinned": qe.Memory.Pinned, "cached": qe.Memory.Cached, "cold": qe.Memory.Cold}


def shared_shard_of(namespace: str, shards: int) -> int:
    """The shared shard a small namespace's queries live in: its name's hash, so any name (long,
    unicode, path-like, with ``:`` or braces) maps to one of ``shards`` directories named by number."""
    return int.from_bytes(hashlib.blake2b(namespace.encode(), digest_size=8).digest(), "big") % shards


def namespace_dir_name(namespace: str) -> str:
    """The directory under ``namespaces/`` of a promoted namespace: a hash of its name."""
    return hashlib.sha256(namespace.encode()).hexdigest()[:32]


_HALF, _ONE = np.float32(0.5), np.float32(1.0)


def idf_weighted(vector: dict[int, float], total: int, df: dict[int, int]) -> dict[int, float]:
    """``vector``'s weights times Qdrant's IDF of each dimension, held by ``df[d]`` of ``total``
    points, as the engine's modifier computes it (in f32): ln((N - n + 0.5) / (n + 0.5) + 1)."""
    dims = list(vector)
    n = np.fromiter((df.get(d, 0) for d in dims), dtype=np.float32, count=len(dims))
    idf = np.log((np.float32(total) - n + _HALF) / (n + _HALF) + _ONE)
    weights = np.fromiter(vector.values(), dtype=np.float32, count=len(dims)) * idf
    return dict(zip(dims, weights.tolist(), strict=True))


class _Counts:
    """A namespace's document frequencies in its shared shard: how many of its points, and how many
    of them hold each dimension (its vectors namespaced, so the dimensions are its own)."""

    __slots__ = ("df", "points")

    def __init__(self) -> None:
        self.points = 0
        self.df: dict[int, int] = {}

    def add(self, indices: Sequence[int]) -> None:
        self.points += 1
        df = self.df
        for d in indices:
            df[d] = df.get(d, 0) + 1


#: The read model keeps the texts of one insight in this many it keeps the state of: the ones
#: served (or weighed) most recently.
TEXTS_PER_INSIGHTS = 8
#: What the read model keeps of a query point: (id, namespace, version, supports, harms).
_QueryEntry = tuple[str, str, int, tuple[str, ...], tuple[str, ...]]
#: ... and of an insight point: (id, namespace, version, state, inherits).
_InsightEntry = tuple[str, str, int, str, tuple[str, ...]]
_QUERY_FIELDS = ["id", "namespace", "version", "supports", "harms"]
_INSIGHT_FIELDS = ["id", "namespace", "version", "state", "inherits"]


def _held_newer(held: tuple[Any, ...], offered: tuple[Any, ...]) -> bool:
    return bool(held[2] > offered[2])


def _ids(ids: Any) -> tuple[str, ...]:
    """Node ids as the read model keeps them: one string object per id, however many points name
    it (an insight's id recurs in the evidence of every query that supports it)."""
    return tuple(sys.intern(str(i)) for i in ids or ())


def _query_entry(q: QueryPoint) -> _QueryEntry:
    return (sys.intern(q.id), sys.intern(q.namespace), q.version, _ids(q.supports), _ids(q.harms))


def _query_entry_of(payload: dict[str, Any]) -> _QueryEntry:
    return (
        sys.intern(payload["id"]),
        sys.intern(payload["namespace"]),
        int(payload.get("version", 0)),
        _ids(payload.get("supports")),
        _ids(payload.get("harms")),
    )


def _insight_entry(n: InsightPoint) -> _InsightEntry:
    return (sys.intern(n.id), sys.intern(n.namespace), n.version, sys.intern(n.state), _ids(n.inherits))


def _insight_entry_of(payload: dict[str, Any]) -> _InsightEntry:
    return (
        sys.intern(payload["id"]),
        sys.intern(payload["namespace"]),
        int(payload.get("version", 0)),
        sys.intern(str(payload["state"])),
        _ids(payload.get("inherits")),
    )


def _keyed_queries(entries: Iterable[_QueryEntry]) -> Iterator[tuple[tuple[str, str], _QueryEntry]]:
    return (((e[1], e[0]), e) for e in entries)


def _query_keyed(payload: dict[str, Any]) -> tuple[tuple[str, str], _QueryEntry]:
    e = _query_entry_of(payload)
    return (e[1], e[0]), e


def _insight_keyed(payload: dict[str, Any]) -> tuple[str, _InsightEntry]:
    e = _insight_entry_of(payload)
    return e[0], e


def edge_layout(directory: Path) -> str | None:
    """The layout an embedded store was written in (None: no store there, or no marker)."""
    marker = directory / _LAYOUT_FILE
    return marker.read_text().strip() if marker.exists() else None


def edge_identity(directory: Path) -> str:
    """The name an embedded store's projector cursor is kept under in Redis."""
    return f"edge:{directory.resolve()}"


#: How a dense embedder's vectors are stored (the sparse ones keep float32 weights).
DENSE_DATATYPE = qe.VectorStorageDatatype.Float16


def store_marker(embedder: str, kind: Literal["sparse", "dense"]) -> str:
    """What a store records of the embedder that built it (``embedder_name``), with how a dense one's
    vectors are stored: a store of float32 dense vectors (before 2026-12-07) is refused, and
    ``evomem reindex`` rebuilds it."""
    return embedder if kind == "sparse" else f"{embedder} float16"


class EdgeIndex:
    """A ``VectorIndex`` on Qdrant Edge shards: the insights', the shared ones, and the promoted
    namespaces' own (at most ``open_shards`` of those open at once, the least recently used closed)."""

    def __init__(
        self,
        directory: Path,
        kind: Literal["sparse", "dense"],
        dim: int,
        memory: Literal["pinned", "cached", "cold"] = "pinned",
        idf: bool = True,
        embedder: str | None = None,
        shared_shards: int = 4,
        promote_at: int = 1000,
        open_shards: int = 64,
        df_table: int = 1_048_576,
        query_cache: int = 262_144,
        insight_cache: int = 1_048_576,
    ) -> None:
        if shared_shards < 1 or promote_at < 1 or open_shards < 1 or df_table < 0:
            raise ValueError("shared_shards, promote_at and open_shards are at least 1, df_table at least 0")
        self.shared_shards = shared_shards
        self.promote_at = promote_at
        self.open_shards = open_shards
        self.df_table = df_table
        self.dir = directory.resolve()
        self.embedder = None if embedder is None else store_marker(embedder, kind)
        self.idf = idf and kind == "sparse"
        self.memory = _MEMORY[memory]
        self.identity = edge_identity(self.dir)
        self.kind = kind
        self.dim = dim
        self.fresh = False
        self._check_layout()
        self._check_embedder()
        # opened first: its write-ahead log's lock keeps a second process out of the whole store
        # (the namespaces' shards keep no log, see ``persist``)
        self.insights = self._open(self.dir / "insights", self._config(), INSIGHT_INDEXES)
        (self.dir / _LAYOUT_FILE).write_text(LAYOUT + "\n")
        self._check_similarity()
        self._check_shared()
        # the shards of past queries, opened on first use; written by the projector's thread, read by
        # any (the HTTP service's), so opening one is under a lock. ``_shared``: by number;
        # ``_own``: the promoted namespaces' that are open, least recently used first
        self._opening = threading.Lock()
        self._shared: dict[int, Any] = {}
        self._own: OrderedDict[str, Any] = OrderedDict()
        self._unflushed: dict[str, Any] = {}  # shard name -> shard, written since the last persist
        self._promoted: set[str] = self._read_promoted()
        self._counts: OrderedDict[str, _Counts] = OrderedDict()  # shared namespaces' df, bounded
        self._counted = 0  # dimensions held in ``_counts``
        self._reading: dict[str, int] = {}  # namespaces whose counts are being read, by how many
        self._stale: set[str] = set()  # of those, the ones written meanwhile
        self._leftovers: list[tuple[str, Any]] = []  # promoted namespaces' points to drop from shared shards
        self.promotions = 0  # namespaces promoted by this process
        self._drop_promoted_leftovers()
        # the namespaces that may hold an active insight which took others' evidence over (a REVISE,
        # a merge): only there does serving look for heirs. This process is the store's one writer,
        # so the set it keeps from its own writes stays a superset of the truth.
        self._with_heirs: set[str] = self._namespaces_with_heirs()
        # the read model retrieval reads instead of the shards, by node id: each query's evidence
        # and each insight's state, kept at every write of this process (the shards' one writer)
        # and on every read of a point it lacked, the least recently used dropped first
        self.query_cache: Lru[tuple[str, str], _QueryEntry] = Lru(query_cache)  # by (namespace, id)
        self.insight_cache: Lru[str, _InsightEntry] = Lru(insight_cache)  # by id: one point an id
        # the texts of the insights read to be served (or weighed), a few of the kept insights'
        self.text_cache: Lru[str, str] = Lru(insight_cache // TEXTS_PER_INSIGHTS)

    def _check_layout(self) -> None:
        marker = self.dir / _LAYOUT_FILE
        has_data = any((self.dir / name / "segments").exists() for name in ("queries", "insights")) or any(
            (self.dir / _NAMESPACES).glob("*/segments")
        )
        found = marker.read_text().strip() if marker.exists() else None
        if has_data and found != LAYOUT:
            raise ConfigError(
                f"the embedded Qdrant store at {self.dir} was written by another evomem version; it is "
                "only a read model of Redis: delete that directory and it is rebuilt from Redis"
            )

    def _check_similarity(self) -> None:
        """The namespaces' shards are opened on first use; the similarity they were built for is
        checked here, at open, for all of them."""
        marker = self.dir / _SIMILARITY_FILE
        wanted = "idf" if self.idf else "cosine"
        built = marker.read_text().strip() if marker.exists() else None
        if built is None:
            marker.write_text(wanted + "\n")
        elif built != wanted:
            self.insights.close()
            raise self._built_for(built)

    def _check_embedder(self) -> None:
        """Vectors of two embedders cannot be compared: a store built by another one is refused,
        with the way to rebuild it (``evomem reindex``). A store from before the marker is taken as
        built by the embedder configured now."""
        if self.embedder is None:
            return
        marker = self.dir / _EMBEDDER_FILE
        built = marker.read_text().strip() if marker.exists() else None
        if built is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            marker.write_text(self.embedder + "\n")
        elif built != self.embedder:
            raise ConfigError(
                f"the embedded Qdrant store at {self.dir} was built by the {built} embedder, and "
                f"EVOMEM_EMBEDDER gives {self.embedder}: run `evomem reindex` to re-embed it from Redis "
                "(resumable), or set EVOMEM_EMBEDDER back"
            )

    def _check_shared(self) -> None:
        marker = self.dir / _SHARED_FILE
        built = marker.read_text().strip() if marker.exists() else None
        if built is None:
            marker.write_text(f"{self.shared_shards}\n")
        elif built != str(self.shared_shards):
            self.insights.close()
            raise ConfigError(
                f"the embedded Qdrant store at {self.dir} was built with EVOMEM_INDEX_SHARED_SHARDS={built}; "
                "it is only a read model of Redis: delete that directory and it is rebuilt from Redis "
                "with the number configured now"
            )

    def _read_promoted(self) -> set[str]:
        """The namespaces with a shard of their own: the directories whose ``NAMESPACE`` file was
        written. A directory without one is a promotion a stopped process left half done: removed
        (the namespace's points are still in its shared shard)."""
        promoted: set[str] = set()
        root = self.dir / _NAMESPACES
        if not root.exists():
            return promoted
        for entry in sorted(root.iterdir()):
            marker = entry / _NAMESPACE_FILE
            if marker.exists():
                owner = marker.read_text(encoding="utf-8")
                if namespace_dir_name(owner) != entry.name:
                    self.insights.close()
                    raise StoreError(
                        f"{entry} holds the queries of namespace {owner!r}, not of the namespace its name "
                        f"is the hash of; the embedded Qdrant store at {self.dir} is only a read model of "
                        "Redis: delete that directory and it is rebuilt from Redis"
                    )
                promoted.add(owner)
            elif entry.is_dir():
                shutil.rmtree(entry)
        return promoted

    def _drop_promoted_leftovers(self) -> None:
        """A promoted namespace's points left in its shared shard (the process stopped before that
        shard's next flush) are dropped, so no search of the shared shard finds them."""
        for namespace in sorted(self._promoted):
            number = shared_shard_of(namespace, self.shared_shards)
            if not (self.dir / _SHARED / str(number) / "segments").exists():
                continue
            shard = self._shared_shard(number)
            only = qe.Filter(must=[self._match("namespace", namespace)])
            if int(shard.count(qe.CountRequest(filter=only, exact=True))):
                shard.update(qe.UpdateOperation.delete_points_by_filter(only))
                shard.flush()

    def _built_for(self, similarity: str) -> ConfigError:
        return ConfigError(
            f"the embedded Qdrant store at {self.dir} was built for EVOMEM_SIMILARITY={similarity}; "
            "it is only a read model of Redis: delete that directory and it is rebuilt from "
            "Redis with the similarity configured now"
        )

    def _config(self, queries: bool = False, shared: bool = False) -> Any:
        """The configuration of the insights shard, or (``queries``) of a promoted namespace's
        queries, or (``shared``) of a shared shard of queries. The payload stays on disk (Edge's
        default, mmap); ``memory`` places the vectors' index."""
        # a shard of queries: one search thread (a search walks one segment on one thread anyway,
        # and a process holds many such shards), no write-ahead log (``persist``)
        own: dict[str, Any] = {"max_search_threads": 1, "wal_enabled": False} if queries or shared else {}
        if self.kind == "sparse":
            # IDF is applied at search time from the posting lists' lengths: in a promoted
            # namespace's shard both the count of queries and a word's document frequency are the
            # namespace's. A shared shard's counts are every namespace's: its queries are weighed
            # here instead (``_weights``)
            sparse = qe.EdgeSparseVectorParams(
                full_scan_threshold=SPARSE_FULL_SCAN_THRESHOLD,
                memory=self.memory,
                modifier=qe.Modifier.Idf if queries and self.idf else None,
            )
            return qe.EdgeConfig(sparse_vectors={VECTOR_NAME: sparse}, payload_memory=qe.Memory.Cold, **own)
        # dense vectors kept as float16: a search of Eq. 2 reads half the bytes (a scan of 10k e5 queries
        # 0.7 against 1.5 ms: docs/lab/2026-12-07-the-dense-embedders-cost.md); a cosine moves by ~1e-4
        params = qe.EdgeVectorParams(
            size=self.dim, distance=qe.Distance.Cosine, memory=self.memory, datatype=DENSE_DATATYPE
        )
        return qe.EdgeConfig(vectors={VECTOR_NAME: params}, payload_memory=qe.Memory.Cold, **own)

    def _open(self, path: Path, config: Any, indexes: Sequence[tuple[str, str]]) -> Any:
        try:
            if (path / "segments").exists():
                # the configuration given again: a changed EVOMEM_INDEX_MEMORY applies to a store
                # that exists (the engine checks the rest is compatible and rewrites its config)
                loaded = _Guarded(qe.EdgeShard.load(str(path), config), str(path))
                self._index_fields(loaded, indexes, set(loaded.info().payload_schema))
                return loaded
            path.mkdir(parents=True, exist_ok=True)
            shard = _Guarded(qe.EdgeShard.create(str(path), config), str(path))
        except Exception as exc:  # the engine raises a bare exception type for a held WAL lock
            if "modifier" in str(exc):
                raise self._built_for("cosine" if self.idf else "idf") from None
            if "ncompatible" in str(exc):  # a store from before the embedder marker, of another kind
                raise ConfigError(
                    f"the embedded Qdrant store at {self.dir} was built by another embedder than "
                    f"EVOMEM_EMBEDDER's ({self.embedder or self.kind}): run `evomem reindex` to re-embed "
                    "it from Redis (resumable), or set EVOMEM_EMBEDDER back"
                ) from None
            if "WouldBlock" in str(exc):
                raise StoreLockedError(
                    f"the embedded Qdrant store at {path} is open in another process; only one process may "
                    "hold it. Connect to that process's service (EVOMEM_URL) or set EVOMEM_QDRANT_URL."
                ) from None
            raise
        if path.name == "insights":  # a namespace's shard is new whenever it first has a query
            self.fresh = True
        # payload indexes before the first write, so every segment is built with them
        self._index_fields(shard, indexes, set())
        return shard

    def _namespace_dir(self, namespace: str) -> Path:
        # named by a hash: a namespace may hold any character; NAMESPACE inside says whose it is
        return self.dir / _NAMESPACES / namespace_dir_name(namespace)

    def _shared_shard(self, number: int) -> Any:
        """Shared shard ``number``, opened (created on its first write) once for the store's life."""
        shard = self._shared.get(number)
        if shard is None:
            path = self.dir / _SHARED / str(number)
            shard = self._open(path, self._config(shared=True), QUERY_INDEXES)
            self._shared[number] = shard
        return shard

    def _own_shard(self, namespace: str, create: bool = False) -> Any:
        """A promoted namespace's shard, opened if it is not (closing the least recently used one
        past ``open_shards``, unless written since the last persist). Under ``_opening``."""
        shard = self._own.get(namespace)
        if shard is not None:
            self._own.move_to_end(namespace)
            return shard
        path = self._namespace_dir(namespace)
        marker = path / _NAMESPACE_FILE
        if marker.exists():
            owner = marker.read_text(encoding="utf-8")
            if owner != namespace:
                raise StoreError(
                    f"{path} holds the queries of namespace {owner!r}, not of {namespace!r}; the "
                    f"embedded Qdrant store at {self.dir} is only a read model of Redis: delete "
                    "that directory and it is rebuilt from Redis"
                )
        elif not create:
            raise StoreError(f"the shard of promoted namespace {namespace!r} is missing at {path}")
        shard = self._open(path, self._config(queries=True), _NAMESPACE_QUERY_INDEXES)
        self._own[namespace] = shard
        self._evict()
        return shard

    def _evict(self) -> None:
        """Close the least recently used promoted shards past ``open_shards`` (those written since
        the last persist stay open until it). A search still holding one finishes on it: the engine
        releases a shard when its last reference goes."""
        for name in list(self._own):
            if len(self._own) <= self.open_shards:
                return
            if f"own:{name}" not in self._unflushed:
                del self._own[name]

    def _route(self, namespace: str, write: bool = False) -> tuple[Any | None, bool]:
        """(the shard holding the namespace's queries, whether it is a shared one). The shard is
        None when it does not exist yet and ``write`` is not asked; with ``write`` it is marked
        for the next persist, so it is not closed before it."""
        with self._opening:
            if namespace in self._promoted:
                shard = self._own_shard(namespace)
                if write:
                    self._unflushed[f"own:{namespace}"] = shard
                return shard, False
            number = shared_shard_of(namespace, self.shared_shards)
            missing = (
                number not in self._shared and not (self.dir / _SHARED / str(number) / "segments").exists()
            )
            if missing and not write:
                return None, True
            shard = self._shared_shard(number)
            if write:
                self._unflushed[f"shared:{number}"] = shard
            return shard, True

    def _queries(self, namespace: str) -> Any | None:
        """The shard of the namespace's past queries; None when there is none yet."""
        return self._route(namespace)[0]

    # -- a shared namespace's document frequencies --------------------------------------------
    def _namespace_counts(self, namespace: str, shard: Any) -> _Counts:
        """The namespace's counts in its shared shard: from the table, or read from the shard (its
        points' vectors, found through the tenant index) and kept, the least recently used
        dropped past ``df_table`` dimensions."""
        with self._opening:
            counts = self._counts.get(namespace)
            if counts is not None:
                self._counts.move_to_end(namespace)
                return counts
            # a write to the namespace while its points are read marks this reading stale: kept, it
            # would miss that write's points for good
            self._reading[namespace] = self._reading.get(namespace, 0) + 1
        counts = _Counts()
        only = qe.Filter(must=[self._match("namespace", namespace)])
        offset: Any = None
        while True:
            records, offset = shard.scroll(
                qe.ScrollRequest(
                    limit=_COPY_BATCH, offset=offset, filter=only, with_payload=False, with_vector=True
                )
            )
            for r in records:
                counts.add(r.vector[VECTOR_NAME].indices)
            if offset is None:
                break
        with self._opening:
            readers = self._reading.pop(namespace, 0)
            fresh = readers > 0 and namespace not in self._stale
            if readers > 1:
                self._reading[namespace] = readers - 1
            else:
                self._stale.discard(namespace)
            if fresh and namespace not in self._promoted and namespace not in self._counts:
                self._keep_counts(namespace, counts)
        return counts

    def _keep_counts(self, namespace: str, counts: _Counts) -> None:
        """Under ``_opening``."""
        if len(counts.df) > self.df_table:
            return
        self._counts[namespace] = counts
        self._counted += len(counts.df)
        while self._counted > self.df_table and self._counts:
            _, dropped = self._counts.popitem(last=False)
            self._counted -= len(dropped.df)

    def _forget_counts(self, namespace: str) -> None:
        """Under ``_opening``."""
        dropped = self._counts.pop(namespace, None)
        if dropped is not None:
            self._counted -= len(dropped.df)

    def _weights(self, namespace: str, shard: Any, vector: Vector) -> Vector:
        """A (namespaced) query weighed by IDF within its namespace, for a shared shard: what the
        engine's modifier does in a promoted namespace's shard, from the namespace's own counts."""
        if not self.idf:
            return vector
        assert isinstance(vector, dict)
        counts = self._namespace_counts(namespace, shard)
        return idf_weighted(vector, counts.points, counts.df)

    @staticmethod
    def _index_fields(shard: Any, indexes: Sequence[tuple[str, str]], held: set[str]) -> None:
        """Create the payload indexes the shard does not hold yet (a store written by an earlier
        evomem gains the ones added since, in place)."""
        schemas: dict[str, Any] = {
            "tenant": qe.KeywordIndexParams(is_tenant=True),
            "keyword": qe.PayloadSchemaType.Keyword,
            "integer": qe.PayloadSchemaType.Integer,
        }
        for field, kind_of_index in indexes:
            if field not in held:
                shard.update(qe.UpdateOperation.create_field_index(field, schemas[kind_of_index]))

    def _namespaces_with_heirs(self) -> set[str]:
        heirs = qe.Filter(must=[self._match("state", "active")], must_not=[qe.IsEmptyCondition("inherits")])
        found = self.insights.facet(qe.FacetRequest("namespace", limit=1 << 31, exact=True, filter=heirs))
        return {str(hit.value) for hit in found.hits}

    def _vector(self, vec: Vector) -> Any:
        if self.kind == "sparse":
            assert isinstance(vec, dict)
            items = sorted(vec.items())
            return {VECTOR_NAME: qe.SparseVector([k for k, _ in items], [v for _, v in items])}
        return {VECTOR_NAME: list(vec)}

    # -- writes (the projector's) --------------------------------------------------------------
    def write_queries(self, points: Sequence[tuple[QueryPoint, Vector | None]]) -> None:
        by_namespace: dict[str, dict[int, tuple[QueryPoint, Vector | None]]] = {}
        for p, v in latest(points):
            by_namespace.setdefault(p.namespace, {})[int_query_point_id(p.namespace, p.id)] = (p, v)
        grown: list[tuple[str, Any]] = []
        for namespace, by_point in by_namespace.items():
            shard, shared = self._route(namespace, write=True)
            new, written = self._write(shard, by_point, query_payload)
            self.query_cache.offer(
                _keyed_queries(_query_entry(by_point[pid][0]) for pid in written), _held_newer
            )
            if shared and new:
                grown.append((namespace, shard))
                if self.idf:  # the namespace's counts, if kept, grow with its new points
                    with self._opening:
                        if namespace in self._reading:
                            self._stale.add(namespace)
                        if (counts := self._counts.get(namespace)) is not None:
                            held = len(counts.df)
                            for point in new:
                                counts.add(point.vector[VECTOR_NAME].indices)
                            self._counted += len(counts.df) - held
        for namespace, shard in grown:
            only = qe.Filter(must=[self._match("namespace", namespace)])
            if int(shard.count(qe.CountRequest(filter=only, exact=True))) >= self.promote_at:
                self._promote(namespace, shard)

    def _promote(self, namespace: str, shared: Any) -> None:
        """Move a namespace from its shared shard to a shard of its own, online (the projector's
        thread; searches go on meanwhile): its points copied, the new shard flushed, its
        ``NAMESPACE`` file written (the routing switch, atomic), then its points deleted from the
        shared shard. A process stopped before the switch leaves a directory without that file,
        removed at the next open; one stopped after it, points in the shared shard that the next open
        drops (``_drop_promoted_leftovers``). Shard creation (~0.18 s) happens once a namespace, past
        ``promote_at`` queries, not once per namespace."""
        path = self._namespace_dir(namespace)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        own = self._open(path, self._config(queries=True), _NAMESPACE_QUERY_INDEXES)
        only = qe.Filter(must=[self._match("namespace", namespace)])
        offset: Any = None
        while True:
            records, offset = shared.scroll(
                qe.ScrollRequest(
                    limit=_COPY_BATCH, offset=offset, filter=only, with_payload=True, with_vector=True
                )
            )
            if records:
                own.update(qe.UpdateOperation.upsert_points([self._copy(r) for r in records]))
            if offset is None:
                break
        own.flush()
        marker = path / _NAMESPACE_FILE
        tmp = path / (_NAMESPACE_FILE + ".tmp")
        tmp.write_text(namespace, encoding="utf-8")
        os.replace(tmp, marker)
        with self._opening:
            self._promoted.add(namespace)
            self._own[namespace] = own
            self._forget_counts(namespace)
            self._evict()
        # dropped from the shared shard at the next persist, not now: a search routed there just
        # before the switch still finds them
        self._leftovers.append((namespace, shared))
        self.promotions += 1

    @staticmethod
    def _copy(record: Any) -> Any:
        vectors = {}
        for name, vec in record.vector.items():
            vectors[name] = (
                qe.SparseVector(list(vec.indices), list(vec.values)) if hasattr(vec, "indices") else vec
            )
        return qe.Point(record.id, vectors, record.payload)

    def persist(self) -> None:
        """Make every write so far durable: one flush per shard written since the last, however many
        namespaces it holds. The shards of queries keep no write-ahead log (one of 64 MB on disk
        each otherwise): what was written to one since its last flush is lost if the process dies,
        so the projector saves its cursor past the changes only after this
        (``Projector.checkpoint``), and projects them again otherwise. A flush took 2-5 ms a
        shard (bench/README, "A shard per namespace")."""
        leftovers, self._leftovers = self._leftovers, []
        for namespace, shared in leftovers:
            shared.update(
                qe.UpdateOperation.delete_points_by_filter(
                    qe.Filter(must=[self._match("namespace", namespace)])
                )
            )
            with self._opening:
                self._unflushed[f"shared:{shared_shard_of(namespace, self.shared_shards)}"] = shared
        with self._opening:
            shards, self._unflushed = self._unflushed, {}
        for shard in shards.values():
            shard.flush()
        with self._opening:
            self._evict()

    def write_insights(self, points: Sequence[tuple[InsightPoint, Vector | None]]) -> None:
        pairs = latest(points)
        ids = {int_point_id(p.id): (p, v) for p, v in pairs}
        self._with_heirs.update(p.namespace for p, _ in pairs if p.inherits and p.state == "active")
        _, written = self._write(self.insights, ids, insight_payload)
        self.insight_cache.offer(
            ((e[0], e) for e in (_insight_entry(ids[pid][0]) for pid in written)), _held_newer
        )

    def _write(
        self, shard: Any, by_point: dict[int, tuple[Any, Vector | None]], payload: Any
    ) -> tuple[list[Any], list[int]]:
        """Upsert the points the shard does not hold, set the payload of those it holds at an older
        version, and leave alone those it holds at this version or a newer one. Returns the new
        points, and the ids of every point written (new or set)."""
        if not by_point:
            return [], []
        fields = ["id", "namespace", "version"]
        held = {r.id: r.payload for r in shard.retrieve(list(by_point), fields, False)}
        new, written = [], []
        for pid, (p, vec) in by_point.items():
            if (found := held.get(pid)) is not None:
                if (found["namespace"], found["id"]) != (p.namespace, p.id):
                    raise StoreError(
                        f"{p.namespace}/{p.id} and {found['namespace']}/{found['id']} have the same point id "
                        f"in the embedded Qdrant store at {self.dir} (64 bits: about one chance in 3·10⁷ "
                        "at a million nodes); a Qdrant server (EVOMEM_QDRANT_URL) keys points by UUID"
                    )
                if int(found["version"]) < p.version:
                    shard.update(qe.UpdateOperation.set_payload([pid], payload(p)))
                    written.append(pid)
            elif vec is None:
                raise ValueError(f"{p.id!r} is not in the index yet and came without a vector")
            else:
                new.append(qe.Point(pid, self._vector(namespaced(vec, p.namespace)), payload(p)))
                written.append(pid)
        if new:
            shard.update(qe.UpdateOperation.upsert_points(new))
        return new, written

    # -- reads ---------------------------------------------------------------------------------
    def _nearest(
        self,
        shard: Any,
        vector: Vector,
        conditions: list[Any],
        k: int,
        fields: Any,
        should: Any = None,
        must_not: Any = None,
        with_vector: bool = False,
    ) -> Any:
        if not vector or k <= 0:
            return []
        filtered = conditions or should or must_not
        return shard.query(
            qe.QueryRequest(
                limit=k,
                query=qe.Query.Nearest(self._vector(vector)[VECTOR_NAME], using=VECTOR_NAME),
                filter=qe.Filter(must=conditions or None, should=should or None, must_not=must_not or None)
                if filtered
                else None,
                with_payload=fields,
                with_vector=with_vector,
            )
        )

    @staticmethod
    def _match(field: str, value: str) -> Any:
        return qe.FieldCondition(field, match=qe.MatchValue(value))

    def search_evidence(
        self,
        vector: Vector,
        namespace: str,
        insights: int,
        k: int,
        exclude: Collection[str] = (),
        about: Vector | None = None,
    ) -> list[QueryHit]:
        active = [self._match("namespace", namespace), self._match("state", "active")]
        probe = namespaced(vector, namespace)
        by_text = namespaced(about, namespace) if about is not None else probe
        nearest = top_k_deterministic(  # ties cut by id, as every replica cuts them
            lambda limit: self._nearest(self.insights, by_text, active, limit, ["id", "inherits"]),
            insights,
            lambda h: float(h.score),
            lambda h: h.payload["id"],
        )
        ids = named_with_heirs([h.payload for h in nearest if h.score > 0])
        queries, shared = self._route(namespace) if ids else (None, False)
        if not ids or queries is None:
            return []
        # in a shared shard: the namespace's points alone, and the query weighed by its own IDF
        only = [self._match("namespace", namespace)] if shared else []
        ranked_by = self._weights(namespace, queries, by_text) if shared else by_text
        evidence = [
            qe.FieldCondition("supports", match=qe.MatchAny(ids)),
            qe.FieldCondition("harms", match=qe.MatchAny(ids)),
        ]
        skip = [qe.HasIdCondition({int_query_point_id(namespace, q) for q in exclude})] if exclude else None
        # the hits with their payload in one search, then the vectors of the k kept in one read
        # (``_stored_vectors``). Found by ``about`` too (the task's words):
        # the walk over the namespace's posting lists is then that of a dozen words, not of every
        # character n-gram, and the hits are weighed by their cosine with the whole task all the same
        fields = ["id", "supports", "harms"]
        exact = self.idf or about is not None
        hits = top_k_deterministic(
            lambda limit: self._nearest(queries, ranked_by, only, limit, fields, evidence, skip),
            k,
            lambda h: float(h.score),
            lambda h: h.payload["id"],
        )
        kept = [h for h in hits if h.score > 0]
        if not exact:
            return [hit_from_payload(h.payload, float(h.score)) for h in kept]
        # the engine ranked by another product (under IDF, or found by another vector): each hit
        # weighs its cosine with ``probe``, from its stored vector
        stored = self._stored_vectors(queries, [h.id for h in kept])
        assert isinstance(probe, dict)
        return [
            hit_from_payload(h.payload, sparse_dot(probe, v.indices, v.values))
            for h in kept
            if (v := stored.get(h.id)) is not None
        ]

    @staticmethod
    def _stored_vectors(shard: Any, point_ids: list[Any]) -> dict[Any, Any]:
        """The stored sparse vectors of the k hits a search kept, by point id, in one call: asking
        the search for its hits' vectors converts those of every hit it returns (``first_limit(k)``
        of them) into Python, about 70 us more a search than a search without them and a read of
        the k kept (CPU time, scratch timing in docs/lab/2026-12-07-the-retrieval-core-second-pass.md).
        A point gone since the search is left out."""
        if not point_ids:
            return {}
        return {r.id: r.vector[VECTOR_NAME] for r in shard.retrieve(point_ids, False, True)}

    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[QueryHit]:
        # ids and scores of a few more than k (past queries of templated tasks often score exactly
        # alike: the cut must see every tie), then under IDF the stored vectors of the k kept (the
        # weight of a hit is its cosine, not the IDF-weighted product the engine ranks by;
        # ``_stored_vectors``); the evidence of the k kept from the read model (``_evidence``). The
        # search is repeated wider only when the tie runs longer. A promoted namespace's own shard:
        # no filter; a shared one: the namespace's points, the query weighed by the namespace's IDF
        queries, shared = self._route(namespace)
        if queries is None:
            return []
        probe = namespaced(vector, namespace)
        only = [self._match("namespace", namespace)] if shared else []
        ranked_by = self._weights(namespace, queries, probe) if shared else probe
        hits = top_k_deterministic(
            lambda limit: self._nearest(queries, ranked_by, only, limit, ["id"]),
            k,
            lambda h: float(h.score),
            lambda h: h.payload["id"],
        )
        kept = [h for h in hits if h.score > 0]
        evidence = self._evidence(namespace, [h.payload["id"] for h in kept])
        # ranked by the IDF-weighted product; weighed by the cosine, from the kept hits' vectors
        stored = self._stored_vectors(queries, [h.id for h in kept]) if self.idf else {}
        out = []
        for h in kept:
            if (found := evidence.get(h.payload["id"])) is None:
                continue
            score = float(h.score)
            if self.idf:
                if (vec := stored.get(h.id)) is None:
                    continue  # gone since the search
                assert isinstance(probe, dict)
                score = sparse_dot(probe, vec.indices, vec.values)
            out.append(QueryHit(found[0], score, found[3], found[4]))
        return out

    def query_evidence(self, namespace: str, ids: Collection[str]) -> dict[str, QueryHit]:
        return {q: QueryHit(q, 0.0, e[3], e[4]) for q, e in self._evidence(namespace, ids).items()}

    def _evidence(self, namespace: str, ids: Collection[str]) -> dict[str, _QueryEntry]:
        """{query id: what the read model holds of it} for the ids of the namespace: from
        ``query_cache``, the points it lacks read from their shard in one call (and kept)."""
        if not ids:
            return {}
        held = self.query_cache.get_many((namespace, q) for q in ids)
        out = {key[1]: e for key, e in held.items()}
        missing = [int_query_point_id(namespace, q) for q in ids if q not in out]
        if missing and (queries := self._queries(namespace)) is not None:
            wanted = set(ids)
            records = queries.retrieve(missing, _QUERY_FIELDS, False)
            entries = [
                e for r in records if (e := _query_entry_of(r.payload))[1] == namespace and e[0] in wanted
            ]
            self.query_cache.offer(_keyed_queries(entries), _held_newer)
            out.update((e[0], e) for e in entries)
        return out

    def serving_ids(
        self, namespace: str, ids: Collection[str]
    ) -> tuple[set[str], dict[str, tuple[str, ...]]]:
        if not ids:
            return set(), {}
        # from the read model (each insight's state, by id); the insights it lacks read by point id
        # (no text: at a million insights, reading the text of every candidate was most of a
        # retrieval) and kept
        held = self.insight_cache.get_many(ids)
        missing = [int_point_id(i) for i in ids if i not in held]
        if missing:
            wanted = ids if isinstance(ids, set | frozenset) else set(ids)
            records = self.insights.retrieve(missing, _INSIGHT_FIELDS, False)
            entries = [e for r in records if (e := _insight_entry_of(r.payload))[0] in wanted]
            self.insight_cache.offer(((e[0], e) for e in entries), _held_newer)
            held.update((e[0], e) for e in entries)
        found = {i for i, e in held.items() if e[3] == "active" and e[1] == namespace}
        if namespace not in self._with_heirs:
            return found, {}
        active = [self._match("namespace", namespace), self._match("state", "active")]
        # the heirs, from the shard: the read model is by point, and knows no insight by what it inherits
        heirs, _ = self.insights.scroll(
            qe.ScrollRequest(
                limit=len(ids) + 1,
                filter=qe.Filter(must=[*active, qe.FieldCondition("inherits", match=qe.MatchAny(list(ids)))]),
                with_payload=["id", "inherits"],
            )
        )
        return found, {r.payload["id"]: tuple(r.payload.get("inherits") or ()) for r in heirs}

    def read_insights(self, namespace: str, ids: Collection[str]) -> dict[str, ServingInsight]:
        """From the read model where it holds both the insight's fields and its text (a text never
        changes: a revision is another node), the others read from the shard in one call and kept."""
        if not ids:
            return {}
        held = self.insight_cache.get_many(ids)
        texts = self.text_cache.get_many(held)
        out = {
            i: ServingInsight(i, texts[i], e[2], e[4])
            for i, e in held.items()
            if i in texts and e[1] == namespace
        }
        missing = [int_point_id(i) for i in ids if i not in texts]
        if not missing:
            return out
        wanted = ids if isinstance(ids, set | frozenset) else set(ids)
        records = self.insights.retrieve(missing, [*_INSIGHT_FIELDS, "text"], False)
        read = [r.payload for r in records if r.payload["id"] in wanted]
        self.insight_cache.offer(((e[0], e) for e in map(_insight_entry_of, read)), _held_newer)
        self.text_cache.offer((p["id"], p["text"]) for p in read)
        out.update((p["id"], serving_from_payload(p)) for p in read if p["namespace"] == namespace)
        return out

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        conditions = [self._match("namespace", namespace), self._match("state", "active")]
        hits = self._nearest(self.insights, namespaced(vector, namespace), conditions, k, ["id"])
        return [(node_id_of(h), float(h.score)) for h in hits if h.score > 0]

    def warm_read_model(self, stop: threading.Event | None = None, batch: int = 1_000) -> int:
        """Fill the read model (``query_cache``, ``insight_cache``) from the shards, each up to its
        capacity, never evicting what is held; returns the entries read. What a write put there
        meanwhile is newer, and is kept. Run by the retriever's warm-up (``Retriever.warm``)."""
        read = 0
        with self._opening:
            shards = [
                self._shared_shard(number)
                for number in range(self.shared_shards)
                if number in self._shared or (self.dir / _SHARED / str(number) / "segments").exists()
            ]
            promoted = sorted(self._promoted)
        read += self._warm(self.insights, self.insight_cache, _INSIGHT_FIELDS, _insight_keyed, stop, batch)
        for shard in shards:
            read += self._warm(shard, self.query_cache, _QUERY_FIELDS, _query_keyed, stop, batch)
        for ns in promoted:
            if (shard := self._queries(ns)) is not None:
                read += self._warm(shard, self.query_cache, _QUERY_FIELDS, _query_keyed, stop, batch)
        return read

    @staticmethod
    def _warm(
        shard: Any,
        cache: Lru[Any, Any],
        fields: list[str],
        entry: Callable[[dict[str, Any]], tuple[Any, Any]],
        stop: threading.Event | None,
        batch: int,
    ) -> int:
        offset: Any = None
        read = 0
        while len(cache) < cache.capacity and not (stop is not None and stop.is_set()):
            records, offset = shard.scroll(qe.ScrollRequest(limit=batch, offset=offset, with_payload=fields))
            room = cache.capacity - len(cache)
            cache.offer((entry(r.payload) for r in records[:room]), _held_newer)
            read += len(records)
            if offset is None:
                break
        return read

    def scan_insights(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        offset: Any = None
        active = qe.Filter(must=[self._match("state", "active")])
        while True:
            records, offset = self.insights.scroll(
                qe.ScrollRequest(limit=batch, offset=offset, filter=active, with_payload=["id", "text"])
            )
            yield [(r.payload["id"], r.payload["text"]) for r in records]
            if offset is None:
                return

    def versions(
        self, kind: Literal["insight", "query"], namespace: str, ids: Collection[str]
    ) -> dict[str, int]:
        if not ids:
            return {}
        if kind == "query":
            if (queries := self._queries(namespace)) is None:
                return {}
            records = queries.retrieve(
                [int_query_point_id(namespace, q) for q in ids], ["id", "namespace", "version"], False
            )
        else:
            records = self.insights.retrieve(
                [int_point_id(i) for i in ids], ["id", "namespace", "version"], False
            )
        return {
            r.payload["id"]: int(r.payload["version"]) for r in records if r.payload["namespace"] == namespace
        }

    def count(self, kind: Literal["insight", "query"]) -> int:
        if kind == "insight":
            return int(self.insights.count(qe.CountRequest(exact=True)))
        total = 0
        leaving = [ns for ns, _ in self._leftovers]  # promoted, their copies not dropped yet
        for number in range(self.shared_shards):
            if number in self._shared or (self.dir / _SHARED / str(number) / "segments").exists():
                with self._opening:
                    shard = self._shared_shard(number)
                gone = [ns for ns in leaving if shared_shard_of(ns, self.shared_shards) == number]
                only = (
                    qe.Filter(must_not=[qe.FieldCondition("namespace", match=qe.MatchAny(gone))])
                    if gone
                    else None
                )
                total += int(shard.count(qe.CountRequest(filter=only, exact=True)))
        for namespace in sorted(self._promoted):
            with self._opening:
                shard = self._own_shard(namespace)
            total += int(shard.count(qe.CountRequest(exact=True)))
        return total

    def tiers(self) -> dict[str, int]:
        """How the namespaces' queries are held: namespaces in the shared shards, promoted ones with
        a shard of their own, and the shards (shared, own, and own ones open now)."""
        shared_namespaces = 0
        with self._opening:
            shards = [
                self._shared_shard(number)
                for number in range(self.shared_shards)
                if number in self._shared or (self.dir / _SHARED / str(number) / "segments").exists()
            ]
            promoted = set(self._promoted)
        for shard in shards:
            found = shard.facet(qe.FacetRequest("namespace", limit=1 << 31, exact=True))
            shared_namespaces += sum(1 for hit in found.hits if str(hit.value) not in promoted)
        return {
            "shared_namespaces": shared_namespaces,
            "promoted_namespaces": len(self._promoted),
            "shared_shards": len(shards),
            "own_shards": len(self._promoted),
            "own_shards_open": len(self._own),
            "promote_at": self.promote_at,
        }

    def close(self) -> None:
        self.persist()  # the promoted namespaces' points left in shared shards dropped first
        with self._opening:
            shards = [*self._shared.values(), *self._own.values()]
            self._shared, self._own, self._unflushed = {}, OrderedDict(), {}
        for shard in (*shards, self.insights):
            shard.flush()
            shard.close()


__all__ = [
    "EdgeIndex",
    "edge_identity",
    "edge_layout",
    "namespace_dir_name",
    "shared_shard_of",
    "store_marker",
]
