"""`evomem bench` end to end at a tiny size: it runs on the embedded stack and writes the results
file with the keys bench/README.md documents. No timing is asserted: the figures depend on the
machine."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from bench import common
from bench import http as bench_http
from bench import retrieval as bench

SCENARIO_KEYS = {
    "name",
    "n_queries",
    "n_insights",
    "active_insights",
    "namespaces",
    "iterations",
    "warmup",
    "load_s",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "mean_ms",
    "min_ms",
    "max_ms",
}


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(
        [
            "--sizes",
            "300",
            "--insights",
            "150",
            "--iterations",
            "20",
            "--warmup",
            "5",
            "--no-progress",
            "--out",
            str(tmp_path / "results.json"),
            "--data-dir",
            str(tmp_path / "data"),
            *extra,
        ]
    )


def test_bench_writes_the_results_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"llm": {"kept": True}}))
    assert bench.run(_args(tmp_path)) == 0

    merged = json.loads((tmp_path / "results.json").read_text())
    assert merged["llm"] == {"kept": True}  # another suite's figures survive
    doc = merged[bench.RESULTS_KEY]
    assert doc["schema"] == bench.RESULTS_SCHEMA
    assert {
        "timestamp",
        "duration_s",
        "command",
        "options",
        "machine",
        "config",
        "scenarios",
        "datasets",
        "retrieve_breakdown",
    } <= doc.keys()
    assert {"cores", "python", "redis_server", "qdrant_edge_py"} <= doc["machine"].keys()
    assert doc["machine"]["qdrant_edge_py"]
    assert "Redis server" in doc["machine"]["redis_server"]

    assert [s["name"] for s in doc["scenarios"]] == ["retrieve", "report", "retrieve-count"]
    assert [s.get("scoring") for s in doc["scenarios"]] == ["weighted", None, "count"]
    for s in doc["scenarios"]:
        assert s.keys() >= SCENARIO_KEYS
        assert (s["n_queries"], s["n_insights"], s["iterations"]) == (300, 150, 20)
        assert 0 < s["p50_ms"] <= s["p99_ms"] <= s["max_ms"]

    (data,) = doc["datasets"]
    assert data["events"] == 300 and data["outcomes"]["added"] == 150
    assert {
        "generate_s",
        "apply_s",
        "project_s",
        "reopen_s",
        "load_s",
        "evidence",
        "query_degree",
    } <= data.keys()
    (breakdown,) = doc["retrieve_breakdown"]
    assert set(bench.STAGES) == breakdown["stages_p50_ms"].keys()
    assert breakdown["served_nonempty"] > 0  # the dataset really exercises the ranking

    out = capsys.readouterr().out
    assert "retrieve" in out and "report" in out and "results.json" in out
    assert not (tmp_path / "data" / "q300").exists()  # stores removed after the run


def test_the_dataset_is_deterministic_and_sized_as_asked() -> None:
    def summary(seed: int) -> list[tuple[str, str, int, int]]:
        return [
            (p.namespace, p.query_text, len(p.similar), len(p.edits))
            for p in bench.build_plans(400, 120, seed, 5)
        ]

    assert summary(3) == summary(3)
    assert summary(3) != summary(4)
    plans = list(bench.build_plans(400, 120, 3, 5))
    assert sum(e.op == "ADD" for p in plans for e in p.edits) == 120
    assert len({p.namespace for p in plans}) == len(bench.NAMESPACE_WEIGHTS)
    assert any(e.op == "ARCHIVE" for p in plans for e in p.edits)


def test_a_results_file_in_the_old_layout_is_merged_not_wiped(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    old = {"schema": 1, "scenarios": [{"name": "retrieve"}], "machine": {"cores": 2}, "llm": {"x": 1}}
    path.write_text(json.dumps(old))
    common.merge_results(path, "http", {"levels": []})
    doc = json.loads(path.read_text())
    assert doc == {
        "retrieval": {"schema": 1, "scenarios": [{"name": "retrieve"}], "machine": {"cores": 2}},
        "llm": {"x": 1},
        "http": {"levels": []},
    }
    common.merge_results(path, "retrieval", {"schema": 1, "scenarios": []})
    assert json.loads(path.read_text())["retrieval"] == {"schema": 1, "scenarios": []}
    assert json.loads(path.read_text())["http"] == {"levels": []}


def test_set_gives_its_settings_to_every_process_the_http_benchmark_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    bench_http.add_arguments(parser)
    args = parser.parse_args(["--set", "evidence_search=0", "--set", "similarity=cosine"])
    plan = bench_http.make_plan(args)
    assert plan.settings == (("evidence_search", "0"), ("similarity", "cosine"))
    # a user's own EVOMEM_* stay out of the processes; the --set ones go in, as EVOMEM_FIELD
    monkeypatch.setenv("EVOMEM_URL", "http://elsewhere:1")
    monkeypatch.setenv("EVOMEM_EVIDENCE_SEARCH", "5")
    env = common.child_env(plan.settings)
    assert env["EVOMEM_EVIDENCE_SEARCH"] == "0" and env["EVOMEM_SIMILARITY"] == "cosine"
    assert "EVOMEM_URL" not in env and env["PATH"] == os.environ["PATH"]
    assert "EVOMEM_EVIDENCE_SEARCH" not in common.child_env()
    for bad in (
        "no_such_field=1",
        "evidence_search",
        "evidence_search=many",
        "similarity=jaccard",
        "data_dir=/x",
    ):
        with pytest.raises(SystemExit, match="--set"):
            bench_http.make_plan(parser.parse_args(["--set", bad]))


def test_the_results_in_the_repo_have_the_documented_keys() -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "results.json"
    if not path.exists():
        pytest.skip("no bench/results.json yet: run `make bench`")
    doc = json.loads(path.read_text())[bench.RESULTS_KEY]
    assert doc["schema"] == bench.RESULTS_SCHEMA
    names = {(s["name"], s["n_queries"]) for s in doc["scenarios"]}
    assert {("retrieve", 100_000), ("report", 100_000)} <= names
    for s in doc["scenarios"]:
        assert s.keys() >= SCENARIO_KEYS
