"""What the tenancy records (run-time tokens, per-namespace settings) keep of Redis between reads:
entries fresh for a time-to-live, at most a number of them, the least recently used out first."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class RecentCache(Generic[V]):
    """A key's entry is fresh for ``ttl_s``; past ``max_entries`` the least recently used goes. A
    stale entry is still handed back, so a caller whose read fails can serve what was known."""

    def __init__(self, ttl_s: float, max_entries: int) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.hits = self.misses = 0
        self._items: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now: float) -> tuple[tuple[float, V] | None, bool]:
        """The entry held for ``key`` (``None``: none) and whether it is fresh at ``now``."""
        entry = self._items.get(key)
        if entry is not None and now - entry[0] < self.ttl_s:
            self.hits += 1
            with self._lock, contextlib.suppress(KeyError):  # another thread may just have evicted it
                self._items.move_to_end(key)
            return entry, True
        self.misses += 1
        return entry, False

    def put(self, key: str, value: V, now: float) -> None:
        with self._lock:
            self._items[key] = (now, value)
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def drop(self, key: str | None = None) -> None:
        """Forget ``key``, or every entry."""
        with self._lock:
            if key is None:
                self._items.clear()
            else:
                self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["RecentCache"]
