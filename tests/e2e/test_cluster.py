"""evomem on a real local Redis Cluster (three masters, three replicas): the same memory as on one
server, every script in one slot, the writes outside a namespace's slot delivered through its
outbox even when the process dies before sending it, and what the cluster refuses said clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from evomem import Memory, Settings, keys
from evomem.adapters.llm.ratelimit import RateLimiter
from evomem.adapters.redis.connection import Client, ClusterClient, cluster_seeds, connect
from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.adapters.redis.local_cluster import LocalCluster
from evomem.adapters.redis.namespace_settings import NamespaceSettings
from evomem.errors import ConfigError, TransientError
from evomem.pipeline.export import export
from evomem.runtime import broker_redis_url
from schemas import TaskEvent
from tests.support.pipeline_helpers import event, graph_state

#: Namespaces whose hash slots fall on all three masters (checked by a test below).
NAMESPACES = [f"team-{i}" for i in range(9)]


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster) -> Iterator[Client]:
    client = connect(redis_cluster.url)
    client.flushdb()  # every master
    yield client
    client.close()


def cluster_settings(tmp_path: Path, url: str, **extra: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", redis_url=url, archive_policy="immediate", **extra)


def fleet_events() -> list[TaskEvent]:
    """Events over several namespaces: new insights, then verdicts on them (KEEP, ARCHIVE, REVISE)."""
    lessons = [
        "Check the units of every quantity before comparing two numbers.",
        "Search for the entity's page first when a claim names a person.",
        "Stack the blocks from the bottom, clearing each target before moving.",
    ]
    return [
        event(ns, f"seed {i} of {ns}", "resolved", proposed_insight=f"{lesson} ({ns})")
        for ns in NAMESPACES
        for i, lesson in enumerate(lessons)
    ]


def verdicts(mem: Memory, ns: str) -> list[TaskEvent]:
    graph = mem.runtime.graph
    nodes = graph.insights(graph.insight_ids(ns))
    ids = sorted(nodes, key=lambda i: nodes[i].text)  # ids are random: the same insights by text
    return [
        event(ns, f"judged task of {ns}", "failed", insight_feedback={ids[0]: "harmful"}),
        event(ns, f"kept task of {ns}", "resolved", insight_feedback={ids[1]: "helpful"}),
        event(
            ns,
            f"revised task of {ns}",
            "failed",
            insight_feedback={ids[2]: {"verdict": "partial", "revised_text": f"Revised lesson of {ns}."}},
        ),
    ]


def run_fleet(settings: Settings) -> Memory:
    mem = Memory.open(settings)
    for e in fleet_events():
        mem.report(e)
    mem.consolidate()
    for ns in NAMESPACES:
        for e in verdicts(mem, ns):
            mem.report(e)
    mem.consolidate()
    return mem


def changes_of(client: Client) -> list[tuple[str, str, str, int]]:
    out = []
    for _id, fields in client.xrange(keys.CHANGES_STREAM):
        f = {k.decode(): v.decode() for k, v in fields.items()}
        out.append((f["kind"], f["ns"], f["id"], int(f["version"])))
    return out


def history_of(client: Client) -> list[tuple[str, str, str, str | None]]:
    out = []
    for _id, fields in client.xrange(keys.HISTORY_STREAM):
        r = json.loads(fields[b"record"])
        out.append((fields[b"ns"].decode(), r["event_id"], r["op"], r["outcome"]))
    return out


def test_the_namespaces_of_the_tests_fall_on_every_master(redis_cluster: LocalCluster) -> None:
    """So that a script touching a key of another slot would meet a node that does not hold it."""
    masters = {redis_cluster.master_of(keys.ns_prefix(ns)) for ns in NAMESPACES}
    globals_ = {
        redis_cluster.master_of(k) for k in (keys.CHANGES_STREAM, keys.INSIGHT_DIRECTORY, keys.EVENTS_STREAM)
    }
    assert len(masters) == 3
    assert len(globals_) >= 2


def test_a_cluster_holds_the_same_memory_as_one_server(
    redis_cluster: LocalCluster, cluster_client: Client, redis_client: Any, redis_url: str, tmp_path: Path
) -> None:
    """The same events, consolidated on one server and on the cluster, leave the same graph in every
    namespace, the same changes on the feed (per node and version) and the same history."""
    single = run_fleet(cluster_settings(tmp_path / "one", redis_url))
    clustered = run_fleet(cluster_settings(tmp_path / "cluster", redis_cluster.url))
    try:
        for ns in NAMESPACES:
            one = graph_state(single.runtime.graph, ns)
            many = graph_state(clustered.runtime.graph, ns)
            assert _without_ids(one) == _without_ids(many), ns
        assert sorted(single.runtime.graph.namespaces()) == sorted(clustered.runtime.graph.namespaces())
        assert _shape(changes_of(redis_client)) == _shape(changes_of(cluster_client))
        assert sorted(_shape_history(history_of(redis_client))) == sorted(
            _shape_history(history_of(cluster_client))
        )
        assert not list(cluster_client.scan_iter(match="em:{*}:outbox:*")), "every outbox was sent"
        # inspection by insight id goes through the id directory, in its own slot
        some = sorted(clustered.runtime.graph.insight_ids(NAMESPACES[4]))[0]
        node = clustered.insight(some)
        assert node.namespace == NAMESPACES[4] and node.history
    finally:
        single.close()
        clustered.close()


def _without_ids(state: dict[str, Any]) -> list[Any]:
    """Insight and query ids are random per run; what the nodes hold is compared."""
    return sorted((text, st, len(pos), len(neg), v) for text, st, pos, neg, v in state["insights"].values())


def _shape(changes: list[tuple[str, str, str, int]]) -> list[tuple[str, str, int]]:
    return sorted((kind, ns, version) for kind, ns, _id, version in changes)


def _shape_history(history: list[tuple[str, str, str, str | None]]) -> list[tuple[str, str, str | None]]:
    return [(ns, op, outcome) for ns, _e, op, outcome in history]


class _DiesBeforeTheOutbox(RedisGraphStore):
    """A process that applies a batch and dies before writing its outbox."""

    def _send_outboxes(self, applied: Any) -> None:
        raise TransientError("killed")


def test_an_outbox_left_by_a_dead_process_is_sent_by_the_replay(
    redis_cluster: LocalCluster, cluster_client: Client, tmp_path: Path
) -> None:
    """The edits are committed in the namespace's slot, the process dies before the change feed,
    history and id directory are written: the events stay unacknowledged, and their replay (no edit
    applied twice) sends what was left, once."""
    settings = cluster_settings(tmp_path, redis_cluster.url, redis_wait_replicas=1)
    with Memory.open(settings) as mem:
        for i in range(5):
            mem.report(event("team-1", f"task {i}", "resolved", proposed_insight=f"Lesson number {i}."))
        real = mem.runtime.graph
        dying = _DiesBeforeTheOutbox(cluster_client)
        mem.runtime.consolidator.graph = dying
        with pytest.raises(TransientError):
            mem.consolidate()
        assert len(real.insight_ids("team-1")) == 5, "the edits are committed"
        assert len(list(cluster_client.scan_iter(match="em:{*}:outbox:*"))) == 5
        assert cluster_client.xlen(keys.CHANGES_STREAM) == 0
        assert mem.runtime.events.info()["pending"] == 5, "and nothing is acknowledged"
        delivered = cluster_client.xpending_range(keys.EVENTS_STREAM, keys.CONSUMER_GROUP, "-", "+", 10)
        assert {int(p["times_delivered"]) for p in delivered} == {0}, "an outage costs no delivery"
        mem.runtime.consolidator.graph = real
        report = mem.consolidate()
        assert report.replayed == 5 and report.applied == 0
        assert not list(cluster_client.scan_iter(match="em:{*}:outbox:*"))
        assert mem.runtime.events.info()["pending"] == 0
        assert len(history_of(cluster_client)) == 5
        ids = real.insight_ids("team-1")
        assert {c[2] for c in changes_of(cluster_client) if c[0] == "insight"} == ids
        assert set(real.namespace_of(ids).values()) == {"team-1"}
        assert mem.retrieve("task 3", "team-1").insights, "and the projector served them"
        # with REDIS_WAIT_REPLICAS=1 every master written was waited on: the stream's for the reports,
        # the namespace's for the edits, those of the shared keys for the outbox (a barrier key per
        # master waited on)
        shared = (keys.CHANGES_STREAM, keys.HISTORY_STREAM, keys.INSIGHT_DIRECTORY, keys.NAMESPACES)
        written = (keys.EVENTS_STREAM, keys.ns_prefix("team-1"), *shared)
        barriers = [b.decode() for b in cluster_client.scan_iter(match="em:barrier:*")]
        assert {redis_cluster.master_of(k) for k in written} == {redis_cluster.master_of(b) for b in barriers}


def test_dead_letters_replay_settings_and_rate_limits_work_across_slots(
    redis_cluster: LocalCluster, cluster_client: Client, tmp_path: Path
) -> None:
    stream = EventStream(cluster_client)
    stream.ensure_group()
    bad = stream.publish_raw(b"{not json")
    settings = cluster_settings(tmp_path, redis_cluster.url)
    with Memory.open(settings) as mem:
        report = mem.consolidate()
        assert report.dead_lettered == 1
        (letter,) = stream.dlq()
        assert letter["source_id"] == bad
        assert stream.info()["pending"] == 0
        ok = event("team-2", "a fixed task", "resolved", proposed_insight="A fixed lesson.")
        fixed_id = cluster_client.xadd(keys.DLQ_STREAM, {"event": ok.model_dump_json(), "reason": "x"})
        (again,) = stream.replay([fixed_id.decode()])
        assert again and stream.dead_letter_entry(fixed_id.decode()) is None
        assert mem.event(str(ok.event_id)).state == "queued"  # its state marker: another slot
        assert mem.consolidate().applied == 1
        assert mem.event(str(ok.event_id)).state == "applied"
        reported = mem.report(status="failed", namespace="team-3", query="a task", proposed_insight="L.")
        assert mem.event(reported).state == "queued"
        dead = str(uuid.uuid4())
        stream.publish_raw(json.dumps({"event_id": dead, "namespace": "team-4", "query": "q", "status": "?"}))
        mem.consolidate()
        assert (mem.event(dead).state, mem.event(dead).field) == ("dead-lettered", "status")
    overrides = NamespaceSettings(cluster_client, settings)
    overrides.set("team-5", {"budget": 7})
    assert overrides.all()["team-5"].budget == 7
    limiter = RateLimiter(cluster_client, "https://llm.example/v1|model", 60, 100_000)
    assert limiter.try_acquire(100) == 0.0
    assert limiter.try_acquire(10**6) > 0, "the tokens bucket is shared: past its budget, a wait"


def test_a_cluster_url_needs_its_own_broker(
    redis_cluster: LocalCluster, redis_url: str, tmp_path: Path
) -> None:
    settings = cluster_settings(tmp_path, redis_cluster.url)
    with pytest.raises(ConfigError, match="EVOMEM_BROKER_URL"):
        broker_redis_url(settings)
    assert broker_redis_url(cluster_settings(tmp_path, redis_cluster.url, broker_url=redis_url)) == redis_url
    with pytest.raises(ValueError, match="cannot be a Redis Cluster"):
        cluster_settings(tmp_path, redis_url, broker_url=redis_cluster.url)
    client = connect(redis_cluster.url)
    assert isinstance(client, ClusterClient)
    client.close()
    with pytest.raises(TransientError, match="unreachable"):
        connect("redis+cluster://127.0.0.1:1")


def test_a_cluster_url_may_name_several_nodes() -> None:
    assert cluster_seeds("redis://u:p@h1:7000,h2:7001,[::1]:7002/0?ssl_cert_reqs=none") == (
        "redis://u:p@h1:7000/0?ssl_cert_reqs=none",
        [("h2", 7001), ("::1", 7002)],
    )
    assert cluster_seeds("rediss://h1:7000,h2") == ("rediss://h1:7000", [("h2", 6379)])
    assert cluster_seeds("redis://h1:7000") == ("redis://h1:7000", [])
    with pytest.raises(ConfigError, match="not host:port: 'h2:seventy'"):
        cluster_seeds("redis://h1:7000,h2:seventy")


def test_a_process_connects_while_the_first_node_of_its_url_is_down(redis_cluster: LocalCluster) -> None:
    """What a worker restarted after the master its URL named died meets: the next node answers."""
    alive = redis_cluster.running()[0]
    client = connect(f"redis+cluster://127.0.0.1:1,127.0.0.1:{alive}")
    try:
        assert client.ping()
        assert len(client.get_primaries()) == redis_cluster.masters  # type: ignore[attr-defined]
    finally:
        client.close()


def test_a_memory_moves_from_one_server_to_a_cluster_by_export_and_import(
    redis_cluster: LocalCluster, cluster_client: Client, redis_client: Any, redis_url: str, tmp_path: Path
) -> None:
    """The key layout is the same: an export of one server imports into a cluster, node for node, and
    the cluster's projector serves it."""
    single = run_fleet(cluster_settings(tmp_path / "one", redis_url))
    try:
        lines = [json.dumps(r) for r in export(single.runtime.graph, NAMESPACES)]
        expected = {ns: graph_state(single.runtime.graph, ns) for ns in NAMESPACES}
    finally:
        single.close()
    with Memory.open(cluster_settings(tmp_path / "cluster", redis_cluster.url)) as mem:
        counts = mem.runtime.import_records(lines)
        assert counts["insights"] == sum(len(s["insights"]) for s in expected.values())
        assert mem.runtime.import_records(lines)["insights"] == 0, "importing again changes nothing"
        for ns in NAMESPACES:
            assert graph_state(mem.runtime.graph, ns) == expected[ns]
        mem.consolidate()  # nothing to apply; brings the index up to the change feed
        assert mem.retrieve("seed 1 of team-3", "team-3").insights


