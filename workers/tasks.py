"""Celery tasks: thin, each calls the library and returns. The loop is ``evomem.pipeline.batches``,
built for this process by ``evomem.runtime.open_worker``."""

from __future__ import annotations

import time
from typing import Any

from celery import signals

from evomem.backoff import capped_doubling
from evomem.errors import TransientError
from evomem.ops import tracing
from evomem.pipeline.batches import ConsolidationWorker
from evomem.runtime import open_worker
from evomem.settings import Settings
from workers.app import app
from workers.config import TASK_NAME, settings_of

_worker: ConsolidationWorker | None = None
#: After a task that failed because Redis was unreachable, the worker process waits this long before
#: failing it, doubled for each such failure in a row up to ``BACKOFF_CAP_S``. The pump keeps the
#: queue topped up, so without the wait an outage is retried as fast as tasks can fail, each failure
#: logged with its traceback (about a dozen a second per worker in the failover test). The events
#: wait in the stream meanwhile. The wait never passes a quarter of the task's soft time limit, so
#: that the task ends well before the limit's signal is due: a signal that comes as the task ends
#: can reach the pool process after it (see ``workers.pump``).
BACKOFF_BASE_S = 0.1
BACKOFF_CAP_S = 2.0
_failures = 0  # tasks failed in a row on an unreachable Redis, in this process


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
    return drain_for_a_while(settings_of(app))


def drain_for_a_while(settings: Settings) -> dict[str, object]:
    """The task's work, given its settings (a test calls it without configuring the Celery app,
    which would start the embedded Redis of the default DATA_DIR when no REDIS_URL is set)."""
    global _failures
    try:
        report = process_worker().drain(budget_s=settings.batch_time_limit_s / 2).as_dict()
    except TransientError:
        _failures += 1
        time.sleep(min(backoff_s(_failures), settings.batch_time_limit_s / 4))
        raise
    finally:
        tracing.flush()
    _failures = 0
    return report


def backoff_s(failures: int) -> float:
    """The wait after the ``failures``-th task in a row failed on an unreachable Redis."""
    return capped_doubling(failures, BACKOFF_BASE_S, BACKOFF_CAP_S)
