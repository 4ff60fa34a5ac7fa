"""Stage timings of the unit of work under way (an HTTP request, a batch): code on its path times its
steps with ``stage``, and the unit's canonical log line (``request.served``, ``batch.consolidated``)
carries them. Outside a unit (``recording``) timing a stage costs one context-variable read."""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from types import TracebackType

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


class stage:
    """Time the block as ``name`` (added up if the stage runs more than once). A class rather than a
    generator: it sits on the retrieval path, five times a request."""

    __slots__ = ("_into", "_name", "_t0")

    def __init__(self, name: str) -> None:
        self._name = name
        self._into = _current.get()
        self._t0 = 0

    def __enter__(self) -> None:
        if self._into is not None:
            self._t0 = time.perf_counter_ns()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        into = self._into
        if into is not None:
            into[self._name] = into.get(self._name, 0) + time.perf_counter_ns() - self._t0


__all__ = ["recording", "stage"]
