"""A brute-force ``VectorIndex`` in plain Python: the reference the Qdrant backends are held to.

No engine, no files: unit tests and the retrieval algorithm run on it without Qdrant, and the
contract suite checks that every Qdrant backend behaves as this one does. Sparse vectors score by
dot product (the hashing embedder normalises them, so that is the cosine, as in Qdrant's sparse
index); dense ones by cosine. One lock makes it safe to share between threads.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Literal, TypeVar

from evomem.adapters.qdrant.common import latest
from evomem.core.ports import InsightPoint, QueryHit, QueryPoint, Vector
from evomem.core.retrieval import ServingInsight

_Stored = dict[int, float] | tuple[float, ...]
_P = TypeVar("_P", QueryPoint, InsightPoint)


class InMemoryIndex:
    """A ``VectorIndex`` held in two dicts; ``fresh`` is always True because nothing outlives it."""

    def __init__(self, kind: Literal["sparse", "dense"] = "sparse", dim: int = 0, idf: bool = True) -> None:
        self.kind = kind
        self.dim = dim
        self.idf = idf and kind == "sparse"
        self.identity = f"memory:{id(self)}"
        self.fresh = True
        self._lock = threading.Lock()
        self._queries: dict[tuple[str, str], tuple[QueryPoint, _Stored]] = {}
        self._insights: dict[tuple[str, str], tuple[InsightPoint, _Stored]] = {}

    def _prepare(self, vec: Vector) -> _Stored:
        """Validate a vector as Qdrant would and bring it to the form scoring uses."""
        if self.kind == "sparse":
            if not isinstance(vec, Mapping):
                raise TypeError("this index holds sparse vectors: pass {index: value}")
            return {int(i): float(v) for i, v in vec.items() if v}
        if isinstance(vec, Mapping):
            raise TypeError("this index holds dense vectors: pass a list of floats")
        if self.dim and len(vec) != self.dim:
            raise ValueError(f"expected a vector of {self.dim} dimensions, got {len(vec)}")
        norm = math.sqrt(sum(x * x for x in vec))
        return tuple(x / norm for x in vec) if norm else tuple(0.0 for _ in vec)

    @staticmethod
    def _score(a: _Stored, b: _Stored) -> float:
        if isinstance(a, dict) and isinstance(b, dict):
            small, large = (a, b) if len(a) <= len(b) else (b, a)
            return sum(v * large.get(i, 0.0) for i, v in small.items())
        assert isinstance(a, tuple) and isinstance(b, tuple)
        return sum(x * y for x, y in zip(a, b, strict=True))

    # -- writes ----------------------------------------------------------------------------------
    def write_queries(self, points: Sequence[tuple[QueryPoint, Vector | None]]) -> None:
        self._write(self._queries, points)

    def write_insights(self, points: Sequence[tuple[InsightPoint, Vector | None]]) -> None:
        self._write(self._insights, points)

    def _write(
        self, store: dict[tuple[str, str], tuple[_P, _Stored]], points: Sequence[tuple[_P, Vector | None]]
    ) -> None:
        with self._lock:  # plan the whole batch first, so a bad point leaves nothing half-written
            plan: dict[tuple[str, str], tuple[_P, _Stored]] = {}
            for p, vec in latest(points):
                key = (p.namespace, p.id)
                held = store.get(key)
                if held is None:
                    if vec is None:
                        raise ValueError(f"{p.id!r} is not in the index yet and came without a vector")
                    plan[key] = (p, self._prepare(vec))
                elif held[0].version < p.version:  # the text never changes, so the vector stays
                    plan[key] = (p, held[1])
            store.update(plan)

    # -- reads -----------------------------------------------------------------------------------
    @staticmethod
    def _top(scored: list[tuple[float, str, _P]], k: int) -> list[tuple[float, str, _P]]:
        scored.sort(key=lambda hit: (-hit[0], hit[1]))  # ties by id, as the Qdrant adapters break them
        return [hit for hit in scored if hit[0] > 0][: max(k, 0)]

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
        near = {i for i, _ in self.search_insights(vector if about is None else about, namespace, insights)}
        with self._lock:
            for i in list(near):
                near.update(self._insights[(namespace, i)][0].inherits)
        if not near:
            return []
        skip = set(exclude)
        return self._search_queries(
            vector,
            namespace,
            k,
            lambda q: q.id not in skip and not (near.isdisjoint(q.supports) and near.isdisjoint(q.harms)),
            rank_by=about,
        )

    def _search_queries(
        self,
        vector: Vector,
        namespace: str,
        k: int,
        keep: Callable[[QueryPoint], bool] | None = None,
        rank_by: Vector | None = None,
    ) -> list[QueryHit]:
        """Eq. 2 over the namespace's queries, or over those ``keep`` accepts (the IDF weights are
        the namespace's either way, as Qdrant's filtered search reads them off the whole index):
        the top-k by ``rank_by`` (default ``vector``), each scored by its cosine with ``vector``."""
        if not vector:
            return []
        if rank_by is not None:
            if not rank_by:
                return []
            cosine = self._prepare(vector)
            hits = self._search_queries(rank_by, namespace, k, keep)
            with self._lock:
                stored = {h.id: got[1] for h in hits if (got := self._queries.get((namespace, h.id)))}
            return [
                QueryHit(h.id, self._score(cosine, stored[h.id]), h.supports, h.harms)
                for h in hits
                if h.id in stored
            ]
        query = self._prepare(vector)
        with self._lock:
            held = [(q, v) for (ns, _), (q, v) in self._queries.items() if ns == namespace]
        candidates = held if keep is None else [(q, v) for q, v in held if keep(q)]
        if not self.idf:
            scored = [(self._score(query, v), q.id, q) for q, v in candidates]
            return [QueryHit(q.id, s, q.supports, q.harms) for s, _, q in self._top(scored, k)]
        # Qdrant's IDF modifier: each query weight times ln((N - n + 0.5) / (n + 0.5) + 1), N the
        # namespace's queries, n those holding the dimension: the embedded index keeps each
        # namespace's queries in a shard of their own (evomem/adapters/qdrant/edge.py)
        total = len(held)
        assert isinstance(query, dict)
        df = dict.fromkeys(query, 0)
        for _, v in held:
            assert isinstance(v, dict)
            for d in query.keys() & v.keys():
                df[d] += 1
        weighted = {
            d: w * math.log((total - n + 0.5) / (n + 0.5) + 1.0) for d, w in query.items() if (n := df[d])
        }
        vectors = {q.id: v for q, v in candidates}
        ranked = self._top([(self._score(weighted, v), q.id, q) for q, v in candidates], k)
        return [QueryHit(q.id, self._score(query, vectors[q.id]), q.supports, q.harms) for _, _, q in ranked]

    def query_evidence(self, namespace: str, ids: Collection[str]) -> dict[str, QueryHit]:
        with self._lock:
            found = [self._queries.get((namespace, q)) for q in ids]
        return {p.id: QueryHit(p.id, 0.0, p.supports, p.harms) for p, _ in filter(None, found)}

    def serving_ids(
        self, namespace: str, ids: Collection[str]
    ) -> tuple[set[str], dict[str, tuple[str, ...]]]:
        wanted = set(ids)
        if not wanted:
            return set(), {}
        active: set[str] = set()
        heirs: dict[str, tuple[str, ...]] = {}
        with self._lock:
            for (ns, i), (n, _) in self._insights.items():
                if ns != namespace or n.state != "active":
                    continue
                if i in wanted:
                    active.add(i)
                if not wanted.isdisjoint(n.inherits):
                    heirs[i] = tuple(n.inherits)
        return active, heirs

    def read_insights(self, namespace: str, ids: Collection[str]) -> dict[str, ServingInsight]:
        with self._lock:
            found = [self._insights.get((namespace, i)) for i in ids]
        return {
            n.id: ServingInsight(n.id, n.text, n.version, tuple(n.inherits)) for n, _ in filter(None, found)
        }

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        if not vector:
            return []
        query = self._prepare(vector)
        with self._lock:
            scored = [
                (self._score(query, v), n.id, n)
                for (ns, _), (n, v) in self._insights.items()
                if ns == namespace and n.state == "active"
            ]
        return [(i, s) for s, i, _ in self._top(scored, k)]

    def scan_insights(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        with self._lock:
            active = [(n.id, n.text) for n, _ in self._insights.values() if n.state == "active"]
        for start in range(0, len(active), batch):
            yield active[start : start + batch]

    def versions(
        self, kind: Literal["insight", "query"], namespace: str, ids: Collection[str]
    ) -> dict[str, int]:
        store: Mapping[tuple[str, str], tuple[QueryPoint | InsightPoint, _Stored]]
        store = self._insights if kind == "insight" else self._queries
        with self._lock:
            return {i: store[(namespace, i)][0].version for i in ids if (namespace, i) in store}

    def count(self, kind: Literal["insight", "query"]) -> int:
        with self._lock:
            return len(self._insights if kind == "insight" else self._queries)

    def persist(self) -> None:
        """Nothing outlives the process: nothing to make durable."""

    def close(self) -> None:
        """Nothing to release; kept so the index can stand wherever a ``VectorIndex`` is closed."""


__all__ = ["InMemoryIndex"]
