"""The long real-process runs of test_bench_quality.py (make test-slow)."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
from pathlib import Path

import pytest

from bench.quality import summary, trace
from bench.quality.__main__ import main
from bench.quality.arms import ARMS, append_only_arm, default_arm
from bench.quality.run import Job, run_job
from bench.quality.worlds import WORLDS, World, parameter_changes


@pytest.mark.slow
def test_quality_bench_writes_its_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"llm": {"kept": True}}))
    arms = ["none", append_only_arm(), default_arm(), "llm", "no-pollution"]
    argv = ["--tasks", "40", "--seeds", "2", "--worlds", "mixed-j10", "--arms", ",".join(arms)]
    argv += ["--consolidate-every", "10", "--jobs", "1", "--no-progress", "--param", "repeat_rate=0.5"]
    argv += ["--out", str(out), "--plot", str(tmp_path / "quality.png")]
    assert main(argv) == 0

    printed = capsys.readouterr().out
    assert "mixed-j10" in printed and "targets (issue 8)" in printed
    assert any(line.startswith(("PASS", "FAIL")) for line in printed.splitlines())
    doc = json.loads(out.read_text())
    assert doc["llm"] == {"kept": True}  # another suite's figures survive
    q = doc["quality"]
    assert {
        "command",
        "options",
        "machine",
        "parameters",
        "worlds",
        "arms",
        "figures",
        "curves",
        "targets",
    } <= set(q)
    assert q["worlds"]["mixed-j10"]["judge_error"] == 0.10
    assert q["worlds"]["mixed-j10"]["repeat_rate"] == 0.5
    figures = q["figures"]["mixed-j10"]
    assert set(figures) == set(arms)
    for arm in arms:
        assert set(summary.METRICS) <= set(figures[arm])
        assert figures[arm]["seeds"] == [0, 1]
        assert 0.0 <= figures[arm]["final_success"]["mean"] <= 1.0
        assert len(q["curves"]["mixed-j10"][arm]) == summary.CURVE_POINTS
    assert figures["none"]["pollution"]["mean"] is None  # nothing served, nothing to count
    assert 0.0 <= figures[default_arm()]["pollution"]["mean"] <= 1.0
    assert figures["no-pollution"]["pollution"]["mean"] == 0  # the ground truth withheld every harm
    assert figures["llm"]["prompt_tokens_per_event"]["mean"] > 0
    assert figures[append_only_arm()]["archived"]["mean"] == 0  # append-only never archives
    assert {t["target"] for t in q["targets"]} >= {"final-window success − add+keep ≥ 0.15"}
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "quality.png").stat().st_size > 0


@pytest.mark.slow
def test_the_trace_says_where_the_right_lesson_stood_and_what_harmed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert trace.main(["--world", "drift", "--seed", "1", "--tasks", "60"]) == 0
    printed = capsys.readouterr().out
    assert "final-window success" in printed and "harmful servings, whole run" in printed
    head = printed.split("harmful servings")[0]
    # every task of the final window (the last 20% of 60) is accounted for, once
    assert sum(int(line.split()[0]) for line in head.splitlines() if line.startswith("  ")) == 12


@pytest.mark.slow
def test_the_trace_prints_every_return_whose_taught_lesson_was_not_first() -> None:
    """--misses: one block per miss the run counts, each naming the lesson that query taught and
    showing that lesson's nodes (or saying it was not ranked)."""
    params = parameter_changes(["topics=24", "templates=6"])
    spec = dataclasses.replace(WORLDS["lookalike"], **params)
    assert (spec.topics, spec.templates) == (24, 6)
    job = Job(spec, ARMS["nojudge/weighted"], 100, 300)
    out = io.StringIO()
    seen = trace.Trace(World(spec, job.seed, job.tasks), job.tasks, misses=out)
    result = run_job(job, observe=seen.observe)
    missed = sum(h["n"] - h["first"] for h in result["hits"].values())
    blocks = out.getvalue().split("\ntask ")
    assert missed > 0
    assert out.getvalue().count(", not first\n") == missed
    for block in blocks:
        taught = block.split(" taught ")[1].split(",")[0]
        assert "    node " in block or "is not in the first" in block
        assert taught.split(":")[0] in ("right", "renewed")  # only good lessons are taught


def test_the_staleness_and_review_gate_arms_report_what_they_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review gate whose reviewer errs decides every held edit, some wrongly; what the arms held,
    decided and archived is printed beside the table and kept in the figures."""
    argv = ["--tasks", "120", "--seeds", "1", "--worlds", "mixed-j30", "--arms", "stale-10,review-k3-e30"]
    argv += ["--consolidate-every", "10", "--jobs", "1", "--no-progress", "--no-plot"]
    argv += ["--out", str(tmp_path / "results.json"), "--results-key", "quality_lifecycle"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "staleness and review (summed over seeds" in printed
    figures = json.loads((tmp_path / "results.json").read_text())["quality_lifecycle"]["figures"]["mixed-j30"]
    gate = figures["review-k3-e30"]["outcomes"]
    assert gate["held"] > 0
    assert gate["review_approved"] + gate["review_rejected"] == gate["held"]  # every held edit decided
    assert figures["stale-10"]["outcomes"].get("held", 0) == 0
