"""The acceptance probes of the second hardening round (``python -m bench.edge``), shortened: a head
flood on ``serve`` and ``mcp --http`` grows neither by 50 MB, one client's 1,000 half-open heads do
not lock another client out, and a SIGSTOPped Redis leaves health answering 503 naming it."""

from __future__ import annotations

from bench import edge


def test_the_edge_holds_under_the_probes_of_issue_41() -> None:
    results = edge.run(flood_connections=8, flood_seconds=8.0, half_open_count=1000)
    for server in ("head_flood_serve", "head_flood_mcp"):
        assert results[server]["rss_growth_mb"] < 50, results[server]
    half_open = results["half_open_serve"]
    assert half_open["other_client_retrieve_status"] == 200, half_open
    assert half_open["held_open"] <= 256 and half_open["refused_503"] > 0, half_open
    stall = results["stall_serve"]
    assert stall["healthz"]["status"] == 503 and stall["healthz"]["redis"] != "ok", stall
    assert stall["openapi"]["status"] == 200 and stall["metrics"]["status"] == 200, stall
    assert stall["retrieve"]["status"] == 503, stall
    assert stall["event_after_status"] == 202, stall
