"""The retrieval index on Qdrant Edge (``qdrant-edge-py``): Qdrant's own engine, in process.

Two shards under ``DATA_DIR/qdrant``: past queries and insights. Only one process may open a shard,
so the process that opens it is the one projector for it. ``state`` is a keyword, not a bool:
qdrant-edge 0.9.0 never matches a bool payload with ``MatchValue(True)``.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import qdrant_edge as qe

from evomem.errors import StoreLockedError
from evomem.index.common import (
    VECTOR_NAME,
    candidate_from_payload,
    insight_payload,
    node_id_of,
    point_id,
    query_payload,
)
from evomem.ports import Vector
from evomem.retrieval import Candidate
from schemas import InsightNode, QueryNode

SCROLL_PAGE = 1024
#: Below this many points a sparse search scores points one by one instead of walking the inverted
#: index; Qdrant's default (5000) made the top-k of a namespace of a few thousand queries take
#: milliseconds (bench/README.md). Applies to shards created from now on.
SPARSE_FULL_SCAN_THRESHOLD = 500


class EdgeIndex:
    """A ``VectorIndex`` on two Qdrant Edge shards."""

    def __init__(self, directory: Path, kind: Literal["sparse", "dense"], dim: int) -> None:
        self.dir = directory.resolve()
        self.identity = f"edge:{self.dir}"
        self.kind = kind
        self.fresh = False
        # Candidates as last read, by point id. Exact: only this process can open the shard and every
        # write goes through write_insights, which drops what it writes; a fill that a write overtook
        # (the generation moved) is not kept.
        self._candidates: dict[str, Candidate] = {}
        self._generation = 0
        self._cache_lock = threading.Lock()
        self.queries = self._open("queries", kind, dim, [("namespace", True)])
        try:
            self.insights = self._open(
                "insights", kind, dim, [("namespace", True), ("state", False), ("positive", False)]
            )
        except BaseException:
            self.queries.close()
            raise

    def _open(self, name: str, kind: str, dim: int, keywords: list[tuple[str, bool]]) -> Any:
        path = self.dir / name
        if kind == "sparse":
            sparse = qe.EdgeSparseVectorParams(full_scan_threshold=SPARSE_FULL_SCAN_THRESHOLD)
            config = qe.EdgeConfig(sparse_vectors={VECTOR_NAME: sparse})
        else:
            params = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)
            config = qe.EdgeConfig(vectors={VECTOR_NAME: params})
        try:
            if (path / "segments").exists():
                return qe.EdgeShard.load(str(path))
            path.mkdir(parents=True, exist_ok=True)
            shard = qe.EdgeShard.create(str(path), config)
        except Exception as exc:  # the engine raises a bare exception type for a held WAL lock
            if "WouldBlock" in str(exc):
                raise StoreLockedError(
                    f"the embedded Qdrant store at {path} is open in another process; only one process may "
                    "hold it. Connect to that process's service (EVOMEM_URL) or set EVOMEM_QDRANT_URL."
                ) from None
            raise
        self.fresh = True
        # payload indexes before the first write, so every segment is built with them
        for field, tenant in keywords:
            schema = qe.KeywordIndexParams(is_tenant=True) if tenant else qe.PayloadSchemaType.Keyword
            shard.update(qe.UpdateOperation.create_field_index(field, schema))
        shard.update(qe.UpdateOperation.create_field_index("version", qe.PayloadSchemaType.Integer))
        return shard

    def _vector(self, vec: Vector) -> Any:
        if self.kind == "sparse":
            assert isinstance(vec, dict)
            items = sorted(vec.items())
            return {VECTOR_NAME: qe.SparseVector([k for k, _ in items], [v for _, v in items])}
        return {VECTOR_NAME: list(vec)}

    # -- writes (the projector's) --------------------------------------------------------------
    def upsert_queries(self, points: Sequence[tuple[QueryNode, Vector]]) -> None:
        if points:
            self.queries.update(
                qe.UpdateOperation.upsert_points(
                    [qe.Point(point_id(q.id), self._vector(v), query_payload(q)) for q, v in points]
                )
            )

    def write_insights(self, nodes: Sequence[InsightNode], vectors: Mapping[str, Vector]) -> None:
        if not nodes:
            return
        latest: dict[str, InsightNode] = {}
        for n in nodes:
            if n.id not in latest or latest[n.id].version < n.version:
                latest[n.id] = n
        nodes = list(latest.values())
        self._forget([point_id(n.id) for n in nodes])
        stored = self.insight_versions([n.id for n in nodes])
        fresh = [n for n in nodes if n.id not in stored or stored[n.id] < n.version]
        new_points = [
            qe.Point(point_id(n.id), self._vector(vectors[n.id]), insight_payload(n))
            for n in fresh
            if n.id not in stored
        ]
        if new_points:
            self.insights.update(qe.UpdateOperation.upsert_points(new_points))
        for n in fresh:
            if n.id in stored:
                self.insights.update(qe.UpdateOperation.set_payload([point_id(n.id)], insight_payload(n)))
        self._forget([point_id(n.id) for n in nodes])  # again: a reader may have filled in between

    def _forget(self, point_ids: list[str]) -> None:
        with self._cache_lock:
            self._generation += 1
            for pid in point_ids:
                self._candidates.pop(pid, None)

    # -- reads ---------------------------------------------------------------------------------
    def search_queries(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        if not vector:
            return []
        hits = self.queries.query(
            qe.QueryRequest(
                limit=k,
                query=qe.Query.Nearest(self._vector(vector)[VECTOR_NAME], using=VECTOR_NAME),
                filter=qe.Filter(must=[qe.FieldCondition("namespace", match=qe.MatchValue(namespace))]),
                with_payload=["id"],
                with_vector=False,
            )
        )
        return [(node_id_of(h), float(h.score)) for h in hits if h.score > 0]

    def search_insights(self, vector: Vector, namespace: str, k: int) -> list[tuple[str, float]]:
        if not vector:
            return []
        hits = self.insights.query(
            qe.QueryRequest(
                limit=k,
                query=qe.Query.Nearest(self._vector(vector)[VECTOR_NAME], using=VECTOR_NAME),
                filter=qe.Filter(
                    must=[
                        qe.FieldCondition("namespace", match=qe.MatchValue(namespace)),
                        qe.FieldCondition("state", match=qe.MatchValue("active")),
                    ]
                ),
                with_payload=["id"],
                with_vector=False,
            )
        )
        return [(node_id_of(h), float(h.score)) for h in hits if h.score > 0]

    def candidate_insights(self, namespace: str, expanded: Collection[str], limit: int) -> list[Candidate]:
        if not expanded:
            return []
        flt = qe.Filter(
            must=[
                qe.FieldCondition("namespace", match=qe.MatchValue(namespace)),
                qe.FieldCondition("state", match=qe.MatchValue("active")),
                qe.FieldCondition("positive", match=qe.MatchAny(list(expanded))),
            ]
        )
        # which points match is always read fresh; only their payloads come from the cache
        records, _ = self.insights.scroll(
            qe.ScrollRequest(limit=limit, filter=flt, with_payload=False, with_vector=False)
        )
        ids = [str(r.id) for r in records]
        with self._cache_lock:
            generation = self._generation
            found = {i: self._candidates[i] for i in ids if i in self._candidates}
        missing = [i for i in ids if i not in found]
        if missing:
            fetched = {
                str(r.id): candidate_from_payload(r.payload)
                for r in self.insights.retrieve(missing, True, False)
            }
            found.update(fetched)
            with self._cache_lock:
                if self._generation == generation:
                    self._candidates.update(fetched)
        return [found[i] for i in ids if i in found]

    def insight_versions(self, ids: Collection[str]) -> dict[str, int]:
        if not ids:
            return {}
        records = self.insights.retrieve([point_id(i) for i in ids], ["id", "version"], False)
        return {r.payload["id"]: int(r.payload["version"]) for r in records}

    def count(self, kind: Literal["insight", "query"]) -> int:
        shard = self.insights if kind == "insight" else self.queries
        return int(shard.count(qe.CountRequest(exact=True)))

    def close(self) -> None:
        for shard in (self.queries, self.insights):
            shard.flush()
            shard.close()


__all__ = ["EdgeIndex"]
