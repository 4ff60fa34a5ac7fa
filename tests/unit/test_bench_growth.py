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
    path = Path(__file__).resolve().parents[2] / "bench" / "results.json"
    doc = json.loads(path.read_text()).get(growth.RESULTS_KEY) if path.exists() else None
    if doc is None:
        pytest.skip("no growth figures in bench/results.json yet: run `python -m bench.growth`")
    assert doc["schema"] == growth.RESULTS_SCHEMA
    for c in doc["checkpoints"]:
        assert set(c["last_window"]) == WINDOW_KEYS
        assert {"retrieve_sample", "retrieve_in_build_last_window", "rss_mb", "memory"} <= set(c)
    assert {c["name"] for c in doc["checks"]} >= {"throughput_last_vs_first_window", "hot_keep_ratio"}
