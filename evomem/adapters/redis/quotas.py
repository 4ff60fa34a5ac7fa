"""Per-namespace quotas: events, event bytes and retrievals a minute, counted in Redis so that every
process writing to one memory shares them. A shared Redis never evicts, so one runaway tenant would
otherwise fill it for everyone."""

from __future__ import annotations

import threading
import time

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.errors import QuotaExceededError, TransientError
from evomem.settings import Settings

WINDOW_S = 60
#: Retrievals are counted here and added to Redis at most this often per namespace: a round trip on
#: every retrieval was a tenth of its latency. A process may run past the limit by this much time's
#: worth of its own retrievals.
RETRIEVAL_SYNC_S = 0.25


def _key(window: int, kind: str, namespace: str) -> str:
    return keys.quota(namespace, window, kind)


class Quotas:
    """Fixed one-minute windows: a call past a limit is refused until the window ends."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.r = mapped(client)
        self.events = settings.quota_events_per_minute
        self.event_bytes = settings.quota_event_bytes_per_minute
        self.retrievals = settings.quota_retrievals_per_minute
        self._lock = threading.Lock()
        # namespace -> [window, retrievals not yet added to Redis, total as Redis last said, synced at]
        self._local: dict[str, list[float]] = {}

    def charge_event(self, namespace: str, size: int) -> None:
        """Count one event of ``size`` bytes; ``QuotaExceededError`` if either limit is passed."""
        limits = [
            (kind, limit, n)
            for kind, limit, n in (("events", self.events, 1), ("bytes", self.event_bytes, size))
            if limit
        ]
        if not limits:
            return
        try:
            counts = self._incr(namespace, [(kind, n) for kind, _, n in limits])
        except (TransientError, OSError) as exc:
            raise TransientError("redis unreachable; the event was not published") from exc
        for (kind, limit, _), count in zip(limits, counts, strict=True):
            if count > limit:
                unit = "bytes of events" if kind == "bytes" else "events"
                what = f"namespace {namespace!r} reported more than {limit} {unit} this minute"
                raise QuotaExceededError(what, self.retry_after_s())

    def charge_retrieval(self, namespace: str) -> None:
        """Count one retrieval; retrieval fails open, so an unreachable Redis counts nothing."""
        if not self.retrievals:
            return
        now = time.time()
        window = int(now // WINDOW_S)
        with self._lock:
            state = self._local.get(namespace)
            if state is None or state[0] != window:
                state = self._local[namespace] = [window, 0.0, 0.0, 0.0]
            state[1] += 1
            count = state[2] + state[1]
            due = now - state[3] >= RETRIEVAL_SYNC_S
            if due:
                delta, state[1], state[3] = int(state[1]), 0.0, now
        if due:
            try:
                (count,) = self._incr(namespace, [("retrievals", delta)])
            except (TransientError, OSError):
                return
            with self._lock:
                if self._local.get(namespace, [None])[0] == window:
                    self._local[namespace][2] = count
        if count > self.retrievals:
            what = f"namespace {namespace!r} made more than {self.retrievals} retrievals this minute"
            raise QuotaExceededError(what, self.retry_after_s())

    def _incr(self, namespace: str, amounts: list[tuple[str, int]]) -> list[int]:
        window = int(time.time() // WINDOW_S)
        pipe = self.r.pipeline(transaction=False)
        for kind, n in amounts:
            key = _key(window, kind, namespace)
            pipe.incrby(key, n)
            pipe.expire(key, 2 * WINDOW_S)
        replies = pipe.execute()
        return [int(c) for c in replies[::2]]

    @staticmethod
    def retry_after_s() -> float:
        return float(WINDOW_S - int(time.time()) % WINDOW_S)


__all__ = ["Quotas"]
