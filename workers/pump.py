"""The pump: a step in each Celery worker's main process that turns stream backlog into tasks.

Every ``pump_interval_s`` it asks Redis whether any event waits (new, or pending under a consumer)
and, if so, tops the task queue up to the worker's concurrency. Several workers pumping at once
cannot flood the queue: each only fills it up to its own pool size. Events themselves never travel
through Celery; they stay in the stream, with its delivery counts and dead letters.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps

from evomem.errors import TransientError
from evomem.logs import get_logger
from evomem.runtime import Runtime, connect_broker, connect_redis
from workers.config import QUEUE, TASK_NAME, settings_of

log = get_logger("evomem.pump")


class Pump(bootsteps.StartStopStep):
    requires = ("celery.worker.components:Timer", "celery.worker.components:Pool")

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None
        self.runtime: Runtime | None = None
        self.broker: Any = None

    def start(self, worker: Any) -> None:
        settings = settings_of(worker.app)
        self.runtime = Runtime(settings, connect_redis(settings), None)
        self.broker = connect_broker(settings)  # the queue's Redis: the same one unless BROKER_URL
        self.tref = worker.timer.call_repeatedly(settings.pump_interval_s, self.tick, (worker,), priority=10)

    def tick(self, worker: Any) -> None:
        assert self.runtime is not None
        try:
            if not self.runtime.events.has_backlog():
                return
            queued = int(self.broker.llen(QUEUE))
            for _ in range(max(0, int(worker.concurrency) - queued)):
                worker.app.send_task(TASK_NAME, queue=QUEUE)
        except (TransientError, OSError) as exc:
            log.warning("pump.redis_unreachable", error=str(exc))

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
        if self.runtime is not None:
            self.runtime.close()
        if self.broker is not None:
            self.broker.close()


__all__ = ["Pump"]
