"""`python -m bench.pipeline --quick` end to end: real worker processes consolidate, and the figures
are recorded. It counted applied events by a key pattern the key layout had since changed, so its
worker runs waited for events that were applied all along and failed; nothing ran it in between."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_pipeline_benchmark_runs_real_workers_and_records_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    subprocess.run(
        [sys.executable, "-m", "bench.pipeline", "--quick", "--out", str(out)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    doc = json.loads(out.read_text())["pipeline"]
    assert doc["quick"] is True
    assert doc["in_process"]["events"] == 300
    rows = doc["throughput"]
    assert [r["processes"] for r in rows] == [1, 2]
    assert all(r["events"] == 300 and r["events_per_s"] > 0 for r in rows)
    assert doc["report"]["n"] == 200 and doc["report"]["p50_ms"] > 0
    assert doc["report_to_served"]["n"] == 20 and doc["report_to_served"]["not_served_within_10s"] == 0
