"""The Qdrant-server adapter's tenancy, held to the requests it sends through qdrant-client.

On a server every namespace shares the two collections, partitioned by the ``namespace`` payload
index declared as the tenant field (``is_tenant``: a tenant's points stored together), and every
read of points carries the namespace: as a ``must`` filter on searches and scrolls, in the point id
of a read by id (and checked against the payload it returns). No Qdrant server can be run on this
machine (no registry used here packages one), so these tests record what ``ClientIndex`` asks of a
``:memory:`` client, which answers the same calls, and assert the requests' shapes: what a server
would be sent. A namespace name never becomes a collection, shard or file name, whatever it holds.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from qdrant_client import QdrantClient, models

from evomem import keys
from evomem.adapters.qdrant.client import ClientIndex
from evomem.adapters.qdrant.common import query_point_id
from evomem.core.hashing import HashingEmbedder
from evomem.core.ports import InsightPoint, QueryPoint

HOSTILE = ("a" * 300, "üñí/çødé", "../../etc/passwd", "ns:{tag}:x", "{a}", "white space\n")
_EMB = HashingEmbedder()


class Recording:
    """A qdrant-client stand-in that forwards every call to a ``:memory:`` client and records it."""

    def __init__(self) -> None:
        self._client = QdrantClient(location=":memory:")
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return attr(*args, **kwargs)

        return call

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for n, a, k in self.calls if n == name]


def _open(rec: Recording) -> ClientIndex:
    return ClientIndex(cast(QdrantClient, rec), "sparse", 0, identity="t", where=":memory:", local=True)


def _namespaces_filtered(flt: models.Filter | None) -> set[str]:
    must = (flt.must if flt is not None else None) or []
    conditions = must if isinstance(must, list) else [must]
    return {
        str(c.match.value)
        for c in conditions
        if isinstance(c, models.FieldCondition)
        and c.key == "namespace"
        and isinstance(c.match, models.MatchValue)
    }


def _fill(index: ClientIndex, namespaces: tuple[str, ...]) -> None:
    for ns in namespaces:
        text = f"check the year in the claim of {ns[:20]}"
        index.write_queries(
            [
                (
                    QueryPoint(
                        id="q1", namespace=ns, text=text, status="resolved", version=1, supports=("i1",)
                    ),
                    _EMB.embed_one(text),
                )
            ]
        )
        index.write_insights(
            [
                (
                    InsightPoint(id=f"i-{ns}", namespace=ns, text=text, state="active", version=1),
                    _EMB.embed_one(text),
                )
            ]
        )


def test_both_collections_declare_the_namespace_their_tenant_field() -> None:
    rec = Recording()
    _open(rec)
    created = {a[0] if a else k["collection_name"] for a, k in rec.named("create_collection")}
    assert created == {keys.QUERY_COLLECTION, keys.INSIGHT_COLLECTION}
    tenant = {a[0]: k["field_schema"] for a, k in rec.named("create_payload_index") if a[1] == "namespace"}
    assert set(tenant) == created
    for schema in tenant.values():
        assert isinstance(schema, models.KeywordIndexParams)
        assert schema.type == models.KeywordIndexType.KEYWORD and schema.is_tenant is True


@pytest.mark.parametrize("namespace", HOSTILE)
def test_every_read_of_a_namespace_carries_it_and_no_name_is_made_of_it(namespace: str) -> None:
    rec = Recording()
    index = _open(rec)
    _fill(index, (namespace, "neighbour"))
    rec.calls.clear()
    vec = _EMB.embed_one("check the year in the claim")
    hits = index.search_queries(vec, namespace, 5)
    index.search_evidence(vec, namespace, 5, 5)
    index.search_insights(vec, namespace, 5)
    index.serving_ids(namespace, {f"i-{namespace}", "i-neighbour"})
    index.read_insights(namespace, {f"i-{namespace}", "i-neighbour"})
    index.query_evidence(namespace, {"q1"})
    assert [h.id for h in hits] == ["q1"]
    searches = rec.named("query_points") + rec.named("scroll")
    assert searches
    for _, kwargs in searches:
        flt = kwargs.get("query_filter", kwargs.get("scroll_filter"))
        assert _namespaces_filtered(flt) == {namespace}
    by_id = [args[1] for args, _ in rec.named("retrieve") if args[0] == keys.QUERY_COLLECTION]
    assert by_id == [[query_point_id(namespace, "q1")]]  # the namespace is in the point id
    # the neighbour's insight, read by id, is not served to this namespace
    assert set(index.read_insights(namespace, {"i-neighbour"})) == set()
    # nothing named after the namespace: no collection, index or shard key made of it
    collections = {args[0] for name, args, _ in rec.calls if args and isinstance(args[0], str)}
    assert collections <= {keys.QUERY_COLLECTION, keys.INSIGHT_COLLECTION}
    assert not rec.named("create_shard_key") and not rec.named("create_collection")


def test_writes_carry_the_namespace_in_the_payload_of_each_point() -> None:
    rec = Recording()
    index = _open(rec)
    rec.calls.clear()
    _fill(index, HOSTILE[:3])
    points = [
        p
        for args, kwargs in rec.named("batch_update_points")
        for op in (args[1] if len(args) > 1 else kwargs["update_operations"])
        if isinstance(op, models.UpsertOperation) and isinstance(op.upsert, models.PointsList)
        for p in op.upsert.points
    ]
    assert {(p.payload or {})["namespace"] for p in points} == set(HOSTILE[:3])
