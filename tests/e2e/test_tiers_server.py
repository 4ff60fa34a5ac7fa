"""Tiered tenancy on the Qdrant-server adapter (``EVOMEM_QDRANT_SHARD_KEYS``): a namespace promoted
to a shard key of its own serves the same past queries, evidence and insights as a store that never
promoted it, in the process that promoted it and in another process on the same server, before it
read the switch and after; a write made to the shared key by a process that had not read the switch
yet is kept. No Qdrant server can be run here: the server's custom sharding is modelled over
qdrant-client's local mode (tests/support/sharded_qdrant.py); docs/guides/tenancy.md says what that
leaves untested."""

from __future__ import annotations

import math
import threading
import uuid
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis
from qdrant_client import QdrantClient

from evomem import Memory, Settings, keys
from evomem.adapters.qdrant.client import ClientIndex, own_shard_key
from evomem.core.hashing import HashingEmbedder
from evomem.core.ports import InsightPoint, QueryPoint
from evomem.service.server import EvomemHTTPServer, build_server
from tests.support.pipeline_helpers import Workers, wait_for
from tests.support.sharded_qdrant import ShardedLocal

TOPICS = ["truck", "sedan", "ferry", "glider", "tractor", "scooter", "barge", "tram"]
_EMB = HashingEmbedder()


def _text(i: int) -> str:
    return f"Verify that the {TOPICS[i % len(TOPICS)]} number {i // len(TOPICS)} carries its load"


def _open(client: Any, **kwargs: Any) -> ClientIndex:
    return ClientIndex(
        cast(QdrantClient, client), "sparse", 0, identity="t", where="x", local=True, idf=False, **kwargs
    )


