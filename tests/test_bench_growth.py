"""`python -m bench.growth` end to end at a tiny size, on the embedded stack: the results file has the
keys bench/README.md documents, the build really consolidated every task, and the hot-insight rounds
really served and kept their insights. No timing is asserted: the figures depend on the machine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench import growth, hot, report
from bench.world import World

WINDOW_KEYS = {
    "from_task",
    "to_task",
    "tasks",
    "seconds",
    "tasks_per_s",
    "ms_per_task",
    "phase_tasks_per_s",
    "cpu_ms_per_task",
    "cpu_tasks_per_s",
}


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    growth.add_arguments(parser)
    return parser.parse_args(
        [
            "--tasks",
            "200,400",
            "--window",
            "200",
            "--sample",
            "20",
            "--hot-evidence",
            "300",
            "--hot-reps",
            "3",
            "--no-progress",
            "--out",
            str(tmp_path / "results.json"),
            "--data-dir",
            str(tmp_path / "data"),
            *extra,
        ]
    )


@pytest.mark.slow
def test_the_growth_benchmark_writes_the_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"retrieval": {"kept": True}}))
    assert growth.run(_args(tmp_path)) == 0

    merged = json.loads((tmp_path / "results.json").read_text())
    assert merged["retrieval"] == {"kept": True}  # another suite's figures survive
    doc = merged[growth.RESULTS_KEY]
    assert doc["schema"] == growth.RESULTS_SCHEMA
    assert {
        "timestamp",
        "duration_s",
        "command",
        "options",
        "machine",
        "config",
        "checkpoints",
        "hot",
    } <= set(doc)
    assert doc["config"]["tenants"] == 10 and doc["config"]["controller"] == "rules"

    assert [c["tasks"] for c in doc["checkpoints"]] == [200, 400]
    for c in doc["checkpoints"]:
        for name in ("cumulative", "first_window", "last_window"):
            assert set(c[name]) == WINDOW_KEYS
            assert set(c[name]["ms_per_task"]) == set(growth.PHASES)
        assert (c["first_window"]["from_task"], c["first_window"]["to_task"]) == (1, 200)
        assert (c["last_window"]["from_task"], c["last_window"]["to_task"]) == (c["tasks"] - 199, c["tasks"])
        assert c["projection_timed"] and c["last_window"]["ms_per_task"]["project"] > 0
        cpu = c["last_window"]["cpu_ms_per_task"]
        assert (
            cpu["python"] > 0
            and cpu["redis"] >= 0  # read from /proc in clock ticks: may round to 0 in a short window
            and cpu["total"] == pytest.approx(cpu["python"] + cpu["redis"], abs=1e-3)
        )
        assert c["rss_mb"]["python"] > 0 and c["rss_mb"]["redis"] > 0  # both processes found
        assert (
            c["retrieve_sample"]["n"] == 20
            and 0 < c["retrieve_sample"]["p50_ms"] <= c["retrieve_sample"]["p99_ms"]
        )
        # every task was reported and consolidated: one query node each, nothing dead-lettered
        assert c["consolidation"]["applied"] == c["tasks"] and c["consolidation"]["dead_lettered"] == 0
        assert c["memory"]["queries"] == c["tasks"]
    final = doc["checkpoints"][-1]
    assert final["memory"]["active"] > 0 and final["consolidation"]["operations"]["KEEP"] > 0
    assert final["served_mean_in_build"] > 0  # insights were learnt and served again

    h = doc["hot"]
    for name, evidence in (("hot", 300), ("fresh", 1)):
        p = h["insights"][name]
        assert p["served"] == p["retrievals"] == 3  # each timed retrieval served its insight
        assert p["keeps_applied"] == 3 and p["positive_after"] == evidence + 3
    assert {"keep", "retrieve"} <= set(h["ratios_hot_to_fresh"])
    together = doc["paired"]["retrieve"]  # the first checkpoint's memory, kept, beside the last one's
    assert (together["small_tasks"], together["large_tasks"]) == (200, 400)
    assert {k: v["n"] for k, v in together["by_tasks"].items()} == {"200": 20, "400": 20}
    assert together["p50_ratio"] > 0 and set(together["by_tasks"]["400"]["stages_mean_ms"]) >= {"similar"}
    assert together["block"] == growth.PAIR_BLOCK and together["per_task"]["p50_ratio"] > 0
    growth_check = next(c for c in doc["checks"] if c["name"] == "retrieve_p50_growth")
    assert growth_check["value"] == together["p50_ratio"] and growth_check["at_checkpoints"] > 0
    rates = doc["paired"]["throughput"]  # an empty memory's first 200 tasks beside 200 more on the grown one
    assert (rates["empty"]["from_task"], rates["empty"]["to_task"]) == (1, 200)
    assert (rates["grown"]["from_task"], rates["grown"]["to_task"]) == (401, 600)
    assert rates["ratio"] > 0 and rates["cpu_ratio"] > 0
    rate_check = next(c for c in doc["checks"] if c["name"] == "throughput_last_vs_first_window")
    assert rate_check["value"] == rates["ratio"] and rate_check["in_build"] > 0
    assert {c["name"] for c in doc["checks"]} == {
        "throughput_last_vs_first_window",
        "retrieve_p50_growth",
        "hot_keep_ratio",
        "hot_retrieve_ratio",
    }

    out = capsys.readouterr().out
    assert out.count("PASS ") + out.count("FAIL ") == 4
    assert "hot insight" in out and "results.json" in out
    assert not (tmp_path / "data" / "build").exists() and not (tmp_path / "data" / "hot").exists()
    assert not (tmp_path / "data" / "build-at-200").exists()  # the kept copy is gone too
    assert not (tmp_path / "data" / "empty").exists()


def _point(tasks: int, first: float, last: float, p50: float) -> dict[str, Any]:
    return {
        "tasks": tasks,
        "first_window": {"tasks_per_s": first, "tasks": 5000},
        "last_window": {"tasks_per_s": last, "from_task": tasks - 4999},
        "retrieve_sample": {"p50_ms": p50},
    }


def test_the_acceptance_checks_apply_the_issue_limits() -> None:
    flat = report.checks([_point(10_000, 150, 140, 2.0), _point(100_000, 150, 101, 2.9)], None)
    assert [c["passed"] for c in flat] == [True, True]
    slow = report.checks([_point(10_000, 150, 140, 2.0), _point(100_000, 150, 99, 3.1)], None)
    assert [c["passed"] for c in slow] == [False, False]


def test_the_retrieve_growth_check_takes_the_paired_measurement_when_there_is_one() -> None:
    points = [_point(10_000, 150, 140, 2.0), _point(100_000, 150, 101, 3.4)]  # 1.7x apart
    by_tasks = {"10000": {"p50_ms": 2.2}, "100000": {"p50_ms": 3.1}}
    together = {"small_tasks": 10_000, "large_tasks": 100_000, "by_tasks": by_tasks, "p50_ratio": 1.409}
    check = report.checks(points, None, {"retrieve": together})[1]
    assert check["name"] == "retrieve_p50_growth" and check["passed"]
    assert (check["value"], check["at_checkpoints"]) == (1.409, 1.7)
    assert "measured together" in check["detail"] and "each sampled at its checkpoint" in check["detail"]
    other_sizes = {"retrieve": {**together, "small_tasks": 40_000}}  # not the checkpoints compared
    assert report.checks(points, None, other_sizes)[1]["value"] == 1.7


def test_the_throughput_check_takes_the_paired_windows_when_there_are_some() -> None:
    points = [_point(10_000, 150, 140, 2.0), _point(100_000, 150, 90, 2.9)]  # 0.6 in the build
    side = {"tasks_per_s": 0.0, "from_task": 1, "to_task": 5_000}
    rates = {
        "window": 5_000,
        "block": 200,
        "empty": {**side, "tasks_per_s": 140.0},
        "grown": {**side, "tasks_per_s": 100.0, "from_task": 100_001, "to_task": 105_000},
        "ratio": 0.714,
        "cpu_ratio": 0.7,
    }
    check = report.checks(points, None, {"throughput": rates})[0]
    assert check["name"] == "throughput_last_vs_first_window" and check["passed"]
    assert (check["value"], check["in_build"]) == (0.714, 0.6)
    assert "measured together" in check["detail"] and "in the build" in check["detail"]
    elsewhere = {"throughput": {**rates, "grown": {**rates["grown"], "from_task": 40_001}}}
    assert report.checks(points, None, elsewhere)[0]["value"] == 0.6  # not after this build's last task


def test_the_world_is_deterministic_unequal_and_repetitive() -> None:
    def texts(seed: int) -> list[tuple[str, str]]:
        world = World(10, seed)
        return [(t.namespace, t.text) for t in (world.task() for _ in range(3000))]

    assert texts(3) == texts(3)
    assert texts(3) != texts(4)
    tasks = texts(3)
    per_tenant = [sum(ns == f"tenant-{i:02d}" for ns, _ in tasks) for i in range(10)]
    assert per_tenant[0] > 3 * per_tenant[9] > 0
    assert len(set(tasks)) < 0.9 * len(tasks)  # repeats, as agent tasks do


def test_the_hot_families_are_distinct_and_disjoint() -> None:
    a, b = hot.family_texts("A", 2000, 7), hot.family_texts("B", 2000, 7)
    assert len(set(a)) == len(set(b)) == 2000
    assert not set(a) & set(b)


def test_the_growth_results_in_the_repo_have_the_documented_keys() -> None:
    path = Path(__file__).resolve().parents[1] / "bench" / "results.json"
    doc = json.loads(path.read_text()).get(growth.RESULTS_KEY) if path.exists() else None
    if doc is None:
        pytest.skip("no growth figures in bench/results.json yet: run `python -m bench.growth`")
    assert doc["schema"] == growth.RESULTS_SCHEMA
    for c in doc["checkpoints"]:
        assert set(c["last_window"]) == WINDOW_KEYS
        assert {"retrieve_sample", "retrieve_in_build_last_window", "rss_mb", "memory"} <= set(c)
    assert {c["name"] for c in doc["checks"]} >= {"throughput_last_vs_first_window", "hot_keep_ratio"}
