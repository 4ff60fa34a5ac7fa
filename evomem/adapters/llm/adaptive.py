"""How much one worker sends its LLM endpoint at once, learnt from the endpoint's answers.

``LLM_CONCURRENCY`` and ``LLM_EVENTS_PER_CALL`` are ceilings. A hosted API answers eight calls of
eight events at once; a local server with one slot (llama.cpp) queues them, and the last ones time
out while the server still works on the abandoned ones. So a timeout halves the calls in flight
(down to one), then, at one, the events per call; ``RECOVER_AFTER`` answered calls in a row give one
call in flight back, up to the ceiling. A prompt the model's context cannot hold halves the events
per call for good. Each worker process learns on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from evomem.logs import get_logger

log = get_logger("evomem.llm")

#: Answered calls in a row after which one more call may be in flight again (additive increase).
RECOVER_AFTER = 20


class AdaptiveLimits:
    """Calls in flight and events per call: multiplicative decrease on timeouts and context
    overflows, additive increase of the calls in flight while the endpoint keeps up."""

    def __init__(self, concurrency: int, events_per_call: int) -> None:
        self.max_concurrency = concurrency
        self.concurrency = concurrency
        self.events_per_call = events_per_call
        self._in_flight = 0
        self._streak = 0
        self._cond = threading.Condition()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the calls in flight for the duration of a request."""
        with self._cond:
            self._cond.wait_for(lambda: self._in_flight < self.concurrency)
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def answered(self) -> None:
        with self._cond:
            self._streak += 1
            if self._streak >= RECOVER_AFTER and self.concurrency < self.max_concurrency:
                self.concurrency += 1
                self._streak = 0
                self._cond.notify_all()

    def timed_out(self) -> None:
        with self._cond:
            self._streak = 0
            if self.concurrency > 1:
                self.concurrency = max(1, self.concurrency // 2)
            elif self.events_per_call > 1:
                self.events_per_call = max(1, self.events_per_call // 2)
            else:
                return
            concurrency, events = self.concurrency, self.events_per_call
        log.warning("llm.load_reduced", cause="timeout", concurrency=concurrency, events_per_call=events)

    def too_long(self, sent: int) -> None:
        """A call of ``sent`` events did not fit the model's context."""
        with self._cond:
            self.events_per_call = max(1, min(self.events_per_call, sent // 2))
            events = self.events_per_call
        log.warning("llm.load_reduced", cause="context", events_per_call=events)


__all__ = ["RECOVER_AFTER", "AdaptiveLimits"]
