"""The long real-process runs of test_bench_growth.py (make test-slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import growth
from tests.unit.test_bench_growth import WINDOW_KEYS, _args


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