def _report(indexes: list[ClientIndex], namespace: str, first: int, n: int) -> None:
    """What a projector writes for ``n`` tasks: a query with its evidence, the insight it proposed."""
    for i in range(first, first + n):
        text, insight = _text(i), f"{namespace}-i{i % 12}"
        supports, harms = ((insight,), ()) if i % 4 else ((), (insight,))
        query = QueryPoint(f"q{i}", namespace, text, "resolved", 1, supports, harms)
        node = InsightPoint(insight, namespace, f"Weigh the {TOPICS[i % 8]} first.", "active", 1 + i // 12)
        for index in indexes:
            index.write_queries([(query, _EMB.embed_one(text))])
            index.write_insights([(node, _EMB.embed_one(node.text))])


def _served(index: ClientIndex, namespace: str, probes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for probe in probes:
        vec = _EMB.embed_one(probe)
        similar = index.search_queries(vec, namespace, 5)
        evidence = index.search_evidence(vec, namespace, 6, 8)
        ids = {h.id for h in similar + evidence}
        out[probe] = (
            [(h.id, round(h.score, 6), h.supports, h.harms) for h in similar],
            [(h.id, round(h.score, 6), h.supports, h.harms) for h in evidence],
            sorted(index.query_evidence(namespace, ids).items()),
            sorted(index.versions("query", namespace, ids).items()),
        )
    return out


def test_a_promoted_namespace_serves_the_same_before_and_after_in_every_process() -> None:
    ns, small = "grow:{tenant}/ü", "small"
    server = ShardedLocal()
    # the promoting process; its shared copies stay until it is told the grace is over
    promoting = _open(server, shard_keys=True, promote_at=40, routing_s=3600)
    reference = _open(QdrantClient(location=":memory:"))  # a store that never promotes
    _report([promoting, reference], ns, 0, 30)
    _report([promoting, reference], small, 0, 5)
    stale = _open(server, shard_keys=True, promote_at=40, routing_s=math.inf)  # reads the routing once
    probes = [_text(i) for i in range(0, 60, 3)] + ["Verify the load of an unknown glider"]
    before = _served(reference, ns, probes)
    assert any(s[0] for s in before.values())
    assert _served(promoting, ns, probes) == before == _served(stale, ns, probes)
    assert promoting._tiers()["promoted_namespaces"] == 0

    _report([promoting, reference], ns, 30, 30)  # past 40: promoted while these are written
    assert promoting.promotions == 1
    assert promoting._tiers() | {"promote_at": 0} == {
        "shared_namespaces": 1,
        "promoted_namespaces": 1,
        "shared_shards": 1,
        "own_shards": 1,
        "own_shards_open": 1,
        "promote_at": 0,
    }
    after = _served(reference, ns, probes)
    assert after != before  # the 30 new tasks taught it something
    assert _served(promoting, ns, probes) == after
    assert promoting.count("query") == reference.count("query") == 65
    # a process that has not read the switch yet still finds the namespace in the shared key
    assert ns not in stale._own
    assert _served(stale, ns, probes[:3]) == {p: after[p] for p in probes[:3]}

    # ... and writes there: an edit of a past query's evidence, projected before it reads the switch
    edited = QueryPoint("q5", ns, _text(5), "resolved", 2, (f"{ns}-i5", f"{ns}-i7"), ())
    for index in (stale, reference):
        index.write_queries([(edited, None)])
    promoting._drop_leftovers(now=math.inf)  # the grace is over: copied once more, then dropped
    assert server.base.count(f"{keys.QUERY_COLLECTION}@shared").count == 5  # the small namespace's
    assert server.base.count(f"{keys.QUERY_COLLECTION}@{own_shard_key(ns)}").count == 60
    fresh = _open(server, shard_keys=True, promote_at=40, routing_s=0)  # a process started now
    stale._refresh(force=True)
    assert stale._own == {ns: own_shard_key(ns)}
    last = _served(reference, ns, probes)
    assert last != after  # the edit is served
    for index in (promoting, fresh, stale):
        assert _served(index, ns, probes) == last
        assert index.count("query") == reference.count("query") == 65
    assert _served(fresh, small, probes) == _served(reference, small, probes)


_IDF_COUNTS_EVERY_TENANT = (
    "the server's IDF modifier counts every point a search's shard key holds (N of its formula), "
    "a flood's too; each word's document frequency is the tenant's own, but the flood's points "
    "shift the weights and near ties of the evidence search's ranking (docs/guides/tenancy.md)"
)


@pytest.mark.parametrize(
    "idf", [False, pytest.param(True, marks=pytest.mark.xfail(strict=True, reason=_IDF_COUNTS_EVERY_TENANT))]
)
def test_a_flooding_tenant_changes_nothing_its_shard_key_mates_are_served(idf: bool) -> None:
    """2,000 past queries of the same words as a quiet tenant's, under the same shared shard key:
    with cosine similarity the quiet tenant is served what it was (its dimensions and its filter
    are its own); with IDF it is not, which this test records (strict: it fails once it holds)."""
    index = ClientIndex(
        cast(QdrantClient, ShardedLocal()),
        "sparse",
        0,
        identity="t",
        where="x",
        local=True,
        idf=idf,
        shard_keys=True,
        promote_at=1_000_000,
        routing_s=0,
    )
    _report([index], "quiet", 0, 40)
    probes = [_text(i) for i in range(0, 80, 3)]
    before = _served(index, "quiet", probes)
    assert any(s[0] for s in before.values())
    for batch in range(8):
        index.write_queries(
            [
                (
                    QueryPoint(f"f{i}", "flood:{x}", _text(i), "failed", 1, ("flood-i",), ()),
                    _EMB.embed_one(_text(i)),
                )
                for i in range(batch * 250, (batch + 1) * 250)
            ]
        )
    assert index._tiers()["shared_namespaces"] == 2
    assert _served(index, "quiet", probes) == before


def test_a_namespace_promoted_while_workers_and_services_run_on_one_server_serves_the_same(
    settings: Settings,
    redis_url: str,
    tmp_path: Path,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two retrieval services on one (modelled) server, both projecting into it with shard keys
    and promoting at 40 past queries, and a reference service on a store of its own that never
    promotes. While a worker applies events and retrievals keep coming, the namespace is promoted;
    before and after, all three serve the same insights with the same scores."""
    shared_server, own_server = ShardedLocal(), ShardedLocal()

    def connect(s: Settings, kind: Any, dim: int) -> ClientIndex:
        server = shared_server if s.qdrant_shard_keys else own_server
        return ClientIndex(
            cast(QdrantClient, server),
            kind,
            dim,
            identity="qdrant:model" if s.qdrant_shard_keys else "qdrant:reference",
            where="model",
            local=True,
            idf=s.similarity == "idf",
            shard_keys=True,
            promote_at=s.index_promote_at if s.qdrant_shard_keys else 1_000_000,
            routing_s=s.tenancy_cache_s,
        )

    monkeypatch.setattr(ClientIndex, "connect", staticmethod(connect))
    base = {"http_port": 0, "qdrant_url": "http://qdrant.invalid:6333", "similarity": "cosine"}
    tiered = {**base, "qdrant_shard_keys": True, "index_promote_at": 40, "tenancy_cache_s": 0.2}
    started: list[EvomemHTTPServer] = []

    def start(**update: Any) -> EvomemHTTPServer:
        srv = build_server(settings.model_copy(update=update))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv

    ns, small = f"grow:{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:8]}"
    services = [start(**tiered), start(**tiered), start(**base)]
    failures: list[str] = []
    stop = threading.Event()

    def retrieve(srv: EvomemHTTPServer, namespace: str, query: str) -> list[tuple[str, float]]:
        resp = httpx.post(srv.url + "/v1/retrieve", json={"query": query, "namespace": namespace}, timeout=30)
        assert resp.status_code == 200, resp.text
        return [(i["id"], round(i["score"], 6)) for i in resp.json()["insights"]]

    def indexed(srv: EvomemHTTPServer) -> int:
        index = srv.service.runtime.index
        assert index is not None
        return index.count("query")

    def keep_retrieving() -> None:
        i = 0
        while not stop.is_set():
            srv = services[i % 2]
            resp = httpx.post(srv.url + "/v1/retrieve", json={"query": _text(i), "namespace": ns}, timeout=30)
            if resp.status_code != 200:
                failures.append(resp.text)
            i += 1

    def report(writer: Memory, namespace: str, first: int, n: int) -> None:
        for i in range(first, first + n):
            writer.report(
                None,
                namespace=namespace,
                query=_text(i),
                status="resolved" if i % 4 else "failed",
                proposed_insight=f"Weigh the {TOPICS[i % len(TOPICS)]} before claim {i}.",
            )

    def served(namespace: str) -> list[dict[str, Any]]:
        return [{q: retrieve(srv, namespace, q) for q in probes} for srv in services]

    probes = [_text(i) for i in range(0, 60, 3)] + ["Verify the load of an unknown glider"]
    workers = Workers(redis_url, tmp_path)
    workers.start(1)
    try:
        with Memory.open_local(settings, index=False) as writer:
            report(writer, ns, 0, 30)
            report(writer, small, 0, 5)
            for srv in services:
                wait_for(lambda srv=srv: indexed(srv) == 35, 60.0, "35 queries indexed")
            first = served(ns)
            assert first[0] == first[1] == first[2] and any(first[0].values())
            retriever = threading.Thread(target=keep_retrieving)
            retriever.start()
            report(writer, ns, 30, 30)  # past 40: promoted while the worker applies these
            for srv in services:
                wait_for(lambda srv=srv: indexed(srv) == 65, 60.0, "65 queries indexed")
            stop.set()
            retriever.join()
        assert not failures
        assert shared_server.keys[keys.QUERY_COLLECTION] == ["shared", own_shard_key(ns)]
        later = served(ns)
        assert later[0] == later[1] == later[2] and later[0] != first[0]
        mates = served(small)
        assert mates[0] == mates[1] == mates[2]
        for srv in services[:2]:
            metrics = httpx.get(srv.url + "/metrics", timeout=10).text
            assert 'evomem_index_namespaces{tier="own"} 1' in metrics
            assert 'evomem_index_namespaces{tier="shared"} 1' in metrics
    finally:
        stop.set()
        workers.stop()
        for srv in started:
            srv.shutdown()
            srv.server_close()
            srv.service.runtime.close()
