"""The retrieval index on Qdrant Edge (``qdrant-edge-py``): Qdrant's own engine, in process.

Shards under ``DATA_DIR/qdrant``: ``insights`` (every namespace's insights, with their state), and
under ``namespaces/`` one shard per namespace for its past queries (with the evidence each carries).
Only one process may open a shard, so the process that opens the store is the one projector for it;
the insights shard's write-ahead log holds that lock for the whole store. ``state`` is a keyword, not
a bool: qdrant-edge 0.9.0 never matches a bool payload with ``MatchValue(True)``.

Why a shard per namespace: a sparse search walks the posting lists of the query's dimensions in
batches over the range of point offsets they span. In one shard shared by every namespace, a
namespace's queries are interleaved with all the others', so its searches span the whole shard; in
a shard of its own they span its own queries only. On copies of the growth benchmark's 100k-task
memory (10 tenants) Eq. 2's search took 1.5 against 0.85-1.0 ms, and ``python -m bench.growth``'s
paired retrieve p50 ratio (100k over 10k tasks) went from 1.71x to 1.49x (bench/README, "A shard
per namespace").
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

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
from evomem.core.ports import InsightPoint, QueryHit, QueryPoint, Vector
from evomem.core.retrieval import ServingInsight
from evomem.errors import ConfigError, EvomemError, StoreError, StoreLockedError

#: Below this many points a sparse search scores points one by one instead of walking the inverted
#: index; Qdrant's default (5000) made the top-k of a namespace of a few thousand queries take
#: milliseconds (bench/README.md). Applies to shards created from now on.
SPARSE_FULL_SCAN_THRESHOLD = 500
#: payload, vectors and point ids (evomem/adapters/qdrant/common.py); 3: sparse dimensions per
#: namespace; 4: 64-bit integer point ids; 5: a shard of past queries per namespace
LAYOUT = "5"
_LAYOUT_FILE = "LAYOUT"
_NAMESPACES = "namespaces"  # one directory per namespace, named by its hash, holding its queries' shard
_NAMESPACE_FILE = "NAMESPACE"  # the namespace a directory under namespaces/ belongs to, as written
_EMBEDDER_FILE = "EMBEDDER"  # the embedder (name:dim) whose vectors the store holds
_SIMILARITY_FILE = "SIMILARITY"  # idf or cosine: what the namespaces' shards were built for
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


def edge_layout(directory: Path) -> str | None:
    """The layout an embedded store was written in (None: no store there, or no marker)."""
    marker = directory / _LAYOUT_FILE
    return marker.read_text().strip() if marker.exists() else None


def edge_identity(directory: Path) -> str:
    """The name an embedded store's projector cursor is kept under in Redis."""
    return f"edge:{directory.resolve()}"


