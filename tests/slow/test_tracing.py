"""The long real-process runs of test_tracing.py (make test-slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evomem import Memory, Settings
from tests.e2e.test_tracing import _learn
from tests.support.pipeline_helpers import Workers, wait_for


@pytest.mark.slow
def test_a_worker_process_continues_the_reporters_trace(
    settings: Settings, redis_url: str, redis_client: redis.Redis, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """A real ``evomem worker`` with ``EVOMEM_OTEL_EXPORTER=console``: its consumer span carries the
    trace id of the span that reported the event in this process."""
    with (
        Memory.open(settings, index=False) as mem,
        trace.get_tracer("agent").start_as_current_span("agent.task") as agent,
    ):
        _learn(mem, "Verify: Mohra is a car")
    trace_id = f"0x{agent.get_span_context().trace_id:032x}"
    workers = Workers(
        redis_url, tmp_path, {"EVOMEM_OTEL_EXPORTER": "console", "EVOMEM_DATA_DIR": str(tmp_path)}
    )
    workers.start(1, concurrency=1)
    log = tmp_path / "worker-0.log"

    def exported() -> list[dict[str, object]]:
        found = []
        for line in log.read_text(errors="replace").splitlines():  # the console exporter: a span a line
            if line.startswith('{"name"'):
                found.append(json.loads(line))
        return found

    try:
        wait_for(
            lambda: any(s.get("name") == "evomem.edit ADD" for s in exported()), 60, "the worker's spans"
        )
    finally:
        workers.stop()
    by_name = {str(s["name"]): s for s in exported()}
    consolidate = by_name["evomem.consolidate"]
    assert consolidate["context"]["trace_id"] == trace_id  # type: ignore[index]
    assert by_name["evomem.edit ADD"]["context"]["trace_id"] == trace_id  # type: ignore[index]
