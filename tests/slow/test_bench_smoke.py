"""The long real-process runs of test_bench_smoke.py (make test-slow)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench import http as bench_http


@pytest.mark.slow
def test_the_http_benchmark_drives_the_service_from_another_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"pipeline": {"kept": True}}))
    parser = argparse.ArgumentParser()
    bench_http.add_arguments(parser)
    args = parser.parse_args(
        [
            "--queries",
            "300",
            "--insights",
            "150",
            "--concurrency",
            "1,4",
            "--requests",
            "15",
            "--warmup",
            "3",
            "--level-seconds",
            "5",
            "--profile-requests",
            "6",
            "--scale",
            "60,120",
            "--scale-queries",
            "200",
            "--scale-iterations",
            "10",
            "--variants",
            "shipped,current,workers,baseline",
            "--baseline",
            "HEAD",
            "--no-progress",
            "--out",
            str(out),
            "--data-dir",
            str(tmp_path / "data"),
        ]
    )
    assert bench_http.run(args) == 0

    doc = json.loads(out.read_text())
    assert doc["pipeline"] == {"kept": True}
    http = doc[bench_http.HTTP_KEY]
    modes = {(r["mode"], r["variant"], r["concurrency"]) for r in http["levels"]}
    assert modes == {
        (m, v, c)
        for c in (1, 4)
        for m, v in (
            ("in_process", "-"),
            ("http", "shipped"),
            ("http", "current"),
            ("http", "workers"),
            ("http", "baseline"),
        )
    }
    assert http["targets"]["workers"]["qps_ratio"] > 0 and http["targets"]["workers"]["processes"] == 2
    for r in http["levels"]:
        assert r["errors"] == 0 and r["requests"] > 0 and r["qps"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert any(r["served_mean"] > 0 for r in http["levels"] if r["mode"] == "http")  # real answers came back
    profile = http["profile"][0]
    assert profile["requests"] > 0 and set(bench_http.SERVER_STAGES) <= profile["stages_p50_ms"].keys()
    assert http["cprofile"]["groups_ms_per_request"]
    points = doc[bench_http.SCALE_KEY]["points"]
    assert [p["n_insights"] for p in points] == [60, 120]
    assert all(p["p50_ms"] > 0 and p["index_insights"] == p["n_insights"] for p in points)
    for p in points:  # Eq. 7 exact: every served insight is the one computed from Redis
        assert p["recall_vs_exact"]["recall"] == 1.0 and p["recall_vs_exact"]["tasks"] > 0
        service = p["service"]
        assert service["requests"] > 0 and service["errors"] == 0 and service["p50_ms"] > 0
        assert service["start_s"] > 0 and p["rss_mb_after"] == service["memory_mb"]["VmRSS"] > 0
        assert service["replica_copy_s"] is not None  # the second replica was missing: copied
        # the word-set cache was warmed before the timed requests, in process and in the service
        assert 0 < p["text_cache_warmed"] <= p["n_insights"]
        assert service["text_cache"]["warming"] is False and service["text_cache"]["entries"] > 0
    printed = capsys.readouterr().out
    assert "HTTP shipped" in printed and "HTTP baseline" in printed and "scale curve" in printed
    assert not (tmp_path / "data" / "http").exists()  # stores removed after the run