class EdgeIndex:
    """A ``VectorIndex`` on two Qdrant Edge shards."""

    def __init__(
        self,
        directory: Path,
        kind: Literal["sparse", "dense"],
        dim: int,
        memory: Literal["pinned", "cached", "cold"] = "pinned",
        idf: bool = True,
        embedder: str | None = None,
    ) -> None:
        self.dir = directory.resolve()
        self.embedder = embedder
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
        # each namespace's queries, opened on first use; written by the projector's thread, read by
        # any (the HTTP service's), so opening one is under a lock
        self._namespaces: dict[str, Any] = {}
        self._opening = threading.Lock()
        self._unflushed: set[str] = set()
        # the namespaces that may hold an active insight which took others' evidence over (a REVISE,
        # a merge): only there does serving look for heirs. This process is the store's one writer,
        # so the set it keeps from its own writes stays a superset of the truth.
        self._with_heirs: set[str] = self._namespaces_with_heirs()

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

    def _built_for(self, similarity: str) -> ConfigError:
        return ConfigError(
            f"the embedded Qdrant store at {self.dir} was built for EVOMEM_SIMILARITY={similarity}; "
            "it is only a read model of Redis: delete that directory and it is rebuilt from "
            "Redis with the similarity configured now"
        )

    def _config(self, queries: bool = False) -> Any:
        """The configuration of the insights shard, or (``queries``) of a namespace's queries. The
        payload stays on disk (Edge's default, mmap); ``memory`` places the vectors' index."""
        # a namespace's shard: one search thread (a search walks its one segment on one thread
        # anyway, and a process holds a shard per namespace), no write-ahead log (``persist``)
        own: dict[str, Any] = {"max_search_threads": 1, "wal_enabled": False} if queries else {}
        if self.kind == "sparse":
            # IDF is applied at search time from the posting lists' lengths: with every namespace's
            # queries in a shard of their own, both the count of queries and a word's document
            # frequency are the namespace's
            sparse = qe.EdgeSparseVectorParams(
                full_scan_threshold=SPARSE_FULL_SCAN_THRESHOLD,
                memory=self.memory,
                modifier=qe.Modifier.Idf if queries and self.idf else None,
            )
            return qe.EdgeConfig(sparse_vectors={VECTOR_NAME: sparse}, payload_memory=qe.Memory.Cold, **own)
        params = qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine, memory=self.memory)
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
        return self.dir / _NAMESPACES / hashlib.sha256(namespace.encode()).hexdigest()[:32]

    def _queries(self, namespace: str, create: bool = False) -> Any | None:
        """The shard of the namespace's past queries, opened on first use; None when it has none
        yet (unless ``create``)."""
        shard = self._namespaces.get(namespace)
        if shard is not None:
            return shard
        path = self._namespace_dir(namespace)
        with self._opening:
            shard = self._namespaces.get(namespace)
            if shard is not None:
                return shard
            marker = path / _NAMESPACE_FILE
            if (path / "segments").exists():
                owner = marker.read_text(encoding="utf-8") if marker.exists() else None
                if owner != namespace:
                    raise StoreError(
                        f"{path} holds the queries of namespace {owner!r}, not of {namespace!r}; the "
                        f"embedded Qdrant store at {self.dir} is only a read model of Redis: delete "
                        "that directory and it is rebuilt from Redis"
                    )
            elif not create:
                return None
            else:
                path.mkdir(parents=True, exist_ok=True)
                marker.write_text(namespace, encoding="utf-8")
            shard = self._open(path, self._config(queries=True), _NAMESPACE_QUERY_INDEXES)
            self._namespaces[namespace] = shard
            return shard

    def _all_queries(self) -> list[Any]:
        """Every namespace's queries' shard, the ones not opened yet opened."""
        for marker in sorted((self.dir / _NAMESPACES).glob(f"*/{_NAMESPACE_FILE}")):
            if (marker.parent / "segments").exists():
                self._queries(marker.read_text(encoding="utf-8"))
        return list(self._namespaces.values())

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
        for namespace, by_point in by_namespace.items():
            shard = self._queries(namespace, create=True)
            self._unflushed.add(namespace)
            self._write(shard, by_point, query_payload)

    def persist(self) -> None:
        """Make every write so far durable. A namespace's shard keeps no write-ahead log (one of
        64 MB on disk per namespace otherwise): what was written to it since its last flush is lost
        if the process dies, so the projector saves its cursor past the changes only after this
        (``Projector.checkpoint``), and projects them again otherwise. A flush took 2-5 ms a
        namespace (bench/README, "A shard per namespace")."""
        with self._opening:
            names, self._unflushed = self._unflushed, set()
        for namespace in names:
            self._namespaces[namespace].flush()

    def write_insights(self, points: Sequence[tuple[InsightPoint, Vector | None]]) -> None:
        pairs = latest(points)
        ids = {int_point_id(p.id): (p, v) for p, v in pairs}
        self._with_heirs.update(p.namespace for p, _ in pairs if p.inherits and p.state == "active")
        self._write(self.insights, ids, insight_payload)

    def _write(self, shard: Any, by_point: dict[int, tuple[Any, Vector | None]], payload: Any) -> None:
        """Upsert the points the shard does not hold, set the payload of those it holds at an older
        version, and leave alone those it holds at this version or a newer one."""
        if not by_point:
            return
        fields = ["id", "namespace", "version"]
        held = {r.id: r.payload for r in shard.retrieve(list(by_point), fields, False)}
        new = []
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
            elif vec is None:
                raise ValueError(f"{p.id!r} is not in the index yet and came without a vector")
            else:
                new.append(qe.Point(pid, self._vector(namespaced(vec, p.namespace)), payload(p)))
        if new:
            shard.update(qe.UpdateOperation.upsert_points(new))

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
        queries = self._queries(namespace)
        if not ids or queries is None:
            return []
        evidence = [
            qe.FieldCondition("supports", match=qe.MatchAny(ids)),
            qe.FieldCondition("harms", match=qe.MatchAny(ids)),
        ]
        skip = [qe.HasIdCondition({int_query_point_id(namespace, q) for q in exclude})] if exclude else None
        # the hits with their payload and vectors in one search, not Eq. 2's ids and then a read of
        # the k kept (cheaper with k + 1 hits; with first_limit's 2k + 8, within ±4% of each other:
        # bench/README, "A wider first search for ties"). Found by ``about`` too (the task's words):
        # the walk over the namespace's posting lists is then that of a dozen words, not of every
        # character n-gram, and the hits are weighed by their cosine with the whole task all the same
        fields = ["id", "supports", "harms"]
        exact = self.idf or about is not None
        hits = top_k_deterministic(
            lambda limit: self._nearest(
                queries, by_text, [], limit, fields, evidence, skip, with_vector=exact
            ),
            k,
            lambda h: float(h.score),
            lambda h: h.payload["id"],
        )
        return [self._hit(h, probe, exact) for h in hits if h.score > 0]

    @staticmethod
    def _hit(point: Any, probe: Vector, exact: bool) -> QueryHit:
        """A query hit with its cosine with ``probe``, computed from its stored vector when the
        engine ranked by another product (``exact``: under IDF, or found by another vector)."""
        if not exact:
            return hit_from_payload(point.payload, float(point.score))
        stored = point.vector[VECTOR_NAME]
        assert isinstance(probe, dict)
        return hit_from_payload(point.payload, sparse_dot(probe, stored.indices, stored.values))

    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[QueryHit]:
        # ids and scores of a few more than k (past queries of templated tasks often score exactly
        # alike: the cut must see every tie), then the evidence of the k kept, by id: the evidence
        # arrays are read for k queries only, and one search suffices unless the tie runs longer.
        # The namespace's own shard: no filter
        queries = self._queries(namespace)
        if queries is None:
            return []
        probe = namespaced(vector, namespace)
        hits = top_k_deterministic(
            lambda limit: self._nearest(queries, probe, [], limit, ["id"]),
            k,
            lambda h: float(h.score),
            lambda h: h.payload["id"],
        )
        kept = [(h.payload["id"], float(h.score)) for h in hits if h.score > 0]
        records = self._read_queries(namespace, [q for q, _ in kept], with_vector=self.idf)
        out = []
        for q, score in kept:
            if (found := records.get(q)) is None:
                continue
            payload, stored = found
            if stored is not None:  # ranked by the IDF-weighted product; weighed by the cosine
                assert isinstance(probe, dict)
                score = sparse_dot(probe, stored.indices, stored.values)
            out.append(hit_from_payload(payload, score))
        return out

    def query_evidence(self, namespace: str, ids: Collection[str]) -> dict[str, QueryHit]:
        found = self._read_queries(namespace, ids)
        return {q: hit_from_payload(payload) for q, (payload, _) in found.items()}

    def _read_queries(
        self, namespace: str, ids: Collection[str], with_vector: bool = False
    ) -> dict[str, tuple[dict[str, Any], Any]]:
        """{query id: (its payload, its stored vector or None)} for the ids of the namespace."""
        queries = self._queries(namespace)
        if not ids or queries is None:
            return {}
        pids = [int_query_point_id(namespace, q) for q in ids]
        records = queries.retrieve(pids, ["id", "namespace", "supports", "harms"], with_vector)
        out = {}
        for r in records:
            payload = r.payload
            if payload["namespace"] == namespace:
                out[payload["id"]] = (payload, r.vector[VECTOR_NAME] if with_vector else None)
        return out

    def serving_ids(
        self, namespace: str, ids: Collection[str]
    ) -> tuple[set[str], dict[str, tuple[str, ...]]]:
        if not ids:
            return set(), {}
        by_point = {int_point_id(i): i for i in ids}
        active = [self._match("namespace", namespace), self._match("state", "active")]
        # the point ids alone: the filter is answered from the payload indexes, and no payload is
        # read (at a million insights, reading the text of every candidate was most of a retrieval).
        # Two reads, not one with ``should`` (id ∨ inherits): the engine evaluates that disjunction
        # point by point, and for a few dozen ids it took about twice the time of the two
        named, _ = self.insights.scroll(
            qe.ScrollRequest(
                limit=len(by_point) + 1,
                filter=qe.Filter(must=[*active, qe.HasIdCondition(set(by_point))]),
                with_payload=False,
            )
        )
        found = {by_point[r.id] for r in named if r.id in by_point}
        if namespace not in self._with_heirs:
            return found, {}
        heirs, _ = self.insights.scroll(
            qe.ScrollRequest(
                limit=len(by_point) + 1,
                filter=qe.Filter(must=[*active, qe.FieldCondition("inherits", match=qe.MatchAny(list(ids)))]),
                with_payload=["id", "inherits"],
            )
        )
        return found, {r.payload["id"]: tuple(r.payload.get("inherits") or ()) for r in heirs}

    def read_insights(self, namespace: str, ids: Collection[str]) -> dict[str, ServingInsight]:
        if not ids:
            return {}
        records = self.insights.retrieve(
            [int_point_id(i) for i in ids], ["id", "namespace", "text", "version", "inherits"], False
        )
        return {
            r.payload["id"]: serving_from_payload(r.payload)
            for r in records
            if r.payload["namespace"] == namespace
        }

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        conditions = [self._match("namespace", namespace), self._match("state", "active")]
        hits = self._nearest(self.insights, namespaced(vector, namespace), conditions, k, ["id"])
        return [(node_id_of(h), float(h.score)) for h in hits if h.score > 0]

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
        shards = [self.insights] if kind == "insight" else self._all_queries()
        return sum(int(shard.count(qe.CountRequest(exact=True))) for shard in shards)

    def close(self) -> None:
        for shard in (*self._namespaces.values(), self.insights):
            shard.flush()
            shard.close()


__all__ = ["EdgeIndex", "edge_identity", "edge_layout"]
