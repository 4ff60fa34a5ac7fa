"""The long real-process runs of test_cluster.py (make test-slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_cluster_benchmark_runs_and_records_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    subprocess.run(
        [sys.executable, "-m", "bench.cluster", "--quick", "--out", str(out)], check=True, timeout=600
    )
    doc = json.loads(out.read_text())["cluster"]
    for row in ("one_server", "one_server_tcp", "cluster", "cluster_wait_1"):
        assert doc[row]["applied"] == 200 and doc[row]["report"]["p50_ms"] > 0
    assert doc["cluster"]["vs_one_server_tcp"]["consolidate_throughput"] > 0
