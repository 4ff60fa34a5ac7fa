"""Several retrieval processes on one port (``evomem serve --workers 2``), each with its own embedded
index replica following the change feed: once each has caught up, they serve the same insights for
the same queries; a replica that falls behind says ``stale``."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from evomem import Memory, Settings, keys
from evomem.adapters.redis.changes import cursor_order
from evomem.runtime import prepare_replicas, replica_dirs
from evomem.testing.serve import service_process
from tests.support.pipeline_helpers import child_env

QUERIES = [f"Verify claim {n} about the fleet's vehicles" for n in range(12)]


def _report_and_consolidate(mem: Memory, namespace: str, first: int, n: int) -> None:
    for i in range(first, first + n):
        mem.report(
            None,
            namespace=namespace,
            query=QUERIES[i % len(QUERIES)],
            status="resolved",
            proposed_insight=f"Lesson {i}: check the vehicle class before claim {i}.",
        )
    mem.consolidate()


class _Conn:
    """One kept-alive connection: it stays with the process that accepted it."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.http = http.client.HTTPConnection(host, int(port), timeout=30)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        self.http.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = self.http.getresponse()
        return resp.status, json.loads(resp.read())

    def health(self) -> dict[str, Any]:
        status, body = self.call("GET", "/healthz")
        assert status == 200, body
        return dict(body)


@pytest.fixture
def served(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> Iterator[tuple[str, Settings]]:
    """``evomem serve --workers 2`` as a real process on the session's Redis; its URL."""
    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_url)
    with Memory.open_local(settings, index=False) as writer:
        _report_and_consolidate(writer, "alpha", 0, 6)  # before the processes start: the bootstrap
    env = child_env(EVOMEM_DATA_DIR=str(settings.data_dir), EVOMEM_REDIS_URL=redis_url)
    args = ["-m", "evomem.cli", "serve", "--workers", "2", "--port", "0"]
    with service_process(args, env, what="evomem serve --workers 2") as service:
        yield service.url, settings
    assert service.returncode == 0


def _one_connection_per_process(url: str, processes: int) -> dict[int, _Conn]:
    """Connections opened until every process has accepted one (which one accepts is the kernel's)."""
    found: dict[int, _Conn] = {}
    for _ in range(500):
        conn = _Conn(url)
        pid = int(conn.health()["replica"]["pid"])
        if pid in found:
            conn.http.close()
        else:
            found[pid] = conn
        if len(found) == processes:
            return found
    raise AssertionError(f"only {len(found)} of {processes} processes accepted a connection in 500 tries")


def _caught_up(conn: _Conn, newest: str, timeout_s: float = 60) -> dict[str, Any]:
    """The health of ``conn``'s process once its replica's cursor has reached ``newest``."""
    deadline = time.monotonic() + timeout_s
    while True:
        health = conn.health()
        if cursor_order(health["replica"]["cursor"]) >= cursor_order(newest):
            return health
        assert time.monotonic() < deadline, f"replica still at {health['replica']} after {timeout_s} s"


def test_two_processes_serve_the_same_insights_once_projection_has_caught_up(
    served: tuple[str, Settings], redis_client: redis.Redis
) -> None:
    url, settings = served
    conns = _one_connection_per_process(url, 2)
    try:
        _same_answers(conns, settings, redis_client)
    finally:
        for conn in conns.values():
            conn.http.close()


