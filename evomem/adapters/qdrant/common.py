"""What every Qdrant backend shares: point ids, payload layout and the way back to read-model records.

Query points carry the evidence (the insights each query supports and harms); insight points carry
what retrieval filters on and serves (namespace, state, text, the insights they inherit Ω⁺ from).
An edit therefore rewrites one small query payload, never an insight's whole evidence array.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import re
import uuid
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from evomem.core.ports import InsightPoint, QueryHit, QueryPoint, Vector
from evomem.core.retrieval import ServingInsight

VECTOR_NAME = "text"
_POINT_NS = uuid.UUID("0b6f3f0e-5a0c-4c39-8f43-5d2b2f1f7a6e")

#: Payload fields with an index, per collection: (field, kind). Namespace is the tenant field.
QUERY_INDEXES = (
    ("namespace", "tenant"),
    ("version", "integer"),
    ("supports", "keyword"),  # the evidence search filters on both (VectorIndex.search_evidence)
    ("harms", "keyword"),
)
INSIGHT_INDEXES = (
    ("namespace", "tenant"),
    ("state", "keyword"),
    ("inherits", "keyword"),
    ("version", "integer"),
)


def namespaced(vec: Vector, namespace: str) -> Vector:
    """A sparse vector moved into its namespace's own dimensions: every dimension XOR the namespace's
    crc32. That is a bijection of the 32-bit dimensions, so dot products within a namespace are the
    same, while one word in two namespaces lands in two posting lists. Every search is filtered to
    one namespace, and a sparse search walks the posting lists of the query's words: without this it
    walked every tenant's postings of a common word, and its cost grew with the whole memory instead
    of the namespace (bench/README.md, growth). Dense vectors are left as they are."""
    if not isinstance(vec, Mapping):
        return vec
    salt = zlib.crc32(namespace.encode())
    return {int(k) ^ salt: v for k, v in vec.items()}


#: A UUID as ``str(uuid.UUID(...))`` writes it, which is its own point id.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def sparse_dot(probe: Mapping[int, float], indices: Sequence[int], values: Sequence[float]) -> float:
    """The dot product of a (namespaced) probe and a stored sparse vector: their cosine, both being
    L2-normalised. With ``EVOMEM_SIMILARITY=idf`` the engine ranks by the IDF-weighted product; the
    weight a similar query carries (w(q), and its query-graph edge) stays this cosine."""
    # in C (``map``), not a generator: about 2.5x faster on a stored query's ~180 entries, and a
    # retrieval computes ten of these; same products summed in the same order, so the same float
    return float(sum(map(operator.mul, map(probe.get, indices, itertools.repeat(0.0)), values)))


def point_id(node_id: str) -> str:
    """Qdrant wants a UUID or an integer; node ids that are not UUIDs map to a uuid5 of themselves."""
    if _CANONICAL_UUID.fullmatch(node_id):
        return node_id  # the usual case, without parsing (retrieval maps hundreds of ids a call)
    try:
        return str(uuid.UUID(node_id))
    except ValueError:
        return str(uuid.uuid5(_POINT_NS, node_id))


def query_point_id(namespace: str, query_id: str) -> str:
    """Query ids are scoped to their namespace, so the point id is made of both."""
    return str(uuid.uuid5(_POINT_NS, f"query\x00{namespace}\x00{query_id}"))


_U64 = (1 << 64) - 1


def int_point_id(node_id: str) -> int:
    """The embedded engine's point id of a node: 64 bits. Its Python binding converts a string id
    through a UUID object (about 1.6 µs an id, both ways) and an integer for nothing, and retrieval
    hands it hundreds of ids a call. A UUID's two halves XOR-ed (so every UUID version keeps its
    varying bits); any other id, the first 8 bytes of its BLAKE2b. Two nodes of one collection share
    an id with probability about n²/2⁶⁵ (3·10⁻⁸ at a million); a write that finds another node at
    its id fails loudly (``EdgeIndex``) instead of overwriting it."""
    if _CANONICAL_UUID.fullmatch(node_id):
        whole = int(node_id.replace("-", ""), 16)
        return (whole >> 64) ^ (whole & _U64)
    return int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=8).digest(), "big")


def int_query_point_id(namespace: str, query_id: str) -> int:
    """``int_point_id`` for a query, whose id is scoped to its namespace."""
    key = f"query\x00{namespace}\x00{query_id}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def node_id_of(point: Any) -> str:
    payload = point.payload or {}
    return str(payload.get("id") or point.id)


def query_payload(q: QueryPoint) -> dict[str, Any]:
    return {
        "id": q.id,
        "namespace": q.namespace,
        "status": q.status,
        "version": q.version,
        "supports": list(q.supports),
        "harms": list(q.harms),
    }


def insight_payload(n: InsightPoint) -> dict[str, Any]:
    return {
        "id": n.id,
        "namespace": n.namespace,
        "state": n.state,
        "text": n.text,
        "version": n.version,
        "inherits": list(n.inherits),
    }


def hit_from_payload(p: dict[str, Any], score: float = 0.0) -> QueryHit:
    return QueryHit(p["id"], score, tuple(p.get("supports") or ()), tuple(p.get("harms") or ()))


def named_with_heirs(payloads: Sequence[dict[str, Any]]) -> list[str]:
    """The ids of these insight payloads and of every insight they inherit from, sorted."""
    return sorted({i for p in payloads for i in (p["id"], *(p.get("inherits") or ()))})


def serving_from_payload(p: dict[str, Any]) -> ServingInsight:
    return ServingInsight(p["id"], p["text"], int(p.get("version", 0)), tuple(p.get("inherits") or ()))


def first_limit(k: int) -> int:
    """Hits a top-k search asks for first: a margin past k, so that a tie at the k-th score is
    usually seen whole in one search. Past queries of templated tasks often score exactly alike
    (the same text again); with k + 1, the evidence search's second search was repeated wider for
    about half the retrievals of the growth benchmark's memory (bench/README, "A wider first search
    for ties")."""
    return 2 * k + 8


def top_k_deterministic(search: Any, k: int, score: Any, node_id: Any, first: int | None = None) -> list[Any]:
    """The top ``k`` of ``search(limit)`` by score, ties broken by node id. The engine breaks ties
    by where a point sits in its segments, which differs between two replicas of the same data (a
    copy caught up by replay, a store rebuilt): two processes would serve different insights for
    templated tasks whose past queries score exactly alike. ``first`` hits are asked for (default
    ``first_limit(k)``); only when the last of them still ties with the k-th is the search repeated
    wider."""
    if k <= 0:
        return []
    limit = max(first if first is not None else first_limit(k), k + 1)
    hits = list(search(limit))
    if len(hits) == limit and score(hits[-1]) == score(hits[k - 1]):
        hits = list(search(4 * limit + 16))
    hits.sort(key=lambda h: (-score(h), node_id(h)))
    return hits[:k]


def latest(points: Any) -> list[Any]:
    """The newest of each node among (point, vector) pairs, by (namespace, id)."""
    out: dict[tuple[str, str], Any] = {}
    for pair in points:
        p = pair[0]
        key = (p.namespace, p.id)
        held = out.get(key)
        if held is None or held[0].version < p.version:
            out[key] = pair if pair[1] is not None or held is None else (p, held[1])
        elif held[1] is None and pair[1] is not None:
            out[key] = (held[0], pair[1])
    return list(out.values())
