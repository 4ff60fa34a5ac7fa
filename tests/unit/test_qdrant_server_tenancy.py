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

import re
from typing import Any, cast

import pytest
from qdrant_client import QdrantClient, models

from evomem import keys
from evomem.adapters.qdrant.client import ClientIndex, own_shard_key
from evomem.adapters.qdrant.common import query_point_id
from evomem.core.hashing import HashingEmbedder
from evomem.core.ports import InsightPoint, QueryPoint
from evomem.errors import ConfigError
from tests.support.sharded_qdrant import ShardedLocal

HOSTILE = (
    "a" * 300,
    "x" * 4096,
    "üñí/çødé",
    "租户-日本語-🚀",
    "../../etc/passwd",
    "/absolute/path",
    "ns\\with\\backslashes",
    "ns:{tag}:x",
    "{a}",
    "{}",
    "white space\n",
    ".",
    "..",
    "",
)
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


# -- tiered tenancy: shard keys (EVOMEM_QDRANT_SHARD_KEYS) ------------------------------------------
# The server's custom sharding is modelled over local mode (tests/support/sharded_qdrant.py), and
# the requests are checked against qdrant-client's REST models: what a server would be sent.

_KEY = re.compile(r"shared|ns-[0-9a-f]{32}")


def _sharded(store: ShardedLocal, promote_at: int = 1000, **kwargs: Any) -> ClientIndex:
    return ClientIndex(
        cast(QdrantClient, store),
        "sparse",
        0,
        identity="t",
        where="sharded",
        local=True,
        shard_keys=True,
        promote_at=promote_at,
        routing_s=0,
        **kwargs,
    )


def _query_calls(store: ShardedLocal) -> list[tuple[str, dict[str, Any]]]:
    reads = ("retrieve", "query_points", "scroll", "count", "facet")
    return [
        (name, kwargs)
        for name, args, kwargs in store.calls
        if name in reads and args and args[0] == keys.QUERY_COLLECTION
    ]


def _as_rest_request(name: str, kw: dict[str, Any]) -> Any:
    """The REST body qdrant-client makes of this call (its own models validate the shard key)."""
    key = kw.get("shard_key_selector")
    if name == "query_points":
        return models.QueryRequest(
            query=kw["query"],
            using=kw["using"],
            filter=kw["query_filter"],
            limit=kw["limit"],
            with_payload=kw["with_payload"],
            with_vector=kw["with_vectors"],
            shard_key=key,
        )
    if name == "scroll":
        return models.ScrollRequest(
            filter=kw["scroll_filter"], limit=kw["limit"], offset=kw.get("offset"), shard_key=key
        )
    if name == "count":
        return models.CountRequest(filter=kw.get("count_filter"), exact=kw["exact"], shard_key=key)
    if name == "facet":
        return models.FacetRequest(key="namespace", limit=kw["limit"], exact=kw["exact"], shard_key=key)
    return models.PointRequest(ids=[], with_payload=kw["with_payload"], shard_key=key)


def test_the_queries_collection_is_made_with_custom_sharding_and_a_shared_key() -> None:
    store = ShardedLocal()
    _sharded(store)
    made = {args[0]: kwargs for args, kwargs in store.named("create_collection")}
    assert made[keys.QUERY_COLLECTION]["sharding_method"] == models.ShardingMethod.CUSTOM
    assert made[keys.INSIGHT_COLLECTION].get("sharding_method") is None  # insights: one auto-sharded
    assert [args for args, _ in store.named("create_shard_key")] == [(keys.QUERY_COLLECTION, "shared")]
    models.CreateCollection(sharding_method=made[keys.QUERY_COLLECTION]["sharding_method"])
    models.CreateShardingKey(shard_key="shared")
    again = _sharded(store)  # a second process: the key exists already, which is fine
    assert again._tiers()["shared_namespaces"] == 0


