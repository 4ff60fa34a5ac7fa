"""The pump asks Redis for backlog in a thread of its own: the worker's event loop, which also fires
the tasks' time limits, never waits on Redis (a late soft limit killed pool processes that had
already finished their task, and once the whole worker)."""

from __future__ import annotations

import threading

import redis

from evomem.adapters.redis.events import EventStream
from evomem.errors import StoreError, TransientError
from tests.support.pipeline_helpers import event, wait_for
from workers.pump import BacklogWatch


def _watch(has_backlog: object = lambda: True, queued: int = 0, concurrency: int = 4) -> BacklogWatch:
    return BacklogWatch(has_backlog, lambda: queued, lambda: concurrency, 0.01)  # type: ignore[arg-type]


def test_the_queue_is_topped_up_to_the_concurrency_once_per_check() -> None:
    watch = _watch(queued=1)
    assert watch.take() == (0, None), "nothing before the first check"
    watch.check()
    assert watch.take() == (3, None)
    assert watch.take() == (0, None), "an answer is handed over once"
    assert _checked(_watch(has_backlog=lambda: False)) == (0, None)
    assert _checked(_watch(queued=9)) == (0, None)


def test_a_failed_check_is_reported_once_and_sends_nothing() -> None:
    def unreachable() -> bool:
        raise TransientError("redis unreachable: connection refused")

    def broken() -> bool:
        raise StoreError("redis refused XINFO: WRONGTYPE")

    assert _checked(_watch(unreachable)) == (
        0,
        ("pump.redis_unreachable", "redis unreachable: connection refused"),
    )
    wanted, error = _checked(_watch(broken))
    assert wanted == 0 and error is not None and error[0] == "pump.check_failed" and "WRONGTYPE" in error[1]


def test_taking_the_answer_never_waits_on_a_check_that_hangs() -> None:
    release = threading.Event()
    entered = threading.Event()

    def hanging() -> bool:
        entered.set()
        release.wait(30)
        return True

    watch = _watch(hanging)
    watch.start()
    try:
        assert entered.wait(5)
        taken: list[tuple[int, tuple[str, str] | None]] = []
        taker = threading.Thread(target=lambda: taken.append(watch.take()))
        taker.start()
        taker.join(10)  # a take() that waited on the check would wait for the release, never given
        assert taken == [(0, None)] and not release.is_set(), "take() waited on the hanging check"
        release.set()
        wait_for(lambda: watch.take()[0] == 4, 5, "the check's answer once Redis answers")
    finally:
        release.set()
        watch.stop()


def test_the_thread_keeps_checking_after_a_check_that_raised() -> None:
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in one check")
        return True

    watch = _watch(flaky)
    watch.start()
    try:
        wait_for(lambda: len(calls) >= 3, 5, "more checks after the failed one")
    finally:
        watch.stop()
    assert not watch._thread or not watch._thread.is_alive()


def test_backlog_is_read_from_the_real_stream(redis_client: redis.Redis) -> None:
    stream = EventStream(redis_client)
    watch = BacklogWatch(stream.has_backlog, lambda: 0, lambda: 2, 0.01)
    assert _checked(watch) == (0, None)
    stream.publish(event("pump-ns", "Stack block A on block B", "resolved"))
    assert _checked(watch) == (2, None)
    (entry,) = stream.read("c1", 10)
    assert _checked(watch) == (2, None), "read and not acked: still backlog"
    stream.ack([entry.id])
    assert _checked(watch) == (0, None)


def _checked(watch: BacklogWatch) -> tuple[int, tuple[str, str] | None]:
    watch.check()
    return watch.take()
