"""The small defects of the second hardening round, one test each: infinite weights, namespaces
that are patterns or hold line breaks, a hand-written non-JSON override, a report by retrieval id,
token names with terminal escapes, `| head` on a command's output, the unit's file limit."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import ValidationError

from evomem import InvalidEventError, Memory, Settings, keys
from evomem.cli import main
from evomem.settings import NamespaceOverrides

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli(settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    monkeypatch.setenv("EVOMEM_REDIS_URL", str(settings.redis_url))
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(settings.data_dir))

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_infinite_weights_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("lambda", "archive_ratio"):
        with pytest.raises(ValidationError):
            NamespaceOverrides.model_validate({name: float("inf")})
    monkeypatch.setenv("EVOMEM_LAMBDA", "inf")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.delenv("EVOMEM_LAMBDA")
    monkeypatch.setenv("EVOMEM_ARCHIVE_RATIO", "inf")
    with pytest.raises(ValidationError):
        Settings()


def test_settings_set_refuses_namespaces_that_are_not_names(cli: Any, redis_client: redis.Redis) -> None:
    for bad in ("*", "{x}", "a\nb"):
        code, _, err = cli("settings", "set", bad, "budget=2")
        assert code == 2 and "namespace" in err, (bad, err)
    assert redis_client.scard(keys.NAMESPACES_WITH_SETTINGS) == 0
    assert cli("settings", "set", "alpha", "budget=2")[0] == 0


def test_a_non_json_override_written_by_hand_is_ignored(memory: Memory, redis_client: redis.Redis) -> None:
    memory.report(None, namespace="alpha", query="q1", status="resolved", proposed_insight="Keep going.")
    memory.consolidate()
    redis_client.hset(keys.namespace_settings("alpha"), mapping={"budget": "not json", "top_k": "3"})
    memory.namespace_settings.forget()
    assert memory.namespace_settings("alpha").top_k == 3
    assert memory.retrieve("q1", "alpha").insights  # retrievals go on
    memory.report(None, namespace="alpha", query="q2", status="failed")  # and so do events


def test_a_report_may_name_its_retrieval_by_id(memory: Memory) -> None:
    r = memory.retrieve("Verify: Mohra is a car", "alpha")
    event_id = memory.report(r.id, status="resolved", namespace="alpha", query=r.query)
    assert event_id
    with pytest.raises(InvalidEventError, match="retrieval"):
        memory.report(42, status="resolved")  # type: ignore[arg-type]


def test_token_names_are_printed_with_their_control_characters_escaped(cli: Any) -> None:
    code, _, _ = cli("tokens", "create", "-n", "alpha", "--name", "ok\x1b[2J\nforged 00000 line")
    assert code == 0
    code, out, _ = cli("tokens", "list")
    assert code == 0 and "\x1b" not in out and out.count("\n") == 1
    assert "\\x1b[2J\\nforged" in out


def test_a_closed_pipe_ends_a_command_quietly(settings: Settings, memory: Memory, tmp_path: Path) -> None:
    for n in range(30):
        memory.report(
            None, namespace="alpha", query=f"q{n}", status="resolved", proposed_insight=f"Lesson {n}."
        )
    memory.consolidate()
    from tests.support.pipeline_helpers import child_env

    env = child_env(EVOMEM_REDIS_URL=str(settings.redis_url), EVOMEM_DATA_DIR=str(settings.data_dir))
    export = subprocess.Popen(
        [sys.executable, "-m", "evomem.cli", "export"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert export.stdout is not None and export.stderr is not None
    export.stdout.read(10)
    export.stdout.close()  # like `| head -c 10`
    err = export.stderr.read().decode()
    export.stderr.close()
    assert export.wait(timeout=60) == 0, err
    assert "Broken pipe" not in err and "Traceback" not in err
    retrieve = subprocess.Popen(
        [sys.executable, "-m", "evomem.cli", "retrieve", "-n", "alpha", "q1"],
        env={**env, "EVOMEM_DATA_DIR": str(tmp_path / "another")},  # the memory holds its index
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert retrieve.stdout is not None
    retrieve.stdout.close()  # gone before the first line: like `| head -0`
    _, err_bytes = retrieve.communicate(timeout=60)
    assert retrieve.returncode == 0, err_bytes.decode()
    assert b"Broken pipe" not in err_bytes and b"Traceback" not in err_bytes


def test_the_service_unit_allows_more_files_than_the_connection_cap() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(ROOT / "deploy" / "systemd" / "evomem-serve.service")
    limit = int(unit["Service"]["LimitNOFILE"])
    assert limit > 2 * Settings.model_fields["http_max_connections"].default


def test_the_demo_writes_into_no_directory_that_holds_other_things(tmp_path: Path) -> None:
    from evomem import demo

    (tmp_path / "notes.txt").write_text("mine")
    assert demo.main(["--tasks", "10", "--data-dir", str(tmp_path)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_conflicting_event_id_is_refused_while_the_first_is_pending(memory: Memory) -> None:
    event_id = "0b8f6c3e-1111-4222-8333-944455556666"
    memory.report(None, namespace="alpha", query="q1", status="resolved", event_id=event_id)
    memory.report(None, namespace="alpha", query="q1", status="resolved", event_id=event_id)  # a retry
    with pytest.raises(InvalidEventError, match="other content"):
        memory.report(None, namespace="alpha", query="q2", status="failed", event_id=event_id)
    assert memory.stream.info()["length"] == 2


def test_a_worker_stops_the_embedded_redis_it_started(tmp_path: Path) -> None:
    import signal

    from tests.support.pipeline_helpers import child_env, wait_for

    env = child_env(EVOMEM_DATA_DIR=str(tmp_path / "data"))
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "evomem.cli", "--log-level", "INFO", "worker", "--concurrency", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    pidfile = tmp_path / "data" / "redis" / "redis.pid"
    try:
        # Celery's own "<name>@<host> ready." line: its signal handlers are in place by then
        wait_for(
            lambda: re.search(rb"@\S+ ready\.", log.read_bytes()) is not None, 120, "the worker to be ready"
        )
        redis_pid = int(pidfile.read_text())
        wait_for(lambda: Path(f"/proc/{redis_pid}").exists(), 10, "redis-server to run")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    wait_for(
        lambda: not Path(f"/proc/{redis_pid}").exists(), 30, "the embedded Redis to stop with the worker"
    )


def test_a_zombie_is_not_taken_for_a_running_process() -> None:
    from evomem.launcher import _alive

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    from tests.support.pipeline_helpers import wait_for

    wait_for(
        lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z",
        30,
        "a zombie",
    )
    assert not _alive(child.pid)  # exited, not reaped yet
    child.wait()
    assert _alive(os.getpid())


def test_another_tenants_insight_costs_the_same_reads_as_a_missing_one(
    memory: Memory, redis_client: redis.Redis
) -> None:
    """The ~150 µs gap of the probe came from reading the foreign node before refusing it."""
    from evomem import NotFoundError
    from evomem.service.auth import Principal, TokenAuth
    from evomem.service.retrieval_service import RetrievalService

    memory.report(None, namespace="victim", query="q", status="resolved", proposed_insight="Victim lesson.")
    memory.consolidate()
    (victim_id,) = memory.graph.insight_ids("victim")
    service = RetrievalService(memory.runtime, TokenAuth(None))
    evil = Principal("evil", frozenset({"evil"}))

    def commands(insight_id: str) -> int:
        before = sum(v["calls"] for k, v in redis_client.info("commandstats").items() if k != "cmdstat_info")
        with pytest.raises(NotFoundError):
            service.insight(evil, insight_id)
        after = sum(v["calls"] for k, v in redis_client.info("commandstats").items() if k != "cmdstat_info")
        return int(after - before)

    assert commands(victim_id) == commands("no-such-insight")


@pytest.mark.parametrize(("promote_at", "open_shards"), [(1000, 64), (2, 4)])
def test_new_namespaces_cost_the_retrieval_process_no_thread_for_good(
    tmp_path: Path, promote_at: int, open_shards: int
) -> None:
    """Each embedded shard runs a thread: a namespace of its own per tenant cost one, for good. Small
    namespaces share the shared shards' threads, and promoted ones hold at most ``open_shards``."""
    import gc

    from evomem.adapters.qdrant.edge import EdgeIndex
    from evomem.core.hashing import HashingEmbedder
    from evomem.core.ports import QueryPoint
    from tests.support.pipeline_helpers import wait_for

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))  # the native threads too

    embedder = HashingEmbedder()
    index = EdgeIndex(tmp_path / "qdrant", "sparse", 0, promote_at=promote_at, open_shards=open_shards)
    before = threads()  # the store's runtime and its shared shards
    try:
        for n in range(40):
            ns = f"tenant-{n}"
            texts = [f"claim {i} of {ns}" for i in range(3)]
            index.write_queries(
                [
                    (QueryPoint(f"q{i}", ns, t, "resolved", 1, (f"ins-{n}",), ()), embedder.embed_one(t))
                    for i, t in enumerate(texts)
                ]
            )
            assert [h.id for h in index.search_queries(embedder.embed_one(texts[1]), ns, 1)] == ["q1"]
        tiers = index.tiers()
        assert tiers["promoted_namespaces"] == (40 if promote_at == 2 else 0)
        # measured: +4 shared, +8 promoted (4 open): a closed shard's thread ends once it is freed
        bound = (open_shards if promote_at == 2 else 0) + 8

        def bounded() -> bool:
            gc.collect()
            return threads() - before <= bound

        wait_for(bounded, 30, f"at most {bound} more threads for 40 namespaces ({threads() - before})")
    finally:
        index.close()
