"""A master of a local Redis Cluster SIGKILLed in the middle of a run, with real worker processes
consolidating: its replica takes over, the pipeline recovers on its own, and the final graph is the
serial model's — nothing reported is lost, nothing acknowledged is unapplied, nothing applied twice.

The workers wait for one replica to acknowledge an event's edits before they acknowledge the event
(``EVOMEM_REDIS_WAIT_REPLICAS=1``) and reports wait for one replica too: that is what makes the
writes a promoted replica holds a superset of what was acknowledged. Killing the master that holds
the namespace's slot tests the edits; killing the master of the event stream tests the reports and
the consumer group."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from evomem import Settings, keys
from evomem.adapters.redis.connection import Client, ClusterClient, connect
from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.adapters.redis.local_cluster import LocalCluster
from evomem.errors import TransientError
from schemas import TaskEvent
from tests.support.pipeline_helpers import (
    Workers,
    applied_count,
    event,
    graph_state,
    hot_events,
    serial_model,
    wait_for,
)

pytestmark = pytest.mark.slow
MODEL_SETTINGS = Settings(data_dir=Path("/nonexistent"), archive_policy="immediate")
DURABLE = {"EVOMEM_REDIS_WAIT_REPLICAS": "1", "EVOMEM_REDIS_WAIT_TIMEOUT_MS": "2000"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    own = LocalCluster(tmp_path / "cluster").start()  # its own: a master of it dies
    try:
        yield own
    finally:
        own.stop()


def namespace_away_from_the_stream(cluster: LocalCluster) -> str:
    """A namespace whose slot is on another master than the event stream's."""
    stream_master = cluster.master_of(keys.EVENTS_STREAM)
    return next(
        ns
        for ns in (f"fleet-{i}" for i in range(100))
        if cluster.master_of(keys.ns_prefix(ns)) != stream_master
    )


def publish(stream: EventStream, e: TaskEvent) -> None:
    """An agent's report: retried until Redis takes it (the same event twice is one event)."""
    wait_for(lambda: _published(stream, e), 60, f"event {e.event_id} published", every=0.1)


def _published(stream: EventStream, e: TaskEvent) -> bool:
    try:
        stream.publish(e)
    except TransientError:
        return False
    return True


def consolidated(client: Client, total: int) -> bool:
    try:
        info = EventStream(client).info()
        return applied_count(client) >= total and info["pending"] == 0 and info["lag"] == 0
    except TransientError:
        return False


def run_with_a_failover(
    cluster: LocalCluster, tmp_path: Path, server_url: str, victim_key: str, ns: str
) -> None:
    client = connect(cluster.url)
    stream = EventStream(client, wait_replicas=1, wait_timeout_ms=2000)
    workers = Workers(cluster.url, tmp_path, {**DURABLE, "EVOMEM_BROKER_URL": server_url})
    rng = random.Random(11)
    try:
        workers.start(2, concurrency=2)
        seeds = [
            event(ns, f"seed task {i}", "resolved", proposed_insight=f"Hot insight number {i}.")
            for i in range(8)
        ]
        for e in seeds:
            publish(stream, e)
        wait_for(lambda: consolidated(client, len(seeds)), 60, "the seed events", every=0.1)
        hot = sorted(RedisGraphStore(client).insight_ids(ns))
        events = hot_events(rng, ns, hot, 600)
        for e in events[:300]:
            publish(stream, e)
        wait_for(lambda: applied_count(client) > len(seeds) + 50, 60, "a run under way")
        victim = cluster.master_of(victim_key)
        cluster.kill(victim)  # mid-run: workers hold batches, reports keep coming
        for e in events[300:]:
            publish(stream, e)
        total = len(seeds) + len(events)
        try:
            wait_for(lambda: consolidated(client, total), 180, "every event consolidated", every=0.2)
        except AssertionError:
            raise AssertionError(diagnosis(client, workers, total)) from None
        assert cluster.master_of(victim_key) != victim, "a replica took the slot over"
        felt = [
            p for p in workers.log_dir.glob("worker-*.log") if "unreachable" in p.read_text(errors="replace")
        ]
        assert felt, "the workers met the dead master mid-run"
        model = serial_model([*seeds, *events], MODEL_SETTINGS)
        assert graph_state(RedisGraphStore(client), ns) == graph_state(model, ns)
        assert applied_count(client) == total
        letters = EventStream(client).dlq(1000)
        assert not letters, Counter(x["reason"][:120] for x in letters)
        assert not list(client.scan_iter(match="em:{*}:outbox:*")), "every outbox was sent"
    finally:
        workers.stop()
        client.close()


def diagnosis(client: Client, workers: Workers, total: int) -> str:
    errors = Counter(
        line.split('"error": ')[1][:160]
        for p in sorted(workers.log_dir.glob("worker-*.log"))
        for line in p.read_text(errors="replace").splitlines()
        if '"error": ' in line
    )
    letters = Counter(x["reason"][:120] for x in EventStream(client).dlq(1000))
    return (
        f"applied {applied_count(client)} of {total}; stream {EventStream(client).info()}\n"
        f"dead letters {letters}\nworker errors {errors.most_common(8)}"
    )


def test_the_namespace_master_killed_mid_run(cluster: LocalCluster, tmp_path: Path, server_url: str) -> None:
    ns = namespace_away_from_the_stream(cluster)
    run_with_a_failover(cluster, tmp_path, server_url, keys.ns_prefix(ns), ns)


def test_the_event_stream_master_killed_mid_run(
    cluster: LocalCluster, tmp_path: Path, server_url: str
) -> None:
    ns = namespace_away_from_the_stream(cluster)
    run_with_a_failover(cluster, tmp_path, server_url, keys.EVENTS_STREAM, ns)


def test_a_killed_default_node_does_not_stop_the_workers_reading_events(cluster: LocalCluster) -> None:
    """redis-py finds the keys of XREADGROUP on its default node. When a failover kills that node, a
    read may fail once; the next one reads the events (every read failed for good before)."""
    client = connect(cluster.url)
    try:
        stream = EventStream(client)
        published = event("fleet-0", "a task before the failover", "resolved")
        publish(stream, published)
        stream_master = cluster.master_of(keys.EVENTS_STREAM)
        victim = next(
            port for port in (cluster.master_of(f"key-{i}") for i in range(100)) if port != stream_master
        )
        assert isinstance(client, ClusterClient)
        client.replace_default_node(client.get_node(host="127.0.0.1", port=victim))
        cluster.kill(victim)
        cluster.wait_healthy()
        failures = 0
        while failures < 3:
            try:
                entries = stream.read("reader", 10)
                break
            except TransientError:
                failures += 1
        assert failures < 3, "the reads kept failing on the dead default node"
        assert [TaskEvent.model_validate_json(e.raw or b"").event_id for e in entries] == [published.event_id]
    finally:
        client.close()
