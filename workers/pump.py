"""The pump: a step in each Celery worker's main process that turns stream backlog into tasks.

Every ``pump_interval_s`` it asks Redis whether any event waits (new, or pending under a consumer)
and, if so, tops the task queue up to the worker's concurrency. Several workers pumping at once
cannot flood the queue: each only fills it up to its own pool size. Events themselves never travel
through Celery; they stay in the stream, with its delivery counts and dead letters.

The asking is done by a thread of its own (``BacklogWatch``), never on the worker's event loop: that
loop also reads the pool's results and fires the tasks' time limits, and a Redis call that blocks
it (a connect that waits out its timeout, a cluster client trying node after node while the
cluster restarts) makes the soft time limits fire late, at pool processes that have already
finished their task. Such a signal lands between two messages of billiard's pipe, which kills the
pool process and can take the whole worker down with an unpicklable message. The event loop only
takes the answer and sends the tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps

from evomem.errors import TransientError
from evomem.logs import get_logger
from evomem.runtime import Runtime, connect_broker, connect_redis
from workers.config import QUEUE, TASK_NAME, settings_of

log = get_logger("evomem.pump")


class BacklogWatch:
    """How many tasks the queue lacks, asked of Redis every ``interval_s`` in a daemon thread.

    ``take`` hands the latest answer over once (then 0 until the next check) with the error of that
    check, if any; it never waits on Redis."""

    def __init__(
        self,
        has_backlog: Callable[[], bool],
        queued: Callable[[], int],
        concurrency: Callable[[], int],
        interval_s: float,
    ) -> None:
        self._has_backlog = has_backlog
        self._queued = queued
        self._concurrency = concurrency
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._wanted = 0
        self._error: tuple[str, str] | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="evomem-pump", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.check()

    def check(self) -> None:
        """One look at Redis; its answer replaces the previous one. Nothing is logged here: a
        fork of the pool while this thread held a logging lock would leave the lock held in the
        new process."""
        error: tuple[str, str] | None = None
        try:
            wanted = max(0, self._concurrency() - self._queued()) if self._has_backlog() else 0
        except (TransientError, OSError) as exc:
            wanted, error = 0, ("pump.redis_unreachable", str(exc))
        except Exception as exc:  # the thread must outlive any one failed check
            wanted, error = 0, ("pump.check_failed", f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._wanted, self._error = wanted, error

    def take(self) -> tuple[int, tuple[str, str] | None]:
        with self._lock:
            taken = self._wanted, self._error
            self._wanted, self._error = 0, None
        return taken


class Pump(bootsteps.StartStopStep):
    requires = ("celery.worker.components:Timer", "celery.worker.components:Pool")

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None
        self.runtime: Runtime | None = None
        self.broker: Any = None
        self.watch: BacklogWatch | None = None

    def start(self, worker: Any) -> None:
        settings = settings_of(worker.app)
        runtime = self.runtime = Runtime(settings, connect_redis(settings), None)
        broker = self.broker = connect_broker(settings)  # the queue's Redis: the same one unless BROKER_URL
        self.watch = BacklogWatch(
            runtime.events.has_backlog,
            lambda: int(broker.llen(QUEUE)),
            lambda: int(worker.concurrency),
            settings.pump_interval_s,
        )
        self.watch.start()
        self.tref = worker.timer.call_repeatedly(settings.pump_interval_s, self.tick, (worker,), priority=10)

    def tick(self, worker: Any) -> None:
        """On the worker's event loop: send what the watch found lacking, and say why it found
        nothing when a check failed."""
        assert self.watch is not None
        wanted, error = self.watch.take()
        if error is not None:
            event, message = error
            log.warning(event, error=message)
        for _ in range(wanted):
            worker.app.send_task(TASK_NAME, queue=QUEUE)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
        if self.watch is not None:
            self.watch.stop()
        if self.runtime is not None:
            self.runtime.close()
        if self.broker is not None:
            self.broker.close()


__all__ = ["BacklogWatch", "Pump"]
