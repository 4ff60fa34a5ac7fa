"""The consolidation worker: reclaim what dead consumers left, read a batch, consolidate it.

This is what each Celery worker process runs (``workers.tasks``); it is plain library code so that
it is tested, and usable, without Celery. It needs Redis only — never the Qdrant index, which the
retrieval side's projector keeps in step.
"""

from __future__ import annotations

import os
import socket
import time

from evomem.consolidation import ConsolidationReport, Consolidator
from evomem.controllers import make_controller
from evomem.logs import get_logger
from evomem.ops.worker_metrics import worker_metrics
from evomem.redis_server import Client, EmbeddedRedis, connect
from evomem.settings import Settings
from evomem.stores.redis_graph import RedisGraphStore
from evomem.stream import EventStream
from evomem.tenancy.overrides import NamespaceSettings

log = get_logger("evomem.worker")


def redis_url(settings: Settings) -> str:
    """The URL of the Redis the settings name, starting the embedded one if need be."""
    if settings.redis_url is not None:
        return settings.redis_url
    return EmbeddedRedis(settings.data_dir).ensure()


def default_consumer() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ConsolidationWorker:
    def __init__(self, settings: Settings, client: Client, consumer: str | None = None) -> None:
        self.settings = settings
        self.redis = client
        self.graph = RedisGraphStore(client, degree=settings.query_degree)
        self.stream = EventStream(client, settings.stream_maxlen)
        self.consolidator = Consolidator(
            self.graph,
            self.stream,
            make_controller(settings, client),
            settings,
            max_deliveries=settings.max_deliveries,
            resolve=NamespaceSettings(client, settings),
        )
        self.consumer = consumer or settings.consumer_name or default_consumer()

    @classmethod
    def open(cls, settings: Settings | None = None, consumer: str | None = None) -> ConsolidationWorker:
        settings = settings or Settings()
        return cls(settings, connect(redis_url(settings)), consumer)

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
        t0 = time.perf_counter()
        report = self.consolidator.process(entries)
        worker_metrics().observe(report, time.perf_counter() - t0)
        log.info(
            "batch.consolidated",
            consumer=self.consumer,
            events=report.events,
            applied=report.applied,
            replayed=report.replayed,
            dead_lettered=report.dead_lettered,
        )
        return report

    def drain(self, budget_s: float, block_ms: int | None = None) -> ConsolidationReport:
        """Batches until the stream is empty or ``budget_s`` is spent."""
        total = ConsolidationReport()
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            report = self.run_batch(block_ms)
            if report.events == 0:
                break
            total.merge(report)
        self.stream.trim()
        return total

    def close(self) -> None:
        self.consolidator.controller.close()
        self.redis.close()


__all__ = ["ConsolidationWorker", "default_consumer", "redis_url"]
