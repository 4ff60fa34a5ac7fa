"""The retrieval index on a Qdrant server (or qdrant-client's ``:memory:`` mode) through qdrant-client.

Used when ``EVOMEM_QDRANT_URL`` is set. Unlike the embedded engine, a server can be written by
several retrieval workers at once, each running a projector, so every write is guarded on the
server itself: a stored insight is only changed by a write carrying a higher version. Vendor errors
are translated here, at the boundary (``evomem.errors``), and never carry the API key.

Tiered tenancy (``EVOMEM_QDRANT_SHARD_KEYS``, off by default): the past queries' collection is made
with custom sharding; small namespaces share the shard key ``shared`` (partitioned by the tenant
index, filtered on it in every search), and a namespace that passes ``EVOMEM_INDEX_PROMOTE_AT``
past queries is moved to a shard key of its own, named by a hash of its name (``own_shard_key``):
its points copied (scroll, then upsert guarded by version), then the switch recorded in the
collection's metadata (one key per promoted namespace: the server merges metadata keys, so two
processes promoting two namespaces at once do not undo each other), then, once every process has
read the switch, its points deleted from the shared key (until then, written to both keys, so a
process that still reads the shared one is served as current). The switch lives in Qdrant, not in Redis,
because it describes where Qdrant holds the points: a reader that follows it always finds them,
whatever happened to Redis (flushed, failed over, another memory's). Every process reads the
metadata again every ``routing_s`` (``EVOMEM_TENANCY_CACHE_S``); the deletion waits
``ROUTING_GRACE`` times that. There is no demotion: past queries are never deleted, so a promoted
namespace never shrinks back. Insights stay in one collection, auto-sharded, as on the embedded
store (they are few beside the queries).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from evomem import keys
from evomem.adapters.qdrant.common import (
    INSIGHT_INDEXES,
    QUERY_INDEXES,
    VECTOR_NAME,
    hit_from_payload,
    insight_payload,
    latest,
    named_with_heirs,
    namespaced,
    node_id_of,
    point_id,
    query_payload,
    query_point_id,
    serving_from_payload,
    sparse_dot,
    top_k_deterministic,
)
from evomem.core.ports import InsightPoint, QueryHit, QueryPoint, Vector
from evomem.core.retrieval import ServingInsight
from evomem.errors import ConfigError, EvomemError, TransientError
from evomem.settings import Settings

WRITE_BATCH = 256
"""Points per request: keeps a projector batch of sparse vectors well under the server's body limit."""

_LOCAL_INDEX_WARNING = "Payload indexes have no effect in the local Qdrant"
_SCHEMAS: dict[str, Any] = {
    "tenant": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.PayloadSchemaType.INTEGER,
}
_QUERY_INDEXES: dict[str, Any] = {field: _SCHEMAS[kind] for field, kind in QUERY_INDEXES}
_INSIGHT_INDEXES: dict[str, Any] = {field: _SCHEMAS[kind] for field, kind in INSIGHT_INDEXES}

SHARED_KEY = "shared"
"""The shard key of the small namespaces' past queries (``EVOMEM_QDRANT_SHARD_KEYS``)."""
OWN_PREFIX = "ns-"
_MARKER_PREFIX = "evomem_own:"  # a metadata key of the queries' collection: a promoted namespace
ROUTING_GRACE = 5
"""A promoted namespace's points leave the shared key this many routing periods after the switch:
by then every process has read it and searches its own key."""


def own_shard_key(namespace: str) -> str:
    """The shard key of a promoted namespace: a hash of its name, so any name (long, unicode,
    path-like, with ``:`` or braces) maps to a short ASCII key."""
    return OWN_PREFIX + hashlib.blake2b(namespace.encode(), digest_size=16).hexdigest()


def _sparse_params(idf: bool) -> models.SparseVectorParams:
    # NONE, not None: in an update, None means "leave as it is"
    return models.SparseVectorParams(modifier=models.Modifier.IDF if idf else models.Modifier.NONE)


