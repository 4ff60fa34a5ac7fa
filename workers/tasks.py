"""Celery tasks: thin, each calls the library and returns. The loop is ``evomem.pipeline.worker``,
built for this process by ``evomem.runtime.open_worker``."""

from __future__ import annotations

from typing import Any

from celery import signals

from evomem.ops import tracing
from evomem.pipeline.worker import ConsolidationWorker
from evomem.runtime import open_worker
from workers.app import app
from workers.config import TASK_NAME, settings_of

_worker: ConsolidationWorker | None = None


def process_worker() -> ConsolidationWorker:
    """One stream consumer per worker process, made after the fork (connections are not shared)."""
    global _worker
    if _worker is None:
        _worker = open_worker(settings_of(app))
    return _worker


@signals.worker_process_init.connect
def _fresh_after_fork(**_: Any) -> None:
    global _worker
    _worker = None
    tracing.configure(settings_of(app))  # a span exporter's thread does not survive the fork


@app.task(name=TASK_NAME)
def consolidate() -> dict[str, object]:
    """Drain the event stream for a while: reclaim, read, decide, apply, ack."""
    settings = settings_of(app)
    try:
        return process_worker().drain(budget_s=settings.batch_time_limit_s / 2).as_dict()
    finally:
        tracing.flush()
