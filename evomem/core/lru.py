"""A bounded map, the least recently used entry dropped first, safe to share between threads: what
the retrieval read models (the index's serving fields, the query graph's adjacency) are kept in."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``capacity`` entries (0: none is kept). ``get_many`` marks what it finds as used;
    ``offer`` keeps a value unless the one held is newer (``newer(held, offered)``), so that a read
    which raced a write never puts back what the write replaced."""

    __slots__ = ("_items", "_lock", "capacity", "hits", "misses")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.hits = self.misses = 0
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        """The entries held for ``keys``, each marked as just used."""
        found: dict[K, V] = {}
        wanted = 0
        with self._lock:
            items = self._items
            for key in keys:
                wanted += 1
                value = items.get(key)
                if value is not None:
                    found[key] = value
                    items.move_to_end(key)
        self.hits += len(found)
        self.misses += wanted - len(found)
        return found

    def offer(self, entries: Iterable[tuple[K, V]], newer: Callable[[V, V], bool] | None = None) -> None:
        """Keep each (key, value), unless ``newer(held, value)`` says the one held is newer."""
        if self.capacity <= 0:
            return
        with self._lock:
            items = self._items
            for key, value in entries:
                held = items.get(key)
                if held is not None and newer is not None and newer(held, value):
                    continue
                items[key] = value
                items.move_to_end(key)
            while len(items) > self.capacity:
                items.popitem(last=False)

    def drop(self, keys: Iterable[K] | None = None) -> None:
        """Forget ``keys``, or every entry."""
        with self._lock:
            if keys is None:
                self._items.clear()
                return
            for key in keys:
                self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["Lru"]
