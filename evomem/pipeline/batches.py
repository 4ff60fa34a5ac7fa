"""The consolidation loop: reclaim what dead consumers left, read a batch, consolidate it, and say so
in one line per batch.

This is what each Celery worker process runs (``workers.tasks``), built for it by
``evomem.runtime.open_worker``; it is plain library code on the core's ports, so that it is tested,
and usable, without Celery. It needs the event log and the edit store only — never the Qdrant
index, which the retrieval side's projector keeps in step.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable

from evomem.core.ports import EditStore, EventLog
from evomem.errors import TransientError
from evomem.logs import bound, get_logger
from evomem.pipeline.consolidate import ConsolidationReport, Consolidator
from evomem.pipeline.sweep import SweepClock, sweep_stale
from evomem.settings import Settings

log = get_logger("evomem.worker")

#: Told of every batch: its report and how long it took (the worker's Prometheus metrics).
BatchObserver = Callable[[ConsolidationReport, float], None]


class ConsolidationWorker:
    def __init__(
        self,
        consolidator: Consolidator,
        events: EventLog,
        settings: Settings,
        consumer: str,
        observe: BatchObserver | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.consolidator = consolidator
        self.stream = events
        self.settings = settings
        self.consumer = consumer
        self._observe = observe
        self._on_close = on_close
        self._sweeps = SweepClock(settings.stale_sweep_s, consolidator.graph)

    @property
    def graph(self) -> EditStore:
        return self.consolidator.graph

    def run_batch(self, block_ms: int | None = None) -> ConsolidationReport:
        """One batch: entries idle past ``claim_idle_ms`` under another consumer first (the janitor's
        work, done by every worker), else this consumer's own unacked ones, else new ones."""
        s = self.settings
        entries = self.stream.claim_stale(self.consumer, s.claim_idle_ms, s.batch_size)
        if not entries:
            entries = self.stream.read(
                self.consumer, s.batch_size, s.batch_wait_ms if block_ms is None else block_ms
            )
        if not entries:
            return ConsolidationReport()
        # every line logged while the batch runs carries its id and the consumer
        with bound(batch_id=uuid.uuid4().hex[:12], consumer=self.consumer):
            t0 = time.perf_counter()
            try:
                report = self.consolidator.process(entries)
            except TransientError:
                # Redis (or part of a cluster) is away: not the events' fault, so their delivery is
                # given back, or a failover's retries would send them to the dead letters
                with contextlib.suppress(TransientError):
                    self.stream.release(self.consumer, entries)
                raise
            elapsed = time.perf_counter() - t0
            if self._observe is not None:
                self._observe(report, elapsed)
            log.info(  # the canonical line of a batch
                "batch.consolidated",
                events=report.events,
                applied=report.applied,
                replayed=report.replayed,
                dead_lettered=report.dead_lettered,
                deferred=report.deferred,
                first_entry=entries[0].id,
                last_entry=entries[-1].id,
                total_ms=round(elapsed * 1000, 3),
                **{f"{stage}_ms": round(ns / 1e6, 3) for stage, ns in report.stages_ns.items()},
            )
        return report

    def drain(self, budget_s: float, block_ms: int | None = None) -> ConsolidationReport:
        """Batches until the stream is empty or ``budget_s`` is spent."""
        total = ConsolidationReport()
        deadline = time.monotonic() + budget_s
        if self._sweeps.due():  # stale insights: requests on the stream, applied with the events
            sweep_stale(self.consolidator.graph, self.stream, self.consolidator.resolve)
        while time.monotonic() < deadline:
            report = self.run_batch(block_ms)
            if report.events == 0:
                break
            total.merge(report)
        self.stream.trim()
        return total

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()


__all__ = ["BatchObserver", "ConsolidationWorker"]
