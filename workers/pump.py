"""The pump: a step in each Celery worker's main process that turns stream backlog into tasks.

Every ``pump_interval_s`` it asks Redis whether any event waits (new, or pending under a consumer)
and, if so, tops the task queue up to the worker's concurrency. Several workers pumping at once
cannot flood the queue: each only fills it up to its own pool size. Events themselves never travel
through Celery; they stay in the stream, with its delivery counts and dead letters.
"""

from __future__ import annotations

from typing import Any

import redis
from celery import bootsteps

from evomem.adapters.redis.connection import Client, connect
from evomem.adapters.redis.events import EventStream
from evomem.logs import get_logger
from evomem.pipeline.worker import redis_url
from workers.app import QUEUE, settings_of

log = get_logger("evomem.pump")


class Pump(bootsteps.StartStopStep):
    requires = ("celery.worker.components:Timer", "celery.worker.components:Pool")

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None
        self.client: Client | None = None
        self.stream: EventStream | None = None

    def start(self, worker: Any) -> None:
        settings = settings_of(worker.app)
        self.client = connect(redis_url(settings))
        self.stream = EventStream(self.client, settings.stream_maxlen)
        self.tref = worker.timer.call_repeatedly(settings.pump_interval_s, self.tick, (worker,), priority=10)

    def tick(self, worker: Any) -> None:
        assert self.stream is not None and self.client is not None
        try:
            if not self.stream.has_backlog():
                return
            queued = int(self.client.llen(QUEUE))
            for _ in range(max(0, int(worker.concurrency) - queued)):
                worker.app.send_task("evomem.consolidate", queue=QUEUE)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            log.warning("pump.redis_unreachable", error=str(exc))

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
        if self.client is not None:
            self.client.close()


def install(celery_app: Any) -> None:
    celery_app.steps["worker"].add(Pump)


__all__ = ["Pump", "install"]
