"""A stand-in for a Qdrant server's custom sharding, over qdrant-client's local mode.

qdrant-client's local mode (``QdrantClient(":memory:")``) accepts ``sharding_method`` and every
``shard_key_selector`` and ignores them, and refuses ``create_shard_key`` (``NotImplementedError``);
no Qdrant server can be run here. ``ShardedLocal`` holds each shard key of a custom-sharded
collection as a collection of its own in one local client, and routes every call by its shard key
as a server does, as far as its documentation says: a write names a shard key (one that does not
exist, or none at all, is an error); a read that names keys reads those, one that names none reads
all of them; the sharding method and the metadata are the collection's. It is a model of the
server, made to test the adapter's protocol (copy, switch, drop); what it cannot show is listed in
docs/guides/tenancy.md. Every call is recorded (``calls``) for the tests of the requests' shapes.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

_SHARDED_OPS = (models.PointsList, models.SetPayload, models.FilterSelector, models.PointIdsList)


def _error(code: int, text: str) -> UnexpectedResponse:
    body = json.dumps({"status": {"error": text}}).encode()
    return UnexpectedResponse(code, "Bad Request", body, httpx.Headers())


class ShardedLocal:
    """``QdrantClient``'s calls that ``ClientIndex`` makes, with custom sharding modelled."""

    def __init__(self) -> None:
        self.base = QdrantClient(location=":memory:")
        self.keys: dict[str, list[Any]] = {}  # custom-sharded collection -> its shard keys
        self.indexes: dict[str, list[tuple[str, Any]]] = {}
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for n, a, k in self.calls if n == name]

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append((name, args, dict(kwargs)))

    @staticmethod
    def _part(collection: str, key: Any) -> str:
        return f"{collection}@{key}"

    def _selected(self, collection: str, selector: Any, write: bool) -> list[str]:
        held = self.keys[collection]
        if selector is None:
            if write:
                raise _error(400, "Shard key is not specified for a collection with custom sharding")
            wanted = list(held)
        else:
            wanted = list(selector) if isinstance(selector, list) else [selector]
        for key in wanted:
            if key not in held:
                raise _error(404, f"Shard key {key} does not exist")
        return [self._part(collection, key) for key in wanted]

    # -- collections ------------------------------------------------------------------------------
    def collection_exists(self, collection_name: str) -> bool:
        self._record("collection_exists", (collection_name,), {})
        return self.base.collection_exists(collection_name)

    def create_collection(self, collection_name: str, **kwargs: Any) -> bool:
        self._record("create_collection", (collection_name,), kwargs)
        method = kwargs.pop("sharding_method", None)
        self.base.create_collection(collection_name, **kwargs)
        if method == models.ShardingMethod.CUSTOM:
            self.keys[collection_name] = []
            self.indexes[collection_name] = []
            self._config = kwargs
        return True

    def get_collection(self, collection_name: str) -> models.CollectionInfo:
        self._record("get_collection", (collection_name,), {})
        info = self.base.get_collection(collection_name)
        if collection_name in self.keys:
            info.config.params.sharding_method = models.ShardingMethod.CUSTOM
        return info

    def update_collection(self, collection_name: str, **kwargs: Any) -> bool:
        self._record("update_collection", (collection_name,), kwargs)
        self.base.update_collection(collection_name, **kwargs)
        parts = [self._part(collection_name, k) for k in self.keys.get(collection_name, [])]
        rest = {k: v for k, v in kwargs.items() if k != "metadata"}
        for part in parts if rest else []:
            self.base.update_collection(part, **rest)
        return True

    def create_payload_index(self, collection_name: str, field_name: str, **kwargs: Any) -> Any:
        self._record("create_payload_index", (collection_name, field_name), kwargs)
        if collection_name in self.keys:
            self.indexes[collection_name].append((field_name, kwargs))
            for key in self.keys[collection_name]:
                self.base.create_payload_index(self._part(collection_name, key), field_name, **kwargs)
        return self.base.create_payload_index(collection_name, field_name, **kwargs)

    def create_shard_key(self, collection_name: str, shard_key: Any, **kwargs: Any) -> bool:
        self._record("create_shard_key", (collection_name, shard_key), kwargs)
        held = self.keys.get(collection_name)
        if held is None:
            raise _error(400, "Shard key can only be created for a collection with custom sharding")
        if shard_key in held:
            raise _error(400, f"Shard key {shard_key} already exists")
        info = self.base.get_collection(collection_name)
        params = info.config.params
        self.base.create_collection(
            self._part(collection_name, shard_key),
            vectors_config=params.vectors or {},
            sparse_vectors_config=params.sparse_vectors,
        )
        for field, kw in self.indexes[collection_name]:
            self.base.create_payload_index(self._part(collection_name, shard_key), field, **kw)
        held.append(shard_key)
        return True

    def list_shard_keys(self, collection_name: str) -> list[Any]:
        return list(self.keys.get(collection_name, []))

    # -- points -----------------------------------------------------------------------------------
    def retrieve(self, collection_name: str, ids: Any, **kwargs: Any) -> list[models.Record]:
        self._record("retrieve", (collection_name, ids), kwargs)
        selector = kwargs.pop("shard_key_selector", None)
        if collection_name not in self.keys:
            return self.base.retrieve(collection_name, ids, **kwargs)
        return [
            r
            for part in self._selected(collection_name, selector, False)
            for r in self.base.retrieve(part, ids, **kwargs)
        ]

    def query_points(self, collection_name: str, **kwargs: Any) -> models.QueryResponse:
        self._record("query_points", (collection_name,), kwargs)
        selector = kwargs.pop("shard_key_selector", None)
        if collection_name not in self.keys:
            return self.base.query_points(collection_name, **kwargs)
        answers = [
            self.base.query_points(p, **kwargs) for p in self._selected(collection_name, selector, False)
        ]
        hits = sorted((h for a in answers for h in a.points), key=lambda h: -h.score)
        return answers[0].model_copy(update={"points": hits[: kwargs.get("limit", 10)]})

    def scroll(self, collection_name: str, **kwargs: Any) -> tuple[list[models.Record], Any]:
        self._record("scroll", (collection_name,), kwargs)
        selector = kwargs.pop("shard_key_selector", None)
        if collection_name not in self.keys:
            return self.base.scroll(collection_name, **kwargs)
        parts = self._selected(collection_name, selector, False)
        if len(parts) != 1:
            raise NotImplementedError("the stand-in scrolls one shard key at a time")
        return self.base.scroll(parts[0], **kwargs)

    def count(self, collection_name: str, **kwargs: Any) -> models.CountResult:
        self._record("count", (collection_name,), kwargs)
        selector = kwargs.pop("shard_key_selector", None)
        if collection_name not in self.keys:
            return self.base.count(collection_name, **kwargs)
        total = sum(
            self.base.count(p, **kwargs).count for p in self._selected(collection_name, selector, False)
        )
        return models.CountResult(count=total)

    def facet(self, collection_name: str, key: str, **kwargs: Any) -> models.FacetResponse:
        self._record("facet", (collection_name, key), kwargs)
        selector = kwargs.pop("shard_key_selector", None)
        if collection_name not in self.keys:
            return self.base.facet(collection_name, key, **kwargs)
        counts: dict[Any, int] = {}
        for part in self._selected(collection_name, selector, False):
            for hit in self.base.facet(part, key, **kwargs).hits:
                counts[hit.value] = counts.get(hit.value, 0) + hit.count
        return models.FacetResponse(hits=[models.FacetValueHit(value=v, count=c) for v, c in counts.items()])

    def batch_update_points(self, collection_name: str, update_operations: list[Any], **kwargs: Any) -> Any:
        self._record("batch_update_points", (collection_name, update_operations), kwargs)
        if collection_name not in self.keys:
            return self.base.batch_update_points(collection_name, update_operations, **kwargs)
        out = []
        for op in update_operations:
            inner_name = next(n for n in type(op).model_fields)
            inner = getattr(op, inner_name)
            if not isinstance(inner, _SHARDED_OPS):
                raise NotImplementedError(f"the stand-in does not route {type(inner).__name__}")
            key = inner.shard_key
            if isinstance(key, list):  # a write names one shard key here
                raise _error(400, "a write names one shard key")
            bare = type(op)(**{inner_name: inner.model_copy(update={"shard_key": None})})
            for part in self._selected(collection_name, key, True):
                out.extend(self.base.batch_update_points(part, [bare], **kwargs))
        return out

    def delete(self, collection_name: str, points_selector: Any, **kwargs: Any) -> Any:
        self._record("delete", (collection_name, points_selector), kwargs)
        if collection_name not in self.keys:
            return self.base.delete(collection_name, points_selector, **kwargs)
        key = getattr(points_selector, "shard_key", None) or kwargs.pop("shard_key_selector", None)
        bare = points_selector.model_copy(update={"shard_key": None})
        for part in self._selected(collection_name, key, True):
            self.base.delete(part, bare, **kwargs)
        return None

    def close(self) -> None:
        self.base.close()
