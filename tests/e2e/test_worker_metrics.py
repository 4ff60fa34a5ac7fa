"""Worker metrics in Prometheus format: counted where batches are consolidated, summed over Celery's
prefork children by the worker's endpoint, parsed by prometheus_client's own parser; the Grafana
dashboard uses only metric names that the service and a worker expose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from evomem import Memory, Settings
from evomem.ops.consolidation_metrics import scrape_registry, worker_metrics
from evomem.runtime import fleet_reader, open_worker

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "evomem-dashboard.json"


def parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}} through prometheus_client's parser (raises if malformed)."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, {})
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(metrics: dict[str, Any], name: str, **labels: str) -> float:
    return float(metrics.get(name, {}).get(tuple(sorted(labels.items())), 0.0))


def _events(mem: Memory, namespace: str, n: int, client: redis.Redis) -> None:
    for i in range(n):
        mem.report(
            None,
            status="resolved",
            namespace=namespace,
            query=f"Verify claim {i} about {namespace}",
            proposed_insight=f"Lesson {i} of {namespace}.",
        )
    client.xadd("em:events", {"event": b'{"namespace": "x", "status": "resolved"}'})  # no query: dead letter


def test_a_worker_counts_its_batches_and_reads_the_fleet_from_redis(
    settings: Settings, redis_client: redis.Redis
) -> None:
    registry = scrape_registry(fleet_reader(redis_client, settings), None)
    before = parse(generate_latest(registry).decode())
    with Memory.open(settings, index=False) as mem:
        _events(mem, "alpha", 3, redis_client)
    worker = open_worker(settings)
    try:
        assert worker.drain(budget_s=30, block_ms=0).events == 4
    finally:
        worker.close()
    after = parse(generate_latest(registry).decode())

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("evomem_worker_events_total", result="applied") == 3
    assert grew("evomem_worker_events_total", result="dead_lettered") == 1
    assert grew("evomem_worker_dead_letters_total") == 1
    assert grew("evomem_worker_decisions_total", operation="ADD", outcome="added") == 3
    assert grew("evomem_worker_batches_total") >= 1
    assert grew("evomem_worker_batch_seconds_count") == grew("evomem_worker_batches_total")
    assert value(after, "evomem_dead_letters") == 1 and value(after, "evomem_stream_lag") == 0
    assert value(after, "evomem_worker_redis_up") == 1
    assert "evomem_llm_tokens" in after and "evomem_llm_estimated_cost_usd" in after


def test_a_scrape_answers_while_redis_is_away(settings: Settings) -> None:
    class Away:
        def __getattr__(self, name: str) -> Any:
            def fail(*_: Any, **__: Any) -> Any:
                raise redis.ConnectionError("gone")

            return fail

    metrics = parse(generate_latest(scrape_registry(fleet_reader(Away(), settings), None)).decode())
    assert value(metrics, "evomem_worker_redis_up") == 0
    assert worker_metrics().registry is not None
