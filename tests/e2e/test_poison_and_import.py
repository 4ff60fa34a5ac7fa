"""A change the projector can never apply is skipped to a dead letter (named in health, replayed
or dropped by ``evomem changes``) instead of freezing every tenant's index; and import as an attack
surface: each record validated before anything is written, confined to namespaces, an overwrite
recorded in the history, one-line errors with the line number (exit 2), a byte-order mark taken."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import redis

from evomem import Memory, Settings, keys
from evomem.adapters.redis.importer import import_jsonl
from evomem.cli import main
from evomem.errors import InvalidEventError
from evomem.pipeline.export import export, write_jsonl
from evomem.service.auth import TokenAuth
from evomem.service.retrieval_service import RetrievalService


def _lesson(memory: Memory, namespace: str, query: str, insight: str) -> None:
    memory.report(None, namespace=namespace, query=query, status="resolved", proposed_insight=insight)
    memory.consolidate()


def _exported(memory: Memory, namespace: str) -> list[dict[str, Any]]:
    buf = io.StringIO()
    write_jsonl(export(memory.graph, [namespace]), buf)
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def _lines(records: list[dict[str, Any]]) -> io.StringIO:
    return io.StringIO("".join(json.dumps(r) + "\n" for r in records))


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


def test_a_change_that_can_never_apply_is_skipped_and_the_index_moves_on(
    memory: Memory, redis_client: redis.Redis, cli: Any
) -> None:
    # what the old import left: a node whose version is a float, and a change feed entry saying so
    redis_client.hset(
        keys.insight("alpha", "poisoned"),
        mapping={"text": "x", "state": "active", "version": "1.2089258196146292e+24"},
    )
    redis_client.hset(keys.INSIGHT_DIRECTORY, "poisoned", "alpha")
    redis_client.sadd(keys.namespace_insights("alpha"), "poisoned")
    redis_client.xadd(
        keys.CHANGES_STREAM,
        {"kind": "insight", "ns": "alpha", "id": "poisoned", "version": "1.2089258196146292e+24"},
    )
    # a change whose version parses, on a node whose stored fields do not
    redis_client.hset(
        keys.insight("alpha", "bent"), mapping={"text": "y", "state": "active", "version": "two"}
    )
    redis_client.xadd(keys.CHANGES_STREAM, {"kind": "insight", "ns": "alpha", "id": "bent", "version": "2"})
    _lesson(memory, "beta", "Verify: Mohra is a car", "Check the vehicle class.")
    memory.runtime.projector.run_once()  # type: ignore[union-attr]
    served = memory.retrieve("Verify: Mohra is a car", "beta").insights
    assert [s.text for s in served] == ["Check the vehicle class."]  # another tenant is not frozen

    projector = memory.runtime.projector
    assert projector is not None and projector.skipped == 2
    _, health = RetrievalService(memory.runtime, TokenAuth(None)).health()
    assert health["projector"]["skipped_changes"] == 2
    assert health["projector"]["last_skipped"]["id"] == "bent"

    code, out, _ = cli("changes", "list", "--json")
    letters = json.loads(out)
    assert code == 0 and [d["id"] for d in letters] == ["poisoned", "bent"]
    assert "not a whole number" in letters[0]["reason"] and "ValueError" in letters[1]["reason"]
    # the bent node mended, its change is replayed and projected; the other is dropped
    redis_client.hset(keys.insight("alpha", "bent"), "version", "2")
    assert cli("changes", "replay", letters[1]["dead_id"])[1].strip() == "replayed 1 change(s)"
    assert cli("changes", "drop", letters[0]["dead_id"])[1].strip() == "dropped 1 change(s)"
    assert "no skipped changes" in cli("changes", "list")[1]
    memory.runtime.projector.run_once()  # type: ignore[union-attr]
    assert projector.skipped == 2  # nothing new skipped
    assert memory.runtime.index is not None
    assert memory.runtime.index.versions("insight", "alpha", ["bent"]) == {"bent": 2}


def test_import_validates_every_record_before_writing_any(memory: Memory, redis_client: redis.Redis) -> None:
    _lesson(memory, "alpha", "Verify: Mohra is a car", "Check the vehicle class.")
    records = _exported(memory, "alpha")
    redis_client.flushdb()
    insight = next(r for r in records if r["kind"] == "insight")
    bad_cases = {
        "version": {**insight, "version": 2**80},
        "text": {**insight, "text": "x" * 5_000_000},
        "history": {**insight, "history": [{"op": "ADD"}]},
        "namespace": {**insight, "namespace": "bad\nname"},
    }
    for what, bad in bad_cases.items():
        rows = [*records, bad]  # the bad one last: everything before it would have been written
        with pytest.raises(InvalidEventError, match=f"line {len(rows)}") as caught:
            import_jsonl(redis_client, _lines(rows))
        assert what in str(caught.value) and "\n" not in str(caught.value)
        assert (
            redis_client.xlen(keys.CHANGES_STREAM) == 0 if redis_client.exists(keys.CHANGES_STREAM) else True
        )
        assert not redis_client.exists(keys.insight("alpha", insight["id"])), what
    # confined to namespaces: a record of another is refused, nothing written
    with pytest.raises(InvalidEventError, match="namespace 'alpha' is not one of"):
        import_jsonl(redis_client, _lines(records), namespaces={"beta"})
    assert not redis_client.exists(keys.insight("alpha", insight["id"]))
    assert import_jsonl(redis_client, _lines(records), namespaces={"alpha"})["insights"] == 1


def test_an_import_that_overwrites_an_insight_says_so_in_its_history(memory: Memory) -> None:
    _lesson(memory, "alpha", "Verify: Mohra is a car", "Check the vehicle class.")
    records = _exported(memory, "alpha")
    insight = next(r for r in records if r["kind"] == "insight")
    newer = {**insight, "version": insight["version"] + 1, "state": "archived"}
    assert import_jsonl(memory.redis, _lines([newer]))["insights"] == 1
    history = memory.graph.history(insight["id"])
    assert [h.op for h in history] == ["ADD", "IMPORT"]
    assert history[-1].outcome == f"replaced version {insight['version']} by {insight['version'] + 1}"
    buf = io.StringIO()
    write_jsonl(export(memory.graph, ["alpha"]), buf)  # the export still reads it whole


def test_the_import_command_says_one_line_exits_2_and_takes_a_bom(
    memory: Memory, redis_client: redis.Redis, cli: Any, tmp_path: Path
) -> None:
    _lesson(memory, "alpha", "Verify: Mohra is a car", "Check the vehicle class.")
    records = _exported(memory, "alpha")
    redis_client.flushdb()
    bad = tmp_path / "bad.jsonl"
    insight = next(r for r in records if r["kind"] == "insight")
    bad.write_text("".join(json.dumps(r) + "\n" for r in [*records, {**insight, "version": 2**80}]))
    code, _, err = cli("import", str(bad))
    assert code == 2 and err.count("\n") == 1 and f"line {len(records) + 1}" in err and "version" in err
    good = tmp_path / "bom.jsonl"
    good.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in records).encode())
    code, out, err = cli("import", "--namespace", "alpha", str(good))
    assert code == 0, err
    assert "1 insights" in out
    code, _, err = cli("import", "--namespace", "beta", str(good))
    assert code == 2 and "namespace 'alpha' is not one of" in err


def test_an_export_that_fails_midway_leaves_no_truncated_file(
    memory: Memory, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``evomem export -o FILE`` writes aside and renames once whole: a store failing halfway
    leaves the file as it was (here: absent, then the last good export) and says so in one line."""
    from evomem.errors import StoreError
    from evomem.pipeline import export as export_module

    _lesson(memory, "alpha", "Verify: Mohra is a car", "Check the vehicle class.")
    _lesson(memory, "alpha", "Verify: Rex is a dog", "Check the animal's species.")
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "memory.jsonl"
    whole = export_module.export

    def failing(graph: Any, namespaces: Any) -> Any:
        for n, record in enumerate(whole(graph, namespaces)):
            if n == 2:
                raise StoreError("redis went away")
            yield record

    monkeypatch.setattr(export_module, "export", failing)
    code, _, err = cli("export", "-o", str(out))
    assert code != 0 and "redis went away" in err and err.count("\n") == 1
    assert list(out.parent.iterdir()) == []
    monkeypatch.setattr(export_module, "export", whole)
    assert cli("export", "-o", str(out))[0] == 0
    good = out.read_text()
    assert good.count("\n") >= 3
    monkeypatch.setattr(export_module, "export", failing)
    assert cli("export", "-o", str(out))[0] != 0
    assert out.read_text() == good and [p.name for p in out.parent.iterdir()] == ["memory.jsonl"]


