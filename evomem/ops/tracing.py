"""An optional OpenTelemetry trace that follows one event from ``report()`` through the stream to
its edits (the ``otel`` extra: ``pip install 'evograph-mem[otel]'``).

``report()`` opens a producer span and writes its W3C context into the event (``trace_context``); the
event carries it through the HTTP service and the Redis stream; the consolidation that applies it
opens a consumer span under that context, with one child span per edit. evomem uses the OpenTelemetry
API only: an application that configures a tracer provider sees the spans in its own traces;
``EVOMEM_OTEL_EXPORTER`` configures one for evomem's own processes (workers, service, MCP server).
Without the package every function here does nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from evomem.logs import get_logger

if TYPE_CHECKING:
    from evomem.core.ports import ApplyResult, Entry
    from evomem.settings import Settings
    from schemas import TaskEvent

log = get_logger("evomem.tracing")

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind
except ImportError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]

TRACER = "evomem"
_provider: Any = None


def available() -> bool:
    return trace is not None


@contextlib.contextmanager
def reporting(event: TaskEvent) -> Iterator[TaskEvent]:
    """Around a report: a producer span, and the event with that span's context written into it."""
    if trace is None or event.trace_context is not None:
        yield event
        return
    from schemas.models import TraceContext

    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        "evomem.report",
        kind=SpanKind.PRODUCER,
        attributes={
            "evomem.event_id": str(event.event_id),
            "evomem.namespace": event.namespace,
            "evomem.status": event.status,
            "messaging.system": "redis",
            "messaging.operation.type": "send",
        },
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if "traceparent" not in carrier:  # no valid span to continue (no tracer provider configured)
            yield event
            return
        context = TraceContext(
            traceparent=carrier["traceparent"], tracestate=carrier.get("tracestate") or None
        )
        yield event.model_copy(update={"trace_context": context})


def consolidated(event: TaskEvent, entry: Entry, result: ApplyResult, started_ns: int) -> None:
    """After an event's edits are committed: its consumer span (from the batch's start) and a span per
    edit, under the context the event carried."""
    if trace is None or event.trace_context is None:
        return
    carrier = {"traceparent": event.trace_context.traceparent}
    if event.trace_context.tracestate:
        carrier["tracestate"] = event.trace_context.tracestate
    parent = propagate.extract(carrier)
    tracer = trace.get_tracer(TRACER)
    span = tracer.start_span(
        "evomem.consolidate",
        context=parent,
        kind=SpanKind.CONSUMER,
        start_time=started_ns,
        attributes={
            "evomem.event_id": str(event.event_id),
            "evomem.namespace": event.namespace,
            "evomem.replayed": result.replayed,
            "evomem.deliveries": entry.deliveries,
            "messaging.system": "redis",
            "messaging.destination.name": "em:events",
            "messaging.message.id": entry.id,
            "messaging.operation.type": "process",
        },
    )
    inside = trace.set_span_in_context(span)
    for o in result.outcomes:
        attributes = {"evomem.op": o.op, "evomem.outcome": o.outcome}
        for name, value in (("evomem.insight_id", o.insight_id), ("evomem.new_id", o.new_id)):
            if value:
                attributes[name] = value
        tracer.start_span(f"evomem.edit {o.op}", context=inside, attributes=attributes).end()
    span.end()


def configure(settings: Settings) -> None:
    """A tracer provider for this evomem process, when ``EVOMEM_OTEL_EXPORTER`` asks for one: ``console``
    (one JSON line per span on stderr) or ``otlp`` (OTLP over HTTP, to ``OTEL_EXPORTER_OTLP_ENDPOINT``; needs
    ``opentelemetry-exporter-otlp-proto-http``). Call it after a fork, not before."""
    global _provider
    if settings.otel_exporter == "none":
        return
    if trace is None:
        log.warning("tracing.unavailable", reason="EVOMEM_OTEL_EXPORTER is set but the otel extra is missing")
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    exporter: Any
    if settings.otel_exporter == "console":
        # one JSON line per span on the process's own stderr: never stdout, which is the MCP stdio
        # transport's, and not sys.stderr, which Celery redirects into its log
        exporter = ConsoleSpanExporter(
            out=sys.__stderr__ or sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n"
        )
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": settings.otel_service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider
    atexit.register(provider.shutdown)


def flush(timeout_ms: int = 5000) -> None:
    """Export what is buffered (a Celery child may end without running ``atexit``)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


__all__ = ["available", "configure", "consolidated", "flush", "reporting"]
