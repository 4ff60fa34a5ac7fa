"""The tenant-count and wrk benchmarks end to end at a tiny size (``--quick``): they run on the
embedded stack and real service processes and write their keys of the results file. No figure is
asserted beyond what does not depend on the machine: the files a namespace and the spread of
connections over the processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import child_env

ROOT = Path(__file__).resolve().parents[2]


def test_bench_tenants_quick_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "bench.tenants", "--quick", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, env=child_env(), check=True, capture_output=True, text=True)
    doc = json.loads(out.read_text())["tenants"]
    assert set(doc["spreads"]) == {"1", "10", "100", "500"}
    widest = doc["spreads"]["500"]
    assert widest["events_applied"] == 500 and widest["tiers"]["shared_namespaces"] == 500
    assert widest["files_per_namespace"] <= 5
    assert {c["name"].split(" at ")[0] for c in doc["checks"]} >= {"consolidation", "retrieve p50"}


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_bench_wrk_quick_spreads_the_connections(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "bench.wrk", "--quick", "--connections", "32", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, env=child_env(), check=True, capture_output=True, text=True)
    runs = json.loads(out.read_text())["wrk"]["runs"]
    assert runs["1x32"]["qps"] > 0 and runs["2x32"]["non_2xx"] == 0
    assert runs["2x32"]["largest_share"] <= 0.6