def _same_answers(conns: dict[int, _Conn], settings: Settings, redis_client: redis.Redis) -> None:
    with Memory.open_local(settings, index=False) as writer:  # after the start: the change feed
        _report_and_consolidate(writer, "alpha", 6, 6)
    newest = redis_client.xrevrange(keys.CHANGES_STREAM, count=1)[0][0].decode()
    healths = [_caught_up(c, newest) for c in conns.values()]
    assert len({h["replica"]["index"] for h in healths}) == 2  # each its own store
    assert all(h["stale"] is False for h in healths)
    answers: dict[int, list[Any]] = {}
    for pid, conn in conns.items():
        answers[pid] = []
        for q in QUERIES:
            status, body = conn.call("POST", "/v1/retrieve", {"query": q, "namespace": "alpha"})
            assert status == 200 and body["stale"]["stale"] is False
            answers[pid].append([(i["id"], round(i["score"], 9)) for i in body["insights"]])
    first, second = answers.values()
    assert first == second
    served_ids = {i for answer in first for i, _ in answer}
    with Memory.open_local(settings, index=False) as reader:
        texts = {n.text for n in reader.runtime.graph.insights(list(served_ids)).values()}
    assert any(t.startswith("Lesson 1") for t in texts)  # written before the start: bootstrapped
    assert any(t.startswith(f"Lesson {n}") for n in range(6, 12) for t in texts)  # followed


def test_a_replica_is_copied_when_it_lacks_the_store_and_kept_when_close_behind(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_url)
    with Memory.open_local(settings, index=False) as writer:
        _report_and_consolidate(writer, "alpha", 0, 4)
    first = prepare_replicas(settings, 2)
    second_dir = replica_dirs(settings, 2)[1]
    assert first["copied"] == [str(second_dir)] and first["kept"] == []
    with Memory.open_local(settings, index=False) as writer:
        _report_and_consolidate(writer, "alpha", 4, 2)
    again = prepare_replicas(settings, 2)
    assert again["copied"] == [] and again["kept"] == [str(second_dir)]
    (second_dir / "LAYOUT").write_text("2\n")  # as an older evomem left it: it could not be opened
    assert prepare_replicas(settings, 2)["copied"] == [str(second_dir)]
    assert (second_dir / "LAYOUT").read_text() == (replica_dirs(settings, 1)[0] / "LAYOUT").read_text()
    # the copy, opened as its own process opens it, serves what the first replica serves
    replica = settings.model_copy(update={"index_dir": second_dir})
    with Memory.open_local(settings) as one, Memory.open_local(replica) as two:
        for q in QUERIES[:6]:
            a, b = one.retrieve(q, "alpha"), two.retrieve(q, "alpha")
            assert [i.id for i in a.insights] == [i.id for i in b.insights] and a.insights


def test_a_replica_behind_by_more_than_the_setting_answers_stale(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    from evomem.service.api import RetrieveRequest
    from evomem.service.auth import OPEN, TokenAuth
    from evomem.service.retrieval_service import RetrievalService

    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_url, stale_after_s=0.05)
    with Memory.open_local(settings) as mem, Memory.open_local(settings, index=False) as writer:
        service = RetrievalService(mem.runtime, TokenAuth(None))
        _report_and_consolidate(writer, "alpha", 0, 2)  # nothing follows: mem's replica is behind
        deadline = time.monotonic() + 30
        while not service.health()[1]["stale"]:  # the change ages past stale_after_s
            assert time.monotonic() < deadline
            service._stale = (0.0, 0.0)
        body = service.retrieve(OPEN, RetrieveRequest(query=QUERIES[0], namespace="alpha"))
        assert body.stale.stale and body.stale.projector_lag_s > 0.05
        assert mem.projector is not None and mem.projector.run_once().changes > 0
        service._stale = (0.0, 0.0)
        assert service.health()[1]["stale"] is False


def test_a_process_that_dies_is_started_again_on_its_own_replica(served: tuple[str, Settings]) -> None:
    url, _ = served
    conns = _one_connection_per_process(url, 2)
    indexes = {pid: c.health()["replica"]["index"] for pid, c in conns.items()}
    for conn in conns.values():
        conn.http.close()
    victim = min(indexes)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    seen: dict[int, str] = {}
    while not (len(seen) == 2 and victim not in seen):  # new connections, until the new process takes one
        assert time.monotonic() < deadline, f"no process took the place of {victim}: {seen}"
        conn = _Conn(url)
        try:
            seen[int(conn.health()["replica"]["pid"])] = conn.health()["replica"]["index"]
        finally:
            conn.http.close()
        seen.pop(victim, None)
    assert sorted(seen.values()) == sorted(indexes.values())  # the new one holds the dead one's store
