"""Prometheus metrics of the consolidation workers, served by each worker (``evomem worker
--metrics-port``) next to the service's ``/metrics``.

Celery's prefork pool consolidates in child processes, which a scrape of the parent cannot see. So
the worker runs ``prometheus_client`` in its multiprocess mode: ``evomem worker`` sets
``PROMETHEUS_MULTIPROC_DIR`` (a fresh directory under ``DATA_DIR/run``) before anything imports
``prometheus_client``; every child writes its counters to memory-mapped files there, and the parent's
HTTP endpoint sums them (``MultiProcessCollector``), dead children's included, so counters never go
back. Beside these per-process counters, the endpoint reads the fleet's state from Redis at scrape
time — stream length, pending and lag, dead letters, LLM tokens and estimated cost — as gauges (the
same value from every worker: aggregate them with ``max``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from evomem.logs import get_logger

if TYPE_CHECKING:
    from evomem.settings import Settings

log = get_logger("evomem.worker.metrics")


class BatchReport(Protocol):
    """What a batch's report tells the metrics (``evomem.pipeline.consolidate.ConsolidationReport``)."""

    @property
    def events(self) -> int: ...

    @property
    def dead_lettered(self) -> int: ...

    @property
    def decisions(self) -> Mapping[tuple[str, str], int]: ...


#: Reads the fleet's state at scrape time: the event stream's figures and the LLM usage
#: (``evomem.runtime.fleet_reader``).
FleetReader = Callable[[], tuple[dict[str, int], dict[str, Any]]]

BATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class WorkerMetrics:
    """What a consolidating process counts. One per process (``worker_metrics()``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "evomem_worker_events",
            "Events consolidated, by result: applied, replayed (already applied), dead_lettered, deferred.",
            ("result",),
            registry=r,
        )
        self.batches = Counter("evomem_worker_batches", "Batches consolidated.", registry=r)
        self.batch_seconds = Histogram(
            "evomem_worker_batch_seconds",
            "Time to consolidate one batch: read to ack.",
            buckets=BATCH_BUCKETS_S,
            registry=r,
        )
        self.decisions = Counter(
            "evomem_worker_decisions",
            "Edits applied, by operation (ADD, KEEP, ARCHIVE, REVISE) and outcome.",
            ("operation", "outcome"),
            registry=r,
        )
        self.dead_letters = Counter(
            "evomem_worker_dead_letters", "Events this worker sent to the dead letters.", registry=r
        )

    def observe(self, report: BatchReport, seconds: float) -> None:
        if report.events == 0:
            return
        self.batches.inc()
        self.batch_seconds.observe(seconds)
        for result in ("applied", "replayed", "dead_lettered", "deferred"):
            n = getattr(report, result)
            if n:
                self.events.labels(result).inc(n)
        if report.dead_lettered:
            self.dead_letters.inc(report.dead_lettered)
        for (operation, outcome), n in report.decisions.items():
            self.decisions.labels(operation, outcome).inc(n)


_metrics: WorkerMetrics | None = None


def worker_metrics() -> WorkerMetrics:
    """This process's worker metrics (in multiprocess mode, written to its own files)."""
    global _metrics
    if _metrics is None:
        _metrics = WorkerMetrics()
    return _metrics


class FleetCollector(Collector):
    """Gauges read from Redis at scrape time: what the whole fleet shares."""

    def __init__(self, read: FleetReader) -> None:
        self.read = read

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily("evomem_worker_redis_up", "1 while the worker's Redis answers a scrape.")
        try:
            info, usage = self.read()
        except Exception as exc:  # a scrape must still answer, and say Redis is away
            log.warning("metrics.redis_unreachable", error=f"{type(exc).__name__}: {exc}")
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        for name, key, text in (
            ("evomem_stream_length", "length", "Entries in the event stream."),
            ("evomem_stream_pending", "pending", "Events read by a worker and not yet acknowledged."),
            ("evomem_stream_lag", "lag", "Events not yet read by any worker."),
            ("evomem_dead_letters", "dead_letters", "Entries in the dead-letter stream."),
        ):
            yield GaugeMetricFamily(name, text, value=float(info[key]))
        tokens = GaugeMetricFamily(
            "evomem_llm_tokens", "LLM tokens spent by the fleet, by model and kind.", labels=("model", "kind")
        )
        calls = GaugeMetricFamily(
            "evomem_llm_calls", "LLM calls made by the fleet, by model.", labels=("model",)
        )
        cost = GaugeMetricFamily(
            "evomem_llm_estimated_cost_usd",
            "Estimated LLM cost of the fleet (tokens × list price), by model with a known price.",
            labels=("model",),
        )
        for model, m in (usage.get("models") or {}).items():
            tokens.add_metric([model, "prompt"], float(m.get("prompt_tokens", 0)))
            tokens.add_metric([model, "completion"], float(m.get("completion_tokens", 0)))
            calls.add_metric([model], float(m.get("calls", 0)))
            if m.get("estimated_cost_usd") is not None:
                cost.add_metric([model], float(m["estimated_cost_usd"]))
        yield tokens
        yield calls
        yield cost


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        yield from self.registry.collect()


# -- serving --------------------------------------------------------------------------------------
def prepare_multiprocess(settings: Settings) -> Path:
    """A fresh directory for the children's metric files, named in the environment before
    ``prometheus_client`` is imported by anything that records (the children inherit it)."""
    directory = settings.data_dir.resolve() / "run" / f"worker-metrics-{os.getpid()}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    import prometheus_client.values as values

    # If prometheus_client was imported before the variable was set, switch its value class now:
    # metrics created from here on (the children's) write to the directory.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    return directory


def scrape_registry(fleet: FleetReader, multiprocess_dir: Path | None) -> CollectorRegistry:
    """The registry a worker's endpoint serves: every process's counters, and the fleet's gauges."""
    registry = CollectorRegistry()
    if multiprocess_dir is None:
        registry.register(_Forward(worker_metrics().registry))  # this process's own counters
    else:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=str(multiprocess_dir))  # type: ignore[no-untyped-call]
    registry.register(FleetCollector(fleet))
    return registry


def serve(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, Any]:
    """``/metrics`` (any path, as prometheus_client serves it) on a thread; returns (server, thread)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=registry)


__all__ = [
    "FleetCollector",
    "WorkerMetrics",
    "prepare_multiprocess",
    "scrape_registry",
    "serve",
    "worker_metrics",
]
