"""Per-namespace quotas: events, event bytes, retrievals and bytes of retrieval records a minute,
counted in Redis so that every process writing to one memory shares them. A shared Redis never
evicts, so one runaway tenant would otherwise fill it for everyone.

A retrieval record is kept ``retrieval_ttl_s`` (a day by default) so that a later report can refer to
it: its size is that of its query (up to 8,000 characters) plus about 60 bytes per similar query
(``top_k``, up to 1,000) and 90 per served insight. The count of retrievals alone let one namespace
write about 1 GB of them a minute with long queries (120,000 x 8.7 kB), 14 GB with the largest
requests; their bytes have a quota of their own. Records are counted once written, so the retrieval
that passes the limit is served and the next ones are refused until the window ends."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.errors import QuotaExceededError, TransientError
from evomem.logs import get_logger
from evomem.settings import Settings

log = get_logger("evomem.quotas")

WINDOW_S = 60
#: Retrievals are counted here and added to Redis at most this often per namespace, by a thread of
#: the process's own, off the retrieval's path: a round trip on every retrieval was a tenth of its
#: latency, and one every quarter second, on the path, was most of the slowest retrievals' (a Redis
#: reply waited for on a loaded machine). A process may run past the limit by this much time's worth
#: of its own retrievals, and by what other processes made since its last sync was answered.
RETRIEVAL_SYNC_S = 0.25


def _key(window: int, kind: str, namespace: str) -> str:
    return keys.quota(namespace, window, kind)


def retrieval_record_bytes(
    query: str, similar: Sequence[str], insight_ids: Sequence[str], vector_chars: int = 0
) -> int:
    """About the bytes the retrieval record of ``query`` takes in Redis (its JSON document, as
    ``RedisGraphStore.save_retrieval`` writes it): each similar query's id and cosine, each served
    insight's id, similarity and scores; and the task's dense vector, when it carries one
    (``vector_chars``: ``Retriever.record_vector_chars``)."""
    return (
        len(json.dumps(query))
        + sum(len(q) + 24 for q in similar)
        + sum(len(i) + 54 for i in insight_ids)
        + 120
        + (vector_chars + 14 if vector_chars else 0)
    )


@dataclass
class _Spent:
    """One namespace's retrievals in this process's current window: what is not yet added to Redis,
    what a sync under way is adding (``sending_*``), and the totals as Redis last said them."""

    window: int
    count: int = 0
    size: int = 0
    total_count: int = 0
    total_size: int = 0
    synced_at: float = 0.0
    sending_count: int = 0
    sending_size: int = 0
    syncing: bool = False


class Quotas:
    """Fixed one-minute windows: a call past a limit is refused until the window ends."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.r = mapped(client)
        self.events = settings.quota_events_per_minute
        self.event_bytes = settings.quota_event_bytes_per_minute
        self.retrievals = settings.quota_retrievals_per_minute
        self.record_bytes = settings.quota_retrieval_bytes_per_minute
        self._lock = threading.Lock()
        self._local: dict[str, _Spent] = {}
        # adds the retrievals counted here to Redis (``_sync``), off the retrieval's path
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evomem-quotas")

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
        """Count one retrieval, before it runs; ``QuotaExceededError`` if the namespace has made too
        many this minute or written too many bytes of retrieval records. Retrieval fails open: an
        unreachable Redis counts nothing."""
        if not (self.retrievals or self.record_bytes):
            return
        count, size = self._spend(namespace, 1, 0)
        if self.retrievals and count > self.retrievals:
            what = f"namespace {namespace!r} made more than {self.retrievals} retrievals this minute"
            raise QuotaExceededError(what, self.retry_after_s())
        if self.record_bytes and size > self.record_bytes:
            what = (
                f"namespace {namespace!r} wrote more than {self.record_bytes} bytes of retrieval "
                "records this minute (EVOMEM_QUOTA_RETRIEVAL_BYTES_PER_MINUTE)"
            )
            raise QuotaExceededError(what, self.retry_after_s())

    def charge_record(
        self,
        namespace: str,
        query: str,
        similar: Sequence[str],
        insight_ids: Sequence[str],
        vector_chars: int = 0,
    ) -> None:
        """Count the bytes of the retrieval record a retrieval wrote (``retrieval_record_bytes``)."""
        if self.record_bytes:
            self._spend(namespace, 0, retrieval_record_bytes(query, similar, insight_ids, vector_chars))

    def _spend(self, namespace: str, count: int, size: int) -> tuple[int, int]:
        """Add to this process's tally; the namespace's totals this window as far as this process
        knows them. At most every ``RETRIEVAL_SYNC_S``, and never while one is under way, the tally
        is added to Redis in the background (``_sync``), whose answer brings in what other processes
        counted: the caller never waits for Redis."""
        now = time.time()
        window = int(now // WINDOW_S)
        with self._lock:
            spent = self._local.get(namespace)
            if spent is None or spent.window != window:
                spent = self._local[namespace] = _Spent(window)
            spent.count += count
            spent.size += size
            totals = (
                spent.total_count + spent.sending_count + spent.count,
                spent.total_size + spent.sending_size + spent.size,
            )
            due = not spent.syncing and now - spent.synced_at >= RETRIEVAL_SYNC_S
            if due:
                spent.sending_count, spent.sending_size = spent.count, spent.size
                spent.count, spent.size, spent.synced_at, spent.syncing = 0, 0, now, True
        if due:
            try:
                self._syncer.submit(self._sync, namespace, spent)
            except RuntimeError:  # closed: nothing is added any more
                with self._lock:
                    spent.syncing = False
        return totals

    def _sync(self, namespace: str, spent: _Spent) -> None:
        """Add what ``spent`` is sending to Redis and keep the totals Redis answers. When Redis is
        unreachable the retrievals stay counted here (retrieval fails open)."""
        amounts = [
            (kind, n)
            for kind, limit, n in (
                ("retrievals", self.retrievals, spent.sending_count),
                ("record_bytes", self.record_bytes, spent.sending_size),
            )
            if limit
        ]
        replies: dict[str, int] | None = None
        try:
            replies = dict(
                zip([k for k, _ in amounts], self._incr(namespace, amounts, spent.window), strict=True)
            )
        except Exception as exc:  # counted here all the same; the next sync adds what follows
            log.debug("quota_sync_failed", namespace=namespace, error=repr(exc))
        with self._lock:
            if replies is None:
                spent.total_count += spent.sending_count
                spent.total_size += spent.sending_size
            else:  # Redis's totals hold what was sent; what was counted meanwhile is in count/size
                spent.total_count = replies.get("retrievals", spent.total_count + spent.sending_count)
                spent.total_size = replies.get("record_bytes", spent.total_size + spent.sending_size)
            spent.sending_count = spent.sending_size = 0
            spent.syncing = False

    def wait_synced(self) -> None:
        """Wait until the syncs asked for so far are answered (tests)."""
        self._syncer.submit(lambda: None).result()

    def close(self) -> None:
        self._syncer.shutdown(wait=True)

    def _incr(self, namespace: str, amounts: list[tuple[str, int]], window: int | None = None) -> list[int]:
        window = int(time.time() // WINDOW_S) if window is None else window
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


__all__ = ["Quotas", "retrieval_record_bytes"]
