"""Many tenants in one embedded store: small namespaces share shards, a namespace that grows is
promoted to a shard of its own online and serves what it served before; hostile names map to safe
shards; a tenant that floods a shared shard is held to its quota and changes nothing the other
tenants of that shard are served."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from evomem import Memory, Settings
from evomem.adapters.qdrant.edge import EdgeIndex, shared_shard_of
from evomem.adapters.redis.quotas import WINDOW_S
from evomem.core.hashing import HashingEmbedder
from evomem.core.ports import QueryPoint
from evomem.service.server import EvomemHTTPServer, build_server
from tests.support.pipeline_helpers import Workers, wait_for

WAIT_S = 60.0
TOPICS = ["truck", "sedan", "ferry", "glider", "tractor", "scooter", "barge", "tram"]


def _query(i: int) -> str:
    return f"Verify that the {TOPICS[i % len(TOPICS)]} number {i // len(TOPICS)} carries its load"


@pytest.fixture
def services(settings: Settings, tmp_path: Path) -> Iterator[Any]:
    started: list[EvomemHTTPServer] = []

    def start(name: str, **overrides: Any) -> EvomemHTTPServer:
        update = {"http_port": 0, "index_dir": tmp_path / f"index-{name}", **overrides}
        srv = build_server(settings.model_copy(update=update))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()


def _retrieve(srv: EvomemHTTPServer, namespace: str, query: str) -> list[tuple[str, float]]:
    resp = httpx.post(srv.url + "/v1/retrieve", json={"query": query, "namespace": namespace}, timeout=30)
    assert resp.status_code == 200, resp.text
    return [(i["id"], round(i["score"], 6)) for i in resp.json()["insights"]]


def _queries_indexed(srv: EvomemHTTPServer) -> int:
    index = srv.service.runtime.index
    assert index is not None
    return index.count("query")


def _tiers(srv: EvomemHTTPServer) -> dict[str, int]:
    index = srv.service.runtime.index
    assert isinstance(index, EdgeIndex)
    return index.tiers()


def _report(writer: Memory, namespace: str, first: int, n: int) -> None:
    for i in range(first, first + n):
        writer.report(
            None,
            namespace=namespace,
            query=_query(i),
            status="resolved" if i % 4 else "failed",
            proposed_insight=f"Weigh the {TOPICS[i % len(TOPICS)]} before claim {i}.",
        )


def test_a_namespace_promoted_while_workers_and_the_service_run_serves_the_same_insights(
    settings: Settings, services: Any, redis_url: str, tmp_path: Path, redis_client: redis.Redis
) -> None:
    """Two retrieval services follow the same change feed: one promotes the namespace at 40 past
    queries, the other never does. Before and after the promotion (done by the first while a worker
    applies events and retrievals keep coming), both serve the same insights with the same scores."""
    ns, small = f"grow-{uuid.uuid4().hex[:8]}", f"small-{uuid.uuid4().hex[:8]}"
    promoting = services("promoting", index_promote_at=40)
    reference = services("reference", index_promote_at=1_000_000)
    workers = Workers(redis_url, tmp_path)
    workers.start(1)
    failures: list[str] = []
    stop = threading.Event()

    def keep_retrieving() -> None:  # the service answers throughout the promotion
        i = 0
        while not stop.is_set():
            resp = httpx.post(
                promoting.url + "/v1/retrieve", json={"query": _query(i), "namespace": ns}, timeout=30
            )
            if resp.status_code != 200:
                failures.append(resp.text)
            i += 1

    probes = [_query(i) for i in range(0, 60, 3)] + ["Verify the load of an unknown glider"]
    try:
        with Memory.open_local(settings, index=False) as writer:
            _report(writer, ns, 0, 30)
            _report(writer, small, 0, 5)
            wait_for(lambda: _queries_indexed(promoting) == 35, WAIT_S, "35 queries in the promoting index")
            wait_for(lambda: _queries_indexed(reference) == 35, WAIT_S, "35 queries in the reference index")
            assert _tiers(promoting)["promoted_namespaces"] == 0
            before = {q: _retrieve(promoting, ns, q) for q in probes}
            assert before == {q: _retrieve(reference, ns, q) for q in probes}
            assert any(before.values())
            retriever = threading.Thread(target=keep_retrieving)
            retriever.start()
            _report(writer, ns, 30, 30)  # past 40: promoted while the worker applies these
            wait_for(lambda: _queries_indexed(promoting) == 65, WAIT_S, "65 queries in the promoting index")
            wait_for(lambda: _queries_indexed(reference) == 65, WAIT_S, "65 queries in the reference index")
            stop.set()
            retriever.join()
    finally:
        stop.set()
        workers.stop()
    assert not failures
    tiers = _tiers(promoting)
    assert tiers["promoted_namespaces"] == 1 and tiers["shared_namespaces"] == 1
    assert _tiers(reference)["promoted_namespaces"] == 0
    after = {q: _retrieve(promoting, ns, q) for q in probes}
    assert after == {q: _retrieve(reference, ns, q) for q in probes}
    assert any(after.values()) and after != before  # the 30 new tasks taught it something
    assert {q: _retrieve(promoting, small, q) for q in probes} == {
        q: _retrieve(reference, small, q) for q in probes
    }
    metrics = httpx.get(promoting.url + "/metrics", timeout=10).text
    assert 'evomem_index_namespaces{tier="own"} 1' in metrics
    assert 'evomem_index_namespaces{tier="shared"} 1' in metrics


HOSTILE = [
    "x" * 4096,
    "租户-日本語-🚀",
    "../../../../etc/passwd",
    "/absolute/path",
    "a:b:{c}:d",
    "{}",
    "ns\\with\\backslashes",
    ".",
    "..",
    "",
]


@pytest.mark.parametrize("promote_at", [1000, 2])
def test_hostile_namespace_names_map_to_safe_shards(tmp_path: Path, promote_at: int) -> None:
    """Whatever a namespace is called, its queries land in a shard inside the store named by number
    or hash, it is served its own queries only, and the store opens again with every name as it was."""
    embedder = HashingEmbedder()
    root = tmp_path / "qdrant"
    index = EdgeIndex(root, "sparse", 0, promote_at=promote_at)
    try:
        for n, ns in enumerate(HOSTILE):
            points = []
            for i in range(3):
                text = f"claim {i} of tenant {n}"
                points.append(
                    (
                        QueryPoint(f"q{i}", ns, text, "resolved", 1, (f"ins-{n}",), ()),
                        embedder.embed_one(text),
                    )
                )
            index.write_queries(points)
        index.persist()
        tiers = index.tiers()
        assert tiers["shared_namespaces"] + tiers["promoted_namespaces"] == len(HOSTILE)
        assert tiers["promoted_namespaces"] == (len(HOSTILE) if promote_at == 2 else 0)
    finally:
        index.close()
    for path in root.rglob("*"):
        assert path.resolve().is_relative_to(root.resolve())
    names = {p.name for p in (root / "namespaces").iterdir()} if (root / "namespaces").exists() else set()
    assert all(len(name) == 32 and all(c in "0123456789abcdef" for c in name) for name in names)
    assert {p.name for p in (root / "shared").iterdir()} <= {str(i) for i in range(4)}
    again = EdgeIndex(root, "sparse", 0, promote_at=promote_at)
    try:
        for n, ns in enumerate(HOSTILE):
            hits = again.search_queries(embedder.embed_one(f"claim 1 of tenant {n}"), ns, 5)
            assert {h.id for h in hits} == {"q0", "q1", "q2"}
            assert {s for h in hits for s in h.supports} == {f"ins-{n}"}  # its own, never another's
    finally:
        again.close()


def _same_shard_as(namespace: str, prefix: str) -> str:
    for i in range(1000):
        candidate = f"{prefix}-{i}"
        if shared_shard_of(candidate, 4) == shared_shard_of(namespace, 4):
            return candidate
    raise AssertionError("no name found in the same shard")


#: the embedded store; a Qdrant server's adapter (qdrant-client's local mode: every namespace in
#: one collection, as on a server without shard keys), with cosine similarity: with IDF its
#: modifier counts every tenant's points (docs/guides/tenancy.md, tests/e2e/test_tiers_server.py)
_FLOODED = {"embedded": {}, "qdrant-server": {"qdrant_url": ":memory:", "similarity": "cosine"}}


@pytest.mark.parametrize("index", sorted(_FLOODED))
def test_a_flooding_tenant_is_held_to_its_quota_and_changes_nothing_its_shard_mates_are_served(
    settings: Settings, services: Any, redis_client: redis.Redis, index: str
) -> None:
    quiet = f"quiet-{uuid.uuid4().hex[:8]}"
    flood = _same_shard_as(quiet, f"flood-{uuid.uuid4().hex[:6]}")
    srv = services("flood", quota_events_per_minute=25, **_FLOODED[index])
    assert isinstance(srv.service.runtime.index, EdgeIndex) == (index == "embedded")
    with Memory.open_local(settings, index=False) as writer:
        _report(writer, quiet, 0, 12)
        writer.consolidate()
        wait_for(lambda: _queries_indexed(srv) == 12, WAIT_S, "the quiet tenant's queries in the index")
        probes = [_query(i) for i in range(12)]
        before = {q: _retrieve(srv, quiet, q) for q in probes}
        assert any(before.values())
        left = WINDOW_S - time.time() % WINDOW_S
        if left < 30:  # the 100 events in one quota window: one that ends midway admits 25 twice
            time.sleep(left + 0.5)
        statuses = []
        for i in range(100):  # the same words as the quiet tenant's: the same dimensions, but its own
            event = {
                "namespace": flood,
                "query": _query(i),
                "status": "failed",
                "proposed_insight": f"Flood {i}.",
            }
            statuses.append(httpx.post(srv.url + "/v1/events", json=event, timeout=30).status_code)
        assert statuses.count(202) + statuses.count(200) == 25 and statuses.count(429) == 75
        writer.consolidate()
        wait_for(
            lambda: _queries_indexed(srv) == 12 + 25, WAIT_S, "the flood's admitted queries in the index"
        )
    assert {q: _retrieve(srv, quiet, q) for q in probes} == before
    if index == "embedded":
        assert _tiers(srv)["shared_namespaces"] == 2