def test_an_import_cut_off_halfway_announces_what_it_wrote_and_completes_when_run_again(
    memory: Memory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis lost after some records are written: each node written is on the change feed (an index
    learns of it, none is left in Redis unserved), and importing the file again completes it."""
    from evomem.adapters.redis import importer

    _lesson(memory, "alpha", "Verify: Mohra is a car", "Check the vehicle class.")
    _lesson(memory, "alpha", "Verify: Rex is a dog", "Check the animal's species.")
    records = _exported(memory, "alpha")
    redis_client.flushdb()
    nodes = [r for r in records if r.get("kind") in ("query", "insight")]
    real_put, calls = importer._put, []

    def cut_off(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == len(nodes):
            raise redis.ConnectionError("connection lost")
        return real_put(*args, **kwargs)

    monkeypatch.setattr(importer, "_put", cut_off)
    with pytest.raises(redis.ConnectionError):
        import_jsonl(redis_client, _lines(records))
    announced = {
        (f[b"kind"].decode(), f[b"id"].decode()) for _, f in redis_client.xrange(keys.CHANGES_STREAM)
    }
    in_redis = {
        i
        for i in (r["id"] for r in nodes if r["kind"] == "insight")
        if redis_client.exists(keys.insight("alpha", i))
    }
    assert 0 < len(in_redis) < 3 and {("insight", i) for i in in_redis} <= announced
    monkeypatch.setattr(importer, "_put", real_put)
    counts = import_jsonl(redis_client, _lines(records))
    assert counts["skipped"] == len(nodes) - 1 and counts["queries"] + counts["insights"] == 1
    assert sorted(memory.graph.insight_ids("alpha")) == sorted(
        r["id"] for r in nodes if r["kind"] == "insight"
    )
