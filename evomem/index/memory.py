"""A brute-force ``VectorIndex`` in plain Python: the reference the Qdrant backends are held to.

No engine, no files: unit tests and the retrieval algorithm run on it without Qdrant, and the
contract suite checks that every Qdrant backend behaves as this one does. Sparse vectors score by
dot product (the hashing embedder normalises them, so that is the cosine, as in Qdrant's sparse
index); dense ones by cosine. One lock makes it safe to share between threads.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from evomem.index.common import candidate_from_payload, insight_payload, point_id
from evomem.ports import Vector
from evomem.retrieval import Candidate
from schemas import InsightNode, QueryNode

_Stored = dict[int, float] | tuple[float, ...]


class InMemoryIndex:
    """A ``VectorIndex`` held in two dicts; ``fresh`` is always True because nothing outlives it."""

    def __init__(self, kind: Literal["sparse", "dense"] = "sparse", dim: int = 0) -> None:
        self.kind = kind
        self.dim = dim
        self.identity = f"memory:{id(self)}"
        self.fresh = True
        self._lock = threading.Lock()
        self._queries: dict[str, tuple[QueryNode, _Stored]] = {}
        self._insights: dict[str, tuple[InsightNode, _Stored]] = {}

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
    def upsert_queries(self, points: Sequence[tuple[QueryNode, Vector]]) -> None:
        prepared = [(q, self._prepare(v)) for q, v in points]
        with self._lock:
            for q, v in prepared:
                self._queries[q.id] = (q, v)

    def write_insights(self, nodes: Sequence[InsightNode], vectors: Mapping[str, Vector]) -> None:
        with self._lock:  # plan the whole batch first, so a bad node leaves nothing half-written
            plan: dict[str, tuple[InsightNode, _Stored]] = {}
            for n in nodes:
                held = plan.get(n.id) or self._insights.get(n.id)
                if held is None:
                    if n.id not in vectors:
                        raise ValueError(
                            f"insight {n.id!r} is not in the index yet and came without a vector"
                        )
                    plan[n.id] = (n, self._prepare(vectors[n.id]))
                elif held[0].version < n.version:  # the text never changes, so the vector stays
                    plan[n.id] = (n, held[1])
            self._insights.update(plan)

    # -- reads -----------------------------------------------------------------------------------
    def _top(self, scored: list[tuple[str, float]], k: int) -> list[tuple[str, float]]:
        scored.sort(key=lambda hit: -hit[1])
        return [hit for hit in scored if hit[1] > 0][: max(k, 0)]

    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        if not vector:
            return []
        query = self._prepare(vector)
        with self._lock:
            scored = [
                (q.id, self._score(query, v)) for q, v in self._queries.values() if q.namespace == namespace
            ]
        return self._top(scored, k)

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        if not vector:
            return []
        query = self._prepare(vector)
        with self._lock:
            scored = [
                (n.id, self._score(query, v))
                for n, v in self._insights.values()
                if n.namespace == namespace and n.active
            ]
        return self._top(scored, k)

    def candidate_insights(self, namespace: str, expanded: Collection[str], limit: int) -> list[Candidate]:
        if not expanded:
            return []
        wanted = set(expanded)
        with self._lock:
            found = [
                n
                for n, _ in self._insights.values()
                if n.namespace == namespace and n.active and not wanted.isdisjoint(n.positive)
            ]
        found.sort(key=lambda n: point_id(n.id))  # Qdrant's scroll order, so a limit cuts the same way
        return [candidate_from_payload(insight_payload(n)) for n in found[: max(limit, 0)]]

    def insight_versions(self, ids: Collection[str]) -> dict[str, int]:
        with self._lock:
            return {i: self._insights[i][0].version for i in ids if i in self._insights}

    def count(self, kind: Literal["insight", "query"]) -> int:
        with self._lock:
            return len(self._insights if kind == "insight" else self._queries)

    def close(self) -> None:
        """Nothing to release; kept so the index can stand wherever a ``VectorIndex`` is closed."""


__all__ = ["InMemoryIndex"]
