"""Stage timings of the unit of work under way (an HTTP request, a batch): code on its path times its
steps with ``stage``, and the unit's canonical log line (``request.served``, ``batch.consolidated``)
carries them. Outside a unit (``recording``) timing a stage costs one context-variable read."""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

_current: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
    "evomem_stages", default=None
)


@contextlib.contextmanager
def recording(into: dict[str, int]) -> Iterator[dict[str, int]]:
    """Within the block (and in the threads it hands work to with its context), stages add their
    nanoseconds to ``into``."""
    token = _current.set(into)
    try:
        yield into
    finally:
        _current.reset(token)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as ``name`` (added up if the stage runs more than once)."""
    into = _current.get()
    if into is None:
        yield
        return
    t0 = time.perf_counter_ns()
    try:
        yield
    finally:
        into[name] = into.get(name, 0) + time.perf_counter_ns() - t0


__all__ = ["recording", "stage"]
