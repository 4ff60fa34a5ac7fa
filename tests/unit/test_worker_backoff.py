"""A worker task that fails because Redis is unreachable waits before it fails, longer each time in a
row: the pump keeps the queue topped up, so an outage is not retried as fast as tasks can fail."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import workers.tasks as tasks
from evomem.backoff import capped_doubling
from evomem.errors import TransientError
from evomem.settings import Settings


class _Report:
    def as_dict(self) -> dict[str, object]:
        return {"events": 1}


class _Worker:
    """Fails on an unreachable Redis ``failures`` times, then drains."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def drain(self, budget_s: float, block_ms: int | None = None) -> _Report:
        if self.failures:
            self.failures -= 1
            raise TransientError("redis unreachable while reading events")
        return _Report()


def test_the_wait_doubles_with_each_failure_in_a_row_and_a_success_resets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []
    # the module's own reference to ``time``: patching time.sleep itself would also catch the sleeps
    # of any other thread of the test process
    monkeypatch.setattr(tasks, "time", SimpleNamespace(sleep=waits.append))
    monkeypatch.setattr(tasks, "_failures", 0)
    monkeypatch.setattr(tasks, "_worker", _Worker(failures=7))
    outcomes: list[Any] = []
    for _ in range(8):
        try:
            outcomes.append(tasks.drain_for_a_while(Settings()))
        except TransientError:
            outcomes.append("failed")
    assert outcomes == ["failed"] * 7 + [{"events": 1}]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    monkeypatch.setattr(tasks, "_worker", _Worker(failures=1))
    with pytest.raises(TransientError):
        tasks.drain_for_a_while(Settings())
    assert waits[-1] == 0.1, "a success in between starts the waits over"


def test_the_wait_stays_within_a_quarter_of_the_soft_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that waited out its soft time limit would end as the limit's signal comes, and the
    signal can then reach the pool process after its task (see ``workers.pump``)."""
    waits: list[float] = []
    monkeypatch.setattr(tasks, "time", SimpleNamespace(sleep=waits.append))
    monkeypatch.setattr(tasks, "_failures", 0)
    monkeypatch.setattr(tasks, "_worker", _Worker(failures=5))
    fast = Settings(batch_time_limit_s=1.2, claim_idle_ms=1500, visibility_timeout_s=8)
    for _ in range(5):
        with pytest.raises(TransientError):
            tasks.drain_for_a_while(fast)
    assert waits == [0.1, 0.2, 0.3, 0.3, 0.3]


def test_the_shared_doubling_starts_at_its_base_and_never_passes_its_cap() -> None:
    assert capped_doubling(0, 0.1, 2.0) == 0.0
    assert [capped_doubling(n, 0.05, 5.0) for n in (1, 2, 3, 7, 8)] == [0.05, 0.1, 0.2, 3.2, 5.0]
    # hours of failures in a row (2.0 ** 1024 overflows a float): still the cap, not an error
    assert capped_doubling(10**6, 0.1, 2.0) == 2.0
    assert tasks.backoff_s(10**6) == tasks.BACKOFF_CAP_S