def _where(url: str) -> str:
    """The URL without credentials or query, safe to show in messages and to name the store by."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")).removeprefix("//")


def _older_than(version: int) -> models.FieldCondition:
    return models.FieldCondition(key="version", range=models.Range(lt=version))


def _on(key: str | None) -> dict[str, Any]:
    """The ``shard_key_selector`` argument of a read, if there is a shard key to name."""
    return {} if key is None else {"shard_key_selector": key}


def collection_vectors(client: QdrantClient) -> tuple[Literal["sparse", "dense"], int] | None:
    """The vectors this client's query collection was made for: sparse (dimension 0), or dense of
    that dimension; None where there is no such collection (or it holds neither)."""
    if not client.collection_exists(keys.QUERY_COLLECTION):
        return None
    params = client.get_collection(keys.QUERY_COLLECTION).config.params
    if VECTOR_NAME in (params.sparse_vectors or {}):
        return "sparse", 0
    dense = params.vectors if isinstance(params.vectors, dict) else {}
    return ("dense", dense[VECTOR_NAME].size) if VECTOR_NAME in dense else None


def held_vectors(settings: Settings) -> tuple[Literal["sparse", "dense"], int] | None:
    """The vectors the server's query collection was made for (``collection_vectors``), for
    ``EMBEDDER=auto`` to follow the embedder that built it; None where there is no such collection
    yet, or the server cannot be read now (opening the index then says why)."""
    url = settings.qdrant_url
    if not url or url == ":memory:":
        return None
    secret = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    try:
        client = QdrantClient(url=url, api_key=secret, check_compatibility=False, timeout=10)
    except ValueError:
        return None
    try:
        return collection_vectors(client)
    except (UnexpectedResponse, ResponseHandlingException, httpx.HTTPError, OSError):
        return None
    finally:
        client.close()


class ClientIndex:
    """A ``VectorIndex`` on two collections of a Qdrant server, reached through qdrant-client."""

    #: with shard keys, how the namespaces are held (``evomem stats``, ``/metrics``); None without
    tiers: Callable[[], dict[str, int]] | None

    def __init__(
        self,
        client: QdrantClient,
        kind: Literal["sparse", "dense"],
        dim: int,
        *,
        identity: str,
        where: str,
        local: bool = False,
        secret: str | None = None,
        idf: bool = True,
        shard_keys: bool = False,
        promote_at: int = 1000,
        routing_s: float = 2.0,
    ) -> None:
        if promote_at < 1 or routing_s < 0:
            raise ValueError("promote_at is at least 1, routing_s at least 0")
        self.client = client
        self.kind = kind
        self.idf = idf and kind == "sparse"
        self.dim = dim
        self.identity = identity
        self._where = where
        self._local = local
        self._secret = secret
        self.shard_keys = shard_keys
        self.promote_at = promote_at
        self.routing_s = routing_s
        self.promotions = 0  # namespaces promoted by this process
        self.tiers = self._tiers if shard_keys else None
        self._routing = threading.Lock()
        self._own: dict[str, str] = {}  # promoted namespace -> its shard key, as last read
        self._read_at = float("-inf")
        self._leftovers: dict[str, float] = {}  # promoted namespace -> when its shared copy may go
        with self._boundary("opening the collections"):
            created = [
                self._ensure(keys.QUERY_COLLECTION, _QUERY_INDEXES, self.idf, sharded=shard_keys),
                self._ensure(keys.INSIGHT_COLLECTION, _INSIGHT_INDEXES),
            ]
            if shard_keys:
                self._create_shard_key(SHARED_KEY)
                self._refresh(force=True)
        self.fresh = any(created)

    @classmethod
    def connect(cls, settings: Settings, kind: Literal["sparse", "dense"], dim: int) -> ClientIndex:
        """Open the server at ``settings.qdrant_url``; ``":memory:"`` gives a throwaway local store."""
        url = settings.qdrant_url
        if not url:
            raise ConfigError("EVOMEM_QDRANT_URL is not set")
        if url == ":memory:":
            return cls(
                QdrantClient(location=":memory:"),
                kind,
                dim,
                local=True,
                where=":memory:",
                identity=f"qdrant-memory:{uuid.uuid4().hex}",
                idf=settings.similarity == "idf",
                **cls._tiering(settings),
            )
        secret = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        where = _where(url)
        try:  # the version check runs in a thread and can only warn; the first request below checks for real
            client = QdrantClient(url=url, api_key=secret, check_compatibility=False)
        except ValueError as exc:
            raise ConfigError(
                f"EVOMEM_QDRANT_URL {where!r} is not a usable Qdrant URL: {str(exc).replace(url, where)}"
            ) from None
        return cls(
            client,
            kind,
            dim,
            identity=f"qdrant:{where}",
            where=where,
            secret=secret,
            idf=settings.similarity == "idf",
            **cls._tiering(settings),
        )

    @staticmethod
    def _tiering(settings: Settings) -> dict[str, Any]:
        return {
            "shard_keys": settings.qdrant_shard_keys,
            "promote_at": settings.index_promote_at,
            "routing_s": settings.tenancy_cache_s,
        }

    # -- setup -----------------------------------------------------------------------------------
    def _ensure(
        self, name: str, indexes: Mapping[str, Any], idf: bool = False, *, sharded: bool = False
    ) -> bool:
        """Create the collection if it is missing, check its vectors, add missing payload indexes.

        Indexes come before the first write (strict mode rejects filters on unindexed fields, and
        segments are built with them). Returns whether this call created the collection.
        """
        created = False
        if not self.client.collection_exists(name):
            sharding = models.ShardingMethod.CUSTOM if sharded else None
            try:
                if self.kind == "sparse":
                    self.client.create_collection(
                        name,
                        sparse_vectors_config={VECTOR_NAME: _sparse_params(idf)},
                        sharding_method=sharding,
                    )
                else:
                    self.client.create_collection(
                        name,
                        vectors_config={
                            VECTOR_NAME: models.VectorParams(size=self.dim, distance=models.Distance.COSINE)
                        },
                        sharding_method=sharding,
                    )
                created = True
            except UnexpectedResponse as exc:  # another worker created it first
                if exc.status_code != 409 and b"already exists" not in exc.content:
                    raise
        info = self.client.get_collection(name)
        self._check_vectors(name, info)
        if not created and name == keys.QUERY_COLLECTION:
            self._check_sharding(name, info, sharded)
        if self.kind == "sparse":
            held = (info.config.params.sparse_vectors or {}).get(VECTOR_NAME)
            if held is not None and (held.modifier == models.Modifier.IDF) != idf:
                # IDF is applied at search time, so the collection changes over in place
                self.client.update_collection(name, sparse_vectors_config={VECTOR_NAME: _sparse_params(idf)})
        for field, schema in indexes.items():
            if field not in (info.payload_schema or {}):
                self._create_index(name, field, schema)
        return created

    def _check_vectors(self, name: str, info: models.CollectionInfo) -> None:
        params = info.config.params
        if self.kind == "sparse":
            ok = VECTOR_NAME in (params.sparse_vectors or {})
        else:
            dense = params.vectors if isinstance(params.vectors, dict) else {}
            ok = VECTOR_NAME in dense and dense[VECTOR_NAME].size == self.dim
        if not ok:
            raise ConfigError(
                f"collection {name!r} at {self._where} was made for other vectors than the "
                f"configured embedder's ({self.kind}, dim {self.dim}); "
                "use another Qdrant or drop the collection"
            )

    def _check_sharding(self, name: str, info: models.CollectionInfo, sharded: bool) -> None:
        """A collection's sharding method is fixed when it is made: one made without custom sharding
        cannot take shard keys, and one made with it refuses writes that name none."""
        held = info.config.params.sharding_method == models.ShardingMethod.CUSTOM
        if held and not sharded:
            raise ConfigError(
                f"collection {name!r} at {self._where} was made with custom sharding "
                "(EVOMEM_QDRANT_SHARD_KEYS); set it again, or use another Qdrant"
            )
        if sharded and not held and not self._local:
            raise ConfigError(
                f"collection {name!r} at {self._where} was made without custom sharding, which "
                "EVOMEM_QDRANT_SHARD_KEYS needs; unset it, or drop the collection and let it be made again"
            )

    def _create_shard_key(self, key: str) -> None:
        """Create a shard key of the queries' collection; one another process made first is fine."""
        try:
            self.client.create_shard_key(keys.QUERY_COLLECTION, key)
        except NotImplementedError:  # qdrant-client's local mode: it has no shards
            raise ConfigError(
                "EVOMEM_QDRANT_SHARD_KEYS needs a Qdrant server: qdrant-client's local mode has no shard keys"
            ) from None
        except UnexpectedResponse as exc:
            if exc.status_code != 409 and b"already exists" not in exc.content:
                raise

    def _create_index(self, name: str, field: str, schema: Any) -> None:
        if not self._local:
            self.client.create_payload_index(name, field, field_schema=schema, wait=True)
            return
        with warnings.catch_warnings():  # local mode has no payload indexes and says so; it is a stand-in
            warnings.filterwarnings("ignore", message=_LOCAL_INDEX_WARNING, category=UserWarning)
            self.client.create_payload_index(name, field, field_schema=schema, wait=True)

    # -- the error boundary ----------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    @contextlib.contextmanager
    def _boundary(self, action: str) -> Iterator[None]:
        """Translate qdrant-client and httpx errors into evomem's; ``from None`` keeps headers out."""
        try:
            yield
        except (ResponseHandlingException, httpx.TransportError, ResourceExhaustedResponse) as exc:
            source = getattr(exc, "source", exc)
            detail = self._redact(f"{type(source).__name__}: {source}")
            raise TransientError(
                f"Qdrant at {self._where} did not answer while {action} ({detail})"
            ) from None
        except UnexpectedResponse as exc:
            code = exc.status_code or 0
            body = self._redact(exc.content[:300].decode(errors="replace"))
            if code == 429 or code >= 500:
                raise TransientError(
                    f"Qdrant at {self._where} is unavailable ({code}) while {action}"
                ) from None
            if code in (401, 403):
                raise ConfigError(
                    f"Qdrant at {self._where} refused the credentials ({code}); check EVOMEM_QDRANT_API_KEY"
                ) from None
            raise EvomemError(f"Qdrant at {self._where} rejected {action} ({code}): {body}") from None

    # -- tiers (EVOMEM_QDRANT_SHARD_KEYS) ----------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        """Read the promoted namespaces from the queries' collection's metadata, at most every
        ``routing_s``; a namespace seen promoted for the first time has its shared copy scheduled
        for deletion (``_drop_leftovers``)."""
        now = time.monotonic()
        if not force and now - self._read_at < self.routing_s:
            return
        with self._routing:
            if not force and now - self._read_at < self.routing_s:
                return
            with self._boundary("reading the shard keys"):
                info = self.client.get_collection(keys.QUERY_COLLECTION)
            held = info.config.metadata or {}
            wall = time.time()
            for marker, value in held.items():
                if not marker.startswith(_MARKER_PREFIX) or not isinstance(value, Mapping):
                    continue
                namespace = str(value.get("namespace"))
                if namespace in self._own:
                    continue
                self._own[namespace] = own_shard_key(namespace)
                # after the promoting process's grace and after this one's own routing period
                wait = max(float(value.get("at", wall)) - wall + self._grace(), self.routing_s)
                self._leftovers.setdefault(namespace, now + wait)
            self._read_at = now

    def _grace(self) -> float:
        return ROUTING_GRACE * self.routing_s

    def _key_of(self, namespace: str) -> str | None:
        """The shard key a namespace's past queries are read from and written to (None: no shard keys)."""
        if not self.shard_keys:
            return None
        self._refresh()
        return self._own.get(namespace, SHARED_KEY)

    def _maybe_promote(self, namespaces: Collection[str]) -> None:
        """Promote those of ``namespaces`` (given new points under the shared key) that hold
        ``promote_at`` past queries there: one facet request for them all, however many a batch touched."""
        if not namespaces:
            return
        touched = sorted(namespaces)
        only = models.Filter(
            must=[models.FieldCondition(key="namespace", match=models.MatchAny(any=touched))]
        )
        with self._boundary("counting"):
            found = self.client.facet(
                keys.QUERY_COLLECTION,
                "namespace",
                facet_filter=only,
                limit=len(touched),
                exact=True,
                shard_key_selector=SHARED_KEY,
            )
        for hit in sorted(found.hits, key=lambda h: str(h.value)):
            if int(hit.count) >= self.promote_at and str(hit.value) not in self._own:
                self._promote(str(hit.value))

    def _promote(self, namespace: str) -> None:
        """Move a namespace's past queries from the shared shard key to one of its own, online:
        its points copied, then the switch recorded (a metadata key of the collection), then, after
        ``ROUTING_GRACE`` routing periods, its points deleted from the shared key. A process stopped
        before the switch leaves a shard key that the next promotion fills again (every copy is
        guarded by version); one stopped after it, a shared copy that any process drops."""
        key = own_shard_key(namespace)
        with self._boundary("promoting a namespace"):
            self._create_shard_key(key)
            self._copy(namespace, key)
            marker = {_MARKER_PREFIX + key: {"namespace": namespace, "at": time.time()}}
            self.client.update_collection(keys.QUERY_COLLECTION, metadata=marker)
        with self._routing:
            self._own[namespace] = key
            self._leftovers[namespace] = time.monotonic() + self._grace()
        self.promotions += 1

    def _copy(self, namespace: str, key: str) -> None:
        """Upsert a namespace's points of the shared key into ``key``, each only over an older one."""
        only = models.Filter(must=[self._match("namespace", namespace)])
        offset: Any = None
        while True:
            records, offset = self.client.scroll(
                keys.QUERY_COLLECTION,
                scroll_filter=only,
                limit=WRITE_BATCH,
                offset=offset,
                with_payload=True,
                with_vectors=True,
                shard_key_selector=SHARED_KEY,
            )
            by_version: dict[int, list[models.PointStruct]] = {}
            for r in records:
                payload = r.payload or {}
                vector = r.vector if isinstance(r.vector, dict) else {}
                point = models.PointStruct(id=r.id, vector=vector, payload=payload)
                by_version.setdefault(int(payload["version"]), []).append(point)
            ops = [
                models.UpsertOperation(
                    upsert=models.PointsList(
                        points=pts, update_filter=models.Filter(must=[_older_than(v)]), shard_key=key
                    )
                )
                for v, pts in sorted(by_version.items())
            ]
            if ops:
                self.client.batch_update_points(keys.QUERY_COLLECTION, ops, wait=True)
            if offset is None:
                return

    def _drop_leftovers(self, now: float | None = None) -> None:
        """Delete from the shared key the points of namespaces promoted long enough ago that every
        process reads their own key: copied over once more first (version-guarded), so a write a
        process made to the shared key before it read the switch is kept."""
        if not self._leftovers:
            return
        now = time.monotonic() if now is None else now
        with self._routing:
            due = sorted(ns for ns, at in self._leftovers.items() if at <= now)
        for namespace in due:
            with self._boundary("dropping a promoted namespace's shared copy"):
                self._copy(namespace, own_shard_key(namespace))
                self.client.delete(
                    keys.QUERY_COLLECTION,
                    models.FilterSelector(
                        filter=models.Filter(must=[self._match("namespace", namespace)]),
                        shard_key=SHARED_KEY,
                    ),
                    wait=True,
                )
            with self._routing:
                self._leftovers.pop(namespace, None)

    def _tiers(self) -> dict[str, int]:
        """How the namespaces' past queries are held: namespaces under the shared shard key, those
        promoted to one of their own. The keys of ``EdgeIndex.tiers``; ``tiers`` with shard keys."""
        self._refresh(force=True)
        promoted = set(self._own)
        with self._boundary("counting"):
            found = self.client.facet(
                keys.QUERY_COLLECTION, "namespace", limit=1 << 31, exact=True, shard_key_selector=SHARED_KEY
            )
        shared = sum(1 for hit in found.hits if str(hit.value) not in promoted)
        return {
            "shared_namespaces": shared,
            "promoted_namespaces": len(promoted),
            "shared_shards": 1,
            "own_shards": len(promoted),
            "own_shards_open": len(promoted),
            "promote_at": self.promote_at,
        }

    # -- writes (the projector's) ----------------------------------------------------------------
    def _vector(self, vec: Vector) -> models.SparseVector | list[float]:
        if self.kind == "sparse":
            if not isinstance(vec, Mapping):
                raise TypeError("this index holds sparse vectors: pass {index: value}")
            items = sorted(vec.items())
            return models.SparseVector(
                indices=[int(i) for i, _ in items], values=[float(v) for _, v in items]
            )
        if isinstance(vec, Mapping):
            raise TypeError("this index holds dense vectors: pass a list of floats")
        return [float(x) for x in vec]

    def _point(self, pid: str, vec: Vector, payload: dict[str, Any]) -> models.PointStruct:
        return models.PointStruct(id=pid, vector={VECTOR_NAME: self._vector(vec)}, payload=payload)

    def write_queries(self, points: Sequence[tuple[QueryPoint, Vector | None]]) -> None:
        if not self.shard_keys:
            by_point = {query_point_id(p.namespace, p.id): (p, v) for p, v in latest(points)}
            self._write(keys.QUERY_COLLECTION, by_point, query_payload)
            return
        self._refresh()  # once a batch, not once a point
        self._drop_leftovers()
        by_key: dict[str, dict[str, tuple[QueryPoint, Vector | None]]] = {}
        for p, v in latest(points):
            key = self._own.get(p.namespace, SHARED_KEY)
            pid = query_point_id(p.namespace, p.id)
            by_key.setdefault(key, {})[pid] = (p, v)
            if key != SHARED_KEY and p.namespace in self._leftovers:
                # its shared copy is still read by processes that have not read the switch: kept current
                by_key.setdefault(SHARED_KEY, {})[pid] = (p, v)
        grown: set[str] = set()
        for key, by_point in sorted(by_key.items()):
            new = self._write(keys.QUERY_COLLECTION, by_point, query_payload, key, lenient=key == SHARED_KEY)
            if key == SHARED_KEY:
                grown.update(ns for pid in new if (ns := by_point[pid][0].namespace) not in self._own)
        self._maybe_promote(grown)

    def write_insights(self, points: Sequence[tuple[InsightPoint, Vector | None]]) -> None:
        by_point = {point_id(p.id): (p, v) for p, v in latest(points)}
        self._write(keys.INSIGHT_COLLECTION, by_point, insight_payload)

    def _write(
        self,
        collection: str,
        by_point: dict[str, tuple[Any, Vector | None]],
        payload: Any,
        key: str | None = None,
        lenient: bool = False,
    ) -> list[str]:
        """Upsert unseen points with their vectors and set the payload of stored ones, under shard
        key ``key`` if one is given; returns the ids of the points upserted (unseen). ``lenient``:
        an unseen point without a vector is left out (a promoted namespace's shared copy, kept
        current while it is read, need not hold a point it never held).

        The stored versions read first decide which is which; each write is also guarded on the
        server (``version < new``), so a projector racing this one never gets overwritten by an older
        version either.
        """
        if not by_point:
            return []
        with self._boundary("reading versions"):
            records = self.client.retrieve(
                collection, list(by_point), with_payload=["version"], with_vectors=False, **_on(key)
            )
        stored = {str(r.id): int((r.payload or {})["version"]) for r in records}
        ops: list[models.UpsertOperation | models.SetPayloadOperation] = []
        unseen: dict[int, list[models.PointStruct]] = {}
        for pid, (p, vec) in by_point.items():
            if pid not in stored:
                if vec is None and lenient and p.namespace in self._own:
                    continue
                if vec is None:
                    raise ValueError(f"{p.id!r} is not in the index yet and came without a vector")
                unseen.setdefault(p.version, []).append(
                    self._point(pid, namespaced(vec, p.namespace), payload(p))
                )
            elif stored[pid] < p.version:
                guard = models.Filter(must=[models.HasIdCondition(has_id=[pid]), _older_than(p.version)])
                ops.append(
                    models.SetPayloadOperation(
                        set_payload=models.SetPayload(payload=payload(p), filter=guard, shard_key=key)
                    )
                )
        for version, pts in unseen.items():
            ops.extend(
                models.UpsertOperation(
                    upsert=models.PointsList(
                        points=pts[i : i + WRITE_BATCH],
                        update_filter=models.Filter(must=[_older_than(version)]),
                        shard_key=key,
                    )
                )
                for i in range(0, len(pts), WRITE_BATCH)
            )
        for start in range(0, len(ops), WRITE_BATCH):
            with self._boundary("writing points"):
                self.client.batch_update_points(collection, ops[start : start + WRITE_BATCH], wait=True)
        return [str(pt.id) for pts in unseen.values() for pt in pts]

    # -- reads -----------------------------------------------------------------------------------
    def _nearest(
        self,
        collection: str,
        vector: Vector,
        must: list[models.FieldCondition],
        k: int,
        fields: list[str],
        with_vectors: bool = False,
        should: list[models.FieldCondition] | None = None,
        must_not: list[models.HasIdCondition] | None = None,
        key: str | None = None,
    ) -> list[models.ScoredPoint]:
        if not vector or k <= 0:
            return []
        with self._boundary("searching"):
            hits = self.client.query_points(
                collection,
                query=self._vector(vector),
                using=VECTOR_NAME,
                query_filter=models.Filter(must=list(must), should=should, must_not=must_not),
                limit=k,
                with_payload=fields,
                with_vectors=with_vectors,
                **_on(key),
            ).points
        return [h for h in hits if h.score > 0]

    @staticmethod
    def _match(field: str, value: str) -> models.FieldCondition:
        return models.FieldCondition(key=field, match=models.MatchValue(value=value))

    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[QueryHit]:
        return self._search_queries(vector, namespace, k)

    def search_evidence(
        self,
        vector: Vector,
        namespace: str,
        insights: int,
        k: int,
        exclude: Collection[str] = (),
        about: Vector | None = None,
    ) -> list[QueryHit]:
        conditions = [self._match("namespace", namespace), self._match("state", "active")]
        by_text = namespaced(vector if about is None else about, namespace)
        nearest = top_k_deterministic(  # ties cut by id, as every replica cuts them
            lambda limit: self._nearest(
                keys.INSIGHT_COLLECTION, by_text, conditions, limit, ["id", "inherits"]
            ),
            insights,
            lambda h: float(h.score),
            lambda h: str((h.payload or {}).get("id", "")),
        )
        ids = named_with_heirs([h.payload or {} for h in nearest])
        if not ids:
            return []
        evidence = [
            models.FieldCondition(key="supports", match=models.MatchAny(any=ids)),
            models.FieldCondition(key="harms", match=models.MatchAny(any=ids)),
        ]
        skip = (
            [models.HasIdCondition(has_id=[query_point_id(namespace, q) for q in exclude])]
            if exclude
            else None
        )
        # found by ``about`` (the task's words: a walk over a dozen posting lists, not every character
        # n-gram's), weighed by the cosine with the whole task
        return self._search_queries(vector, namespace, k, evidence, skip, rank_by=about)

    def _search_queries(
        self,
        vector: Vector,
        namespace: str,
        k: int,
        should: list[models.FieldCondition] | None = None,
        must_not: list[models.HasIdCondition] | None = None,
        rank_by: Vector | None = None,
    ) -> list[QueryHit]:
        """The top-k by ``rank_by`` (default ``vector``), each scored by its cosine with ``vector``."""
        conditions = [self._match("namespace", namespace)]
        probe = namespaced(vector, namespace)
        by = probe if rank_by is None else namespaced(rank_by, namespace)
        exact = self.idf or rank_by is not None
        key = self._key_of(namespace)
        hits = top_k_deterministic(
            lambda limit: self._nearest(
                keys.QUERY_COLLECTION,
                by,
                conditions,
                limit,
                ["id", "supports", "harms"],
                exact,
                should,
                must_not,
                key,
            ),
            k,
            lambda h: float(h.score),
            lambda h: str((h.payload or {}).get("id", "")),
        )
        if not exact:
            return [hit_from_payload(h.payload or {}, float(h.score)) for h in hits]
        assert isinstance(probe, dict)
        out = []
        for h in hits:  # ranked by another product (IDF-weighted, or by rank_by); weighed by the cosine
            stored = h.vector[VECTOR_NAME] if isinstance(h.vector, dict) else None
            assert isinstance(stored, models.SparseVector)
            out.append(hit_from_payload(h.payload or {}, sparse_dot(probe, stored.indices, stored.values)))
        return out

    def query_evidence(self, namespace: str, ids: Collection[str]) -> dict[str, QueryHit]:
        if not ids:
            return {}
        with self._boundary("reading queries"):
            records = self.client.retrieve(
                keys.QUERY_COLLECTION,
                [query_point_id(namespace, q) for q in ids],
                with_payload=["id", "namespace", "supports", "harms"],
                with_vectors=False,
                **_on(self._key_of(namespace)),
            )
        payloads = [r.payload or {} for r in records]
        return {p["id"]: hit_from_payload(p) for p in payloads if p.get("namespace") == namespace}

    def serving_ids(
        self, namespace: str, ids: Collection[str]
    ) -> tuple[set[str], dict[str, tuple[str, ...]]]:
        if not ids:
            return set(), {}
        wanted = sorted(ids)
        named = set(wanted)
        by_point = {point_id(i): i for i in wanted}
        flt = models.Filter(
            must=[self._match("namespace", namespace), self._match("state", "active")],
            should=[
                models.HasIdCondition(has_id=list(by_point)),
                models.FieldCondition(key="inherits", match=models.MatchAny(any=wanted)),
            ],
        )
        with self._boundary("reading insights"):
            records, _ = self.client.scroll(
                keys.INSIGHT_COLLECTION,
                scroll_filter=flt,
                limit=2 * len(wanted) + 16,
                with_payload=["id", "inherits"],  # not the text: only the few served need it
                with_vectors=False,
            )
        active: set[str] = set()
        heirs: dict[str, tuple[str, ...]] = {}
        for r in records:
            p = r.payload or {}
            inherits = tuple(p.get("inherits") or ())
            if str(r.id) in by_point:
                active.add(p["id"])
            if not named.isdisjoint(inherits):
                heirs[p["id"]] = inherits
        return active, heirs

    def read_insights(self, namespace: str, ids: Collection[str]) -> dict[str, ServingInsight]:
        if not ids:
            return {}
        with self._boundary("reading insights"):
            records = self.client.retrieve(
                keys.INSIGHT_COLLECTION,
                [point_id(i) for i in ids],
                with_payload=["id", "namespace", "text", "version", "inherits"],
                with_vectors=False,
            )
        payloads = [r.payload or {} for r in records]
        return {p["id"]: serving_from_payload(p) for p in payloads if p.get("namespace") == namespace}

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        hits = self._nearest(
            keys.INSIGHT_COLLECTION,
            namespaced(vector, namespace),
            [self._match("namespace", namespace), self._match("state", "active")],
            k,
            ["id"],
        )
        return [(node_id_of(h), float(h.score)) for h in hits]

    def scan_insights(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        offset: Any = None
        active = models.Filter(must=[self._match("state", "active")])
        while True:
            with self._boundary("reading insights"):
                records, offset = self.client.scroll(
                    keys.INSIGHT_COLLECTION,
                    scroll_filter=active,
                    limit=batch,
                    offset=offset,
                    with_payload=["id", "text"],
                    with_vectors=False,
                )
            yield [(p["id"], p["text"]) for r in records if (p := r.payload or {}).get("id")]
            if offset is None:
                return

    def versions(
        self, kind: Literal["insight", "query"], namespace: str, ids: Collection[str]
    ) -> dict[str, int]:
        if not ids:
            return {}
        key = None
        if kind == "query":
            collection, pids = keys.QUERY_COLLECTION, [query_point_id(namespace, q) for q in ids]
            key = self._key_of(namespace)
        else:
            collection, pids = keys.INSIGHT_COLLECTION, [point_id(i) for i in ids]
        with self._boundary("reading versions"):
            records = self.client.retrieve(
                collection, pids, with_payload=["id", "namespace", "version"], with_vectors=False, **_on(key)
            )
        payloads = [r.payload or {} for r in records]
        return {p["id"]: int(p["version"]) for p in payloads if p.get("namespace") == namespace}

    def count(self, kind: Literal["insight", "query"]) -> int:
        name = keys.INSIGHT_COLLECTION if kind == "insight" else keys.QUERY_COLLECTION
        if kind == "insight" or not self.shard_keys:
            with self._boundary("counting"):
                return int(self.client.count(name, exact=True).count)
        self._refresh()
        own = dict(self._own)
        # a promoted namespace is counted under its own key only (its shared copy may not be gone yet)
        shared = models.Filter(
            must_not=[models.FieldCondition(key="namespace", match=models.MatchAny(any=sorted(own)))]
        )
        with self._boundary("counting"):
            total = int(
                self.client.count(
                    name, count_filter=shared if own else None, exact=True, shard_key_selector=SHARED_KEY
                ).count
            )
            for key in sorted(own.values()):
                total += int(self.client.count(name, exact=True, shard_key_selector=key).count)
        return total

    def persist(self) -> None:
        """The server makes each write durable (its write-ahead log) before it answers; with shard
        keys, promoted namespaces' shared copies that are due are dropped here."""
        if self.shard_keys:
            self._refresh()
            self._drop_leftovers()

    def close(self) -> None:
        self.client.close()


__all__ = ["ClientIndex", "collection_vectors", "held_vectors"]