@pytest.mark.parametrize("promote_at", [1000, 2])
def test_every_read_and_write_of_past_queries_names_a_safe_shard_key(promote_at: int) -> None:
    store = ShardedLocal()
    index = _sharded(store, promote_at)
    for n, ns in enumerate(HOSTILE):  # two past queries each: promote_at = 2 promotes them all
        index.write_queries(
            [
                (QueryPoint(q, ns, text, "resolved", 1, (f"i{n}",), ()), _EMB.embed_one(text))
                for q, text in (("q1", "check the year in the claim"), ("q2", "check the claim's year"))
            ]
        )
    vec = _EMB.embed_one("check the year in the claim")
    for ns in HOSTILE:
        index.search_queries(vec, ns, 5)
        index.search_evidence(vec, ns, 5, 5)
        index.query_evidence(ns, {"q1"})
        index.versions("query", ns, {"q1"})
    index.persist()
    calls = _query_calls(store)
    assert calls
    for name, kwargs in calls:
        key = kwargs.get("shard_key_selector")
        assert isinstance(key, str) and _KEY.fullmatch(key), (name, key)
        _as_rest_request(name, kwargs)
    writes = [
        op
        for args, _ in store.named("batch_update_points")
        if args[0] == keys.QUERY_COLLECTION
        for op in args[1]
    ]
    for op in writes:
        inner = op.upsert if isinstance(op, models.UpsertOperation) else op.set_payload
        assert isinstance(inner.shard_key, str) and _KEY.fullmatch(inner.shard_key)
    for args, _ in store.named("delete"):
        assert args[1].shard_key == "shared"
    made = {args[1] for args, _ in store.named("create_shard_key")}
    tiers = index._tiers()
    if promote_at == 2:
        assert made == {"shared"} | {own_shard_key(ns) for ns in HOSTILE}
        assert tiers["promoted_namespaces"] == len(HOSTILE) and tiers["shared_namespaces"] == 0
        # promoted: the shared key holds none of their points any more
        assert store.base.count(f"{keys.QUERY_COLLECTION}@shared").count == 0
    else:
        assert made == {"shared"}
        assert tiers["shared_namespaces"] == len(HOSTILE) and tiers["promoted_namespaces"] == 0
    assert index.count("query") == 2 * len(HOSTILE)
    for n, ns in enumerate(HOSTILE):  # each served its own queries only, wherever they are held
        hits = index.search_queries(vec, ns, 5)
        assert sorted(h.id for h in hits) == ["q1", "q2"]
        assert {i for h in hits for i in h.supports} == {f"i{n}"}


def test_a_promotion_is_recorded_in_the_collection_metadata_one_key_each() -> None:
    store = ShardedLocal()
    index = _sharded(store, promote_at=1)
    _fill(index, ("a", "b:{c}"))
    updates = [kwargs["metadata"] for args, kwargs in store.named("update_collection")]
    assert [set(m) for m in updates] == [
        {f"evomem_own:{own_shard_key('a')}"},
        {f"evomem_own:{own_shard_key('b:{c}')}"},
    ]
    for m in updates:
        models.UpdateCollection(metadata=m)
    held = store.get_collection(keys.QUERY_COLLECTION).config.metadata or {}
    assert {v["namespace"] for v in held.values()} == {"a", "b:{c}"}  # merged, not replaced


def test_shard_keys_need_a_server_and_a_collection_made_for_them() -> None:
    with pytest.raises(ConfigError, match="needs a Qdrant server"):
        ClientIndex(
            QdrantClient(location=":memory:"),
            "sparse",
            0,
            identity="t",
            where="m",
            local=True,
            shard_keys=True,
        )
    plain = ShardedLocal()
    ClientIndex(cast(QdrantClient, plain), "sparse", 0, identity="t", where="m", local=True)
    with pytest.raises(ConfigError, match="without custom sharding"):
        ClientIndex(cast(QdrantClient, plain), "sparse", 0, identity="t", where="m", shard_keys=True)
    sharded = ShardedLocal()
    _sharded(sharded)
    with pytest.raises(ConfigError, match="with custom sharding"):
        ClientIndex(cast(QdrantClient, sharded), "sparse", 0, identity="t", where="m", local=True)


def test_without_shard_keys_there_are_no_tiers_to_show_and_no_shard_key_is_named() -> None:
    store = ShardedLocal()
    index = ClientIndex(cast(QdrantClient, store), "sparse", 0, identity="t", where="m", local=True)
    assert index.tiers is None  # evomem stats and /metrics show none, as before
    assert _sharded(ShardedLocal()).tiers is not None
    _fill(index, HOSTILE[:2])
    index.search_queries(_EMB.embed_one("check the year"), HOSTILE[0], 5)
    assert not any("shard_key_selector" in kwargs for _, kwargs in _query_calls(store))
    assert not store.named("create_shard_key")


def test_a_batch_of_many_namespaces_costs_one_request_a_shard_key_not_one_a_namespace() -> None:
    store = ShardedLocal()
    index = _sharded(store)
    store.calls.clear()
    batch = [
        (
            QueryPoint("q1", f"tenant-{n}", "check the year", "resolved", 1, ("i1",), ()),
            _EMB.embed_one("check the year"),
        )
        for n in range(50)
    ]
    index.write_queries(batch)
    on_queries = [(name, args) for name, args, _ in store.calls if args and args[0] == keys.QUERY_COLLECTION]
    # the routing read once, the stored versions, the writes, the counts for promotion
    assert sorted(name for name, _ in on_queries) == [
        "batch_update_points",
        "facet",
        "get_collection",
        "retrieve",
    ]
    assert index.count("query") == 50
