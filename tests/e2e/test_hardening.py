"""One tenant cannot break the memory for everyone, and no input crashes a tool: the embedded Redis
outlives a process that others still use, consolidation reclaims what a dead consumer left, dead
letters of any bytes are shown and replayed, the projector survives its errors and health says so,
the CLI explains instead of printing tracebacks, the SDK raises only its own errors. Real processes
where the point is a process (the service, a worker, the CLI)."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from evomem import EvomemError, InvalidEventError, Memory, NotFoundError, Settings, StoreError, keys
from evomem.adapters.redis.connection import EmbeddedRedis, connect
from evomem.adapters.redis.events import EventStream
from tests.support.pipeline_helpers import child_env, wait_for

CLI = [sys.executable, "-m", "evomem.cli"]


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Serve:
    """``evomem serve`` as a process, on port 0; its URL comes from DATA_DIR/run/service.url."""

    def __init__(self, data_dir: Path, log: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.url_file = data_dir / "run" / "service.url"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*CLI, "serve", "--port", "0"],
                env=child_env(EVOMEM_DATA_DIR=str(data_dir), **env),
                stdout=subprocess.DEVNULL,
                stderr=out,
            )
        wait_for(lambda: self.url_file.exists() or self.proc.poll() is not None, 60, "the service to start")
        assert self.proc.poll() is None, log.read_text()
        self.url = self.url_file.read_text().strip()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def test_a_service_that_cannot_start_leaves_no_redis_and_no_traceback(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*CLI, "serve", "--port", str(port)],
            env=child_env(EVOMEM_DATA_DIR=str(data)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert "in use" in result.stderr and "Traceback" not in result.stderr
    assert not EmbeddedRedis(data).running()


def test_a_memory_closing_stops_the_embedded_redis_only_when_it_was_the_last_user(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    first = Memory.open_local(settings, index=False)
    second = Memory.open_local(settings, index=False)
    first.close()
    assert EmbeddedRedis(settings.data_dir).running()  # the second one still uses it
    second.report(None, namespace="a", query="q", status="resolved")
    second.close()
    assert not EmbeddedRedis(settings.data_dir).running()  # nobody left: no orphan redis-server


# -- item 4: consolidate reclaims what a dead consumer left ----------------------------------------
def test_consolidate_reclaims_events_a_dead_consumer_left_pending(
    settings: Settings, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    with Memory.open_local(settings, index=False) as mem:
        for n in range(3):
            mem.report(None, namespace="ops", query=f"Task {n}", status="resolved", proposed_insight=f"L{n}.")
        mem.stream.ensure_group()
    # a consumer on a host that then died: XREADGROUP ... deadhost-1 ... '>' and never an XACK
    redis_client.xreadgroup(keys.CONSUMER_GROUP, "deadhost-1", {keys.EVENTS_STREAM: ">"}, count=10)

    def idle_enough() -> bool:
        pending = redis_client.xpending_range(keys.EVENTS_STREAM, keys.CONSUMER_GROUP, "-", "+", 10)
        return len(pending) == 3 and all(p["time_since_delivered"] >= 200 for p in pending)

    wait_for(idle_enough, 10, "the dead consumer's entries to be idle past EVOMEM_CLAIM_IDLE_MS")
    result = subprocess.run(
        [*CLI, "consolidate", "--json"],
        env=child_env(
            EVOMEM_REDIS_URL=redis_url,
            EVOMEM_DATA_DIR=str(tmp_path / "cli"),
            EVOMEM_CLAIM_IDLE_MS="200",
            EVOMEM_BATCH_TIME_LIMIT_S="0.1",
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["events"] == 3
    assert EventStream(redis_client).info()["pending"] == 0


# -- item 6 and the Low list: dead letters of any bytes, entries without an event ------------------
def test_dead_letters_holding_any_bytes_are_listed_shown_and_replayed_as_they_were(
    settings: Settings, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    raw = b'{"namespace":"a","query":"\xff","status":"failed"}'
    redis_client.xadd(keys.EVENTS_STREAM, {"event": raw})
    redis_client.xadd(keys.EVENTS_STREAM, {"foo": "bar"})  # a foreign publisher's entry, no "event"
    with Memory.open_local(settings, index=False) as mem:
        assert mem.consolidate().dead_lettered == 2
    env = child_env(EVOMEM_REDIS_URL=redis_url, EVOMEM_DATA_DIR=str(tmp_path / "cli"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
        return result

    assert "no 'event' field" in cli("dlq", "list").stdout
    letters = json.loads(cli("dlq", "list", "--json").stdout)
    reasons = {d["reason"] for d in letters}
    assert any("no 'event' field" in r and "'foo'" in r for r in reasons)
    assert not any("trimmed" in r for r in reasons)
    (bad,) = [d for d in letters if d["event"]]
    assert "\\xff" in json.loads(cli("dlq", "show", bad["id"]).stdout)["event"]
    assert "replayed 1 event(s)" in cli("dlq", "replay", "--all").stdout
    replayed = redis_client.xrange(keys.EVENTS_STREAM)[-1][1][b"event"]
    assert replayed == raw  # the bytes as they were published, not a decoded copy


# -- item 8: a supervised projector, and health that tells -----------------------------------------
def test_the_service_reports_a_failing_projector_as_503_and_recovers_by_itself(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    serve = Serve(tmp_path / "data", tmp_path / "serve.log", EVOMEM_REDIS_URL=redis_url)
    try:
        assert _get(serve.url + "/healthz")[0] == 200
        # the change feed under the projector becomes a key of another type: every read of it fails
        redis_client.delete(keys.CHANGES_STREAM)
        redis_client.set(keys.CHANGES_STREAM, "not a stream")
        wait_for(lambda: _get(serve.url + "/healthz")[0] == 503, 30, "health to report the failing projector")
        _, health = _get(serve.url + "/healthz")
        assert health["projector"]["status"] == "failing" and "WRONGTYPE" in health["projector"]["error"]
        assert health["redis"] == "ok"
        redis_client.delete(keys.CHANGES_STREAM)
        wait_for(lambda: _get(serve.url + "/healthz")[0] == 200, 30, "the projector to recover by itself")
        # and it projects again: an event consolidated elsewhere becomes retrievable
        settings = Settings(data_dir=tmp_path / "writer", redis_url=redis_url)
        with Memory.open_local(settings, index=False) as writer:
            writer.report(
                None, namespace="ops", query="Check the fans", status="resolved", proposed_insight="Fn."
            )
            writer.consolidate()
        body = json.dumps({"query": "Check the fans", "namespace": "ops"}).encode()

        def served() -> bool:
            req = urllib.request.Request(
                serve.url + "/v1/retrieve", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=10) as response:
                return bool(json.loads(response.read())["insights"])

        wait_for(served, 30, "the new insight to be served")
    finally:
        assert serve.stop() == 0


# -- the Low list: no traceback from an operational CLI error --------------------------------------
@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[str]:
    server = EmbeddedRedis(tmp_path / "locked")
    url = server.ensure()
    client = connect(url)
    client.config_set("requirepass", "right")
    client.close()
    yield str(server.socket)
    client = redis.Redis(unix_socket_path=str(server.socket), password="right")
    client.config_set("requirepass", "")  # so that stop() can shut it down
    client.close()
    server.stop()


def test_operational_errors_of_the_cli_are_one_line_and_debug_shows_the_traceback(
    tmp_path: Path, password_redis: str
) -> None:
    bad_utf8 = tmp_path / "event.json"
    bad_utf8.write_bytes(b'{"namespace": "a", "query": "\xff", "status": "failed"}')
    base = {"EVOMEM_DATA_DIR": str(tmp_path / "cli")}
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["stats"], {"EVOMEM_REDIS_URL": "redis://127.0.0.1:1"}, "redis unreachable"),
        (["stats"], {"EVOMEM_REDIS_URL": f"unix://:wrong@{password_redis}"}, "credentials"),
        (["report", "--file", str(tmp_path / "missing.json")], {}, "cannot read"),
        (["report", "--file", str(bad_utf8)], {}, "not UTF-8"),
        (["stats"], {"EVOMEM_TOP_K": "many"}, "EVOMEM_TOP_K"),
        (["stats"], {"EVOMEM_CLAIM_IDLE_MS": "1000"}, "EVOMEM_CLAIM_IDLE_MS"),
        (["--log-level", "bogus", "stats"], {}, "--log-level"),
        (["dlq", "show", "not-an-id"], {}, "no such dead letter"),
        (["retrieve", "q", "--top-k", "-1"], {}, "top_k"),
    ]
    for args, extra, says in cases:
        result = subprocess.run(
            [*CLI, *args], env=child_env(**base, **extra), capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0, args
        assert says in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
    debug = subprocess.run(
        [*CLI, "--debug", "stats"],
        env=child_env(**base, EVOMEM_REDIS_URL="redis://127.0.0.1:1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def _sigint_as_in_a_terminal() -> None:
    # a command started from a shell's background job or under nohup inherits SIGINT ignored, and
    # Python then leaves it ignored (no KeyboardInterrupt: the convention for such jobs); the test
    # runner may be one of them, the user at a terminal is not
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_a_command_with_a_line_not_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*CLI, "report", "--file", "-"],
        env=child_env(EVOMEM_DATA_DIR=str(tmp_path / "cli")),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_in_a_terminal,
    )

    def reading_stdin() -> bool:  # blocked in read(0, ...): the command is waiting for its input
        fields = Path(f"/proc/{proc.pid}/syscall").read_text().split()
        return fields[:2] == ["0", "0x0"]

    assert proc.stdin is not None and proc.stderr is not None
    try:
        wait_for(reading_stdin, 60, "the command to wait for its input")
        proc.send_signal(signal.SIGINT)
        # stdin stays open, as a terminal's does: an end of input would end the command too
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stderr.close()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, (proc.returncode, err)
    assert not EmbeddedRedis(tmp_path / "cli").running()


# -- the Low list: the SDK raises its own errors, and checks what it is given -----------------------
def test_the_sdk_refuses_bad_arguments_naming_the_field(memory: Memory) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": deep}
    cases: list[tuple[Any, str]] = [
        (lambda: memory.retrieve("q", "a", top_k=-1), "top_k"),
        (lambda: memory.retrieve("q", "a", top_k=10**30), "top_k"),
        (lambda: memory.retrieve("q", "a", budget=0), "budget"),
        (lambda: memory.retrieve("q", "no spaces{}"), "namespace"),
        (lambda: memory.retrieve("", "a"), "query"),
        (lambda: memory.report(None, namespace="", query="q", status="failed"), "namespace"),
        (
            lambda: memory.report(None, namespace="a", query="q", status="failed", trajectory=[deep]),
            "trajectory",
        ),
        (
            lambda: memory.report(
                None, namespace="a", query="q", status="failed", trajectory=[{"x": math.nan}]
            ),
            "trajectory",
        ),
        (
            lambda: memory.report(
                None, namespace="a", query="q", status="failed", trajectory=[{"x": math.inf}]
            ),
            "trajectory",
        ),
    ]
    for call, field in cases:
        with pytest.raises(InvalidEventError) as err:
            call()
        assert err.value.field == field
    assert memory.stream.info()["length"] == 0


def test_store_errors_surface_as_evomem_errors(memory: Memory, redis_client: redis.Redis) -> None:
    memory.report(None, namespace="a", query="q", status="resolved", proposed_insight="A lesson.")
    memory.consolidate()
    (insight_id,) = memory.graph.insight_ids("a")
    for suffix in (":pos", ":neg", ":edges"):
        with pytest.raises(NotFoundError):
            memory.insight(insight_id + suffix)
    redis_client.delete(keys.EVENTS_STREAM)
    redis_client.set(keys.EVENTS_STREAM, "not a stream")
    with pytest.raises(StoreError) as err:
        memory.report(None, namespace="a", query="q", status="resolved")
    assert isinstance(err.value, EvomemError) and "WRONGTYPE" in str(err.value)
