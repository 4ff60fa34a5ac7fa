"""The offline demo and the benchmark run through the LLM path against the local test server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench import llm as bench_llm
from evomem import demo

pytestmark = pytest.mark.slow  # the whole demo, in processes


def test_the_demo_fleet_runs_through_the_llm_controller_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--llm`` the maintained memory is judged by the LLM controller on a local server: every
    event is judged and its verdicts are applied (its judge keeps what a resolved task was shown and
    archives what a failed one was; judged evidence, so unlike the rule controller's it archives)."""
    common = ["--tasks", "60", "--batch", "15", "--phases", "2", "--json"]
    assert demo.main([*common, "--llm", "--llm-latency-ms", "0", "--data-dir", str(tmp_path / "llm")]) == 0
    with_llm = json.loads(capsys.readouterr().out)
    assert demo.main([*common, "--data-dir", str(tmp_path / "rules")]) == 0
    with_rules = json.loads(capsys.readouterr().out)

    usage = with_llm["llm"]
    assert usage["calls"] > 0 and usage["events_judged"] == 60 and usage["estimated_cost_usd"] is None
    maintained = with_llm["arms"]["maintained"]
    assert {"ADD", "KEEP", "ARCHIVE"} <= set(maintained["operations"])
    assert maintained["outcomes"].get("archived", 0) > 0  # judged negatives do archive
    assert "llm" not in with_rules


def test_the_llm_benchmark_merges_its_figures_into_the_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"pipeline": {"kept": True}}))
    parser = argparse.ArgumentParser()
    bench_llm.add_arguments(parser)
    args = parser.parse_args(
        ["--quick", "--latency-ms", "20", "--seconds", "0.2", "--token-events", "8", "--out", str(out)]
    )
    assert bench_llm.run(args) == 0
    doc = json.loads(out.read_text())
    assert doc["pipeline"] == {"kept": True}
    llm = doc["llm"]
    assert set(llm["prompt_tokens"]["runs"]) == {"1", "8"}
    assert [(r["concurrency"], r["events_per_call"]) for r in llm["throughput"]["runs"]] == [
        (1, 1),
        (8, 1),
        (64, 1),
        (64, 8),
    ]
    assert all(r["applied"] == r["events"] for r in llm["throughput"]["runs"])
    assert "prompt tokens saved per event" in capsys.readouterr().out