def test_a_worker_on_a_cluster_without_a_broker_stops_with_what_to_set(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Not Celery's silent fallback to a broker on localhost: one line naming the setting."""
    env = {**os.environ, "EVOMEM_REDIS_URL": redis_cluster.url, "EVOMEM_DATA_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "evomem.cli", "worker", "-c", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode != 0
    assert "EVOMEM_BROKER_URL" in out.stderr.strip().splitlines()[-1]


def test_every_script_call_stays_in_the_slot_of_its_namespace(
    redis_cluster: LocalCluster, cluster_client: Client, tmp_path: Path
) -> None:
    """Redis 6.2 refuses a script's key only when another node holds it; a cluster that moves slots
    needs more: every key a script touches in the slot of the keys it declared. Watched on every
    master (MONITOR), each command the scripts run while one namespace is reported on and
    consolidated (ADD, KEEP, ARCHIVE, REVISE, the query links) hashes to that namespace's slot."""
    masters = sorted({redis_cluster.master_of(keys.ns_prefix(ns)) for ns in NAMESPACES})
    seen: dict[int, list[tuple[str, str]]] = {p: [] for p in masters}

    def watch(port: int) -> None:
        with redis.Redis(host="127.0.0.1", port=port).monitor() as m:
            ready.release()
            for cmd in m.listen():
                seen[port].append((cmd["client_type"], cmd["command"]))
                if cmd["command"] == "ECHO stop":
                    return

    ready = threading.Semaphore(0)
    threads = [threading.Thread(target=watch, args=(p,), daemon=True) for p in masters]
    for t in threads:
        t.start()
    for _ in threads:
        ready.acquire()
    nodes = [redis_cluster.node(p) for p in masters]
    with Memory.open(cluster_settings(tmp_path, redis_cluster.url)) as mem:
        for ns in NAMESPACES:
            for node in nodes:
                node.echo(f"mark {ns}")
            for e in fleet_events():
                if e.namespace == ns:
                    mem.report(e)
            mem.consolidate()
            for e in verdicts(mem, ns):
                mem.report(e)
            mem.consolidate()
    for node in nodes:
        node.echo("stop")
    for t in threads:
        t.join(timeout=60)
    checked = 0
    for port, commands in seen.items():
        current = None
        for client, command in commands:
            if client != "lua":
                if command.startswith("ECHO mark "):
                    current = command.removeprefix("ECHO mark ")
                continue
            assert current is not None, f"a script ran outside the test on {port}: {command}"
            touched = command.split()[1:3] if command.startswith("SUNIONSTORE") else command.split()[1:2]
            for key in touched:
                assert key_slot(key.encode()) == key_slot(keys.ns_prefix(current).encode()), (
                    current,
                    command,
                )
                checked += 1
    assert checked > 500, "the scripts' commands were seen"
