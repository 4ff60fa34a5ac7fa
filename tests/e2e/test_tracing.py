"""One event followed by OpenTelemetry from ``report()`` through the stream to its edits: the trace
context travels in the event, in process, through the HTTP service and into a worker process."""

from __future__ import annotations

import threading

import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evomem import Memory, Settings, TaskEvent
from evomem.sdk import RemoteMemory
from evomem.service.server import build_server


def _learn(mem: Memory | RemoteMemory, query: str) -> str:
    mem.report(
        None, status="resolved", namespace="fever", query=query, proposed_insight="Check the vehicle class."
    )
    return query


def _chain(finished: tuple[ReadableSpan, ...], agent: ReadableSpan) -> None:
    """report under the agent's span, consolidate under report, every edit under consolidate."""
    by_name = {s.name: s for s in finished}
    report, consolidate = by_name["evomem.report"], by_name["evomem.consolidate"]
    edits = [s for s in finished if s.name.startswith("evomem.edit ")]
    trace_id = agent.context.trace_id
    assert report.context.trace_id == consolidate.context.trace_id == trace_id
    assert report.parent is not None and report.parent.span_id == agent.context.span_id
    assert consolidate.parent is not None and consolidate.parent.span_id == report.context.span_id
    assert report.kind == trace.SpanKind.PRODUCER and consolidate.kind == trace.SpanKind.CONSUMER
    assert edits and all(
        e.context.trace_id == trace_id
        and e.parent is not None
        and e.parent.span_id == consolidate.context.span_id
        for e in edits
    )
    assert {e.name for e in edits} == {"evomem.edit ARCHIVE"}
    # one judged harmful verdict on a fresh insight: negative evidence (ARCHIVE_MIN is 2)
    assert edits[0].attributes is not None and edits[0].attributes["evomem.outcome"] == "negative_evidence"
    assert consolidate.attributes is not None and consolidate.attributes["messaging.message.id"]


def test_a_trace_follows_an_event_from_report_to_its_edits(
    memory: Memory, spans: InMemorySpanExporter
) -> None:
    query = _learn(memory, "Verify: Mohra is a car")
    memory.consolidate()
    r = memory.retrieve(query, "fever")
    spans.clear()
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("agent.task") as agent:
        memory.report(r, status="failed", insight_feedback={r.insights[0].id: "harmful"})
    memory.consolidate()
    assert isinstance(agent, ReadableSpan)
    _chain(spans.get_finished_spans(), agent)


def test_the_context_travels_through_the_http_service(
    settings: Settings, redis_client: redis.Redis, spans: InMemorySpanExporter
) -> None:
    srv = build_server(settings.model_copy(update={"http_port": 0}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with RemoteMemory(srv.url, None) as remote:
            query = _learn(remote, "Verify: Mohra is a car")
            Memory(srv.service.runtime).consolidate()
            r = remote.retrieve(query, "fever")
            spans.clear()
            with trace.get_tracer("agent").start_as_current_span("agent.task") as agent:
                remote.report(r, status="failed", insight_feedback={r.insights[0].id: "harmful"})
        Memory(srv.service.runtime).consolidate()
    finally:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()
    assert isinstance(agent, ReadableSpan)
    _chain(spans.get_finished_spans(), agent)


def test_an_event_retried_in_another_trace_is_the_same_event(
    memory: Memory, spans: InMemorySpanExporter
) -> None:
    event = TaskEvent(
        namespace="fever", query="Verify: Mohra is a car", status="resolved", proposed_insight="A."
    )
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("first try"):
        memory.report(event)
    with tracer.start_as_current_span("retry"):
        memory.report(event)
    report = memory.consolidate()
    assert report.applied == 1 and report.dead_lettered == 0
    assert memory.stream.info()["dead_letters"] == 0
