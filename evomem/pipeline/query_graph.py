"""The query graph's adjacency as a retrieval process keeps it: Eq. 3-4's neighbours read from Redis
(the system of record) once, then served from memory until the projector sees them change."""

from __future__ import annotations

import sys
import threading
from array import array
from collections.abc import Collection, Iterable

from evomem.core.lru import Lru
from evomem.core.ports import EventKey, RetrievalGraph

#: A query's neighbours as kept: their ids and their edges' similarities (8 bytes each, not a float
#: object of 24 and its pointer), in the same order.
Adjacency = tuple[tuple[str, ...], "array[float]"]


#: Queries whose neighbours a warm-up reads at once.
WARM_PAGE = 1_000


def _adjacency(nbrs: dict[str, float]) -> Adjacency:
    return tuple(sys.intern(n) for n in nbrs), array("d", nbrs.values())


class QueryGraphCache:
    """Each query's neighbours by (namespace, query id), at most ``capacity`` of them, the least
    recently used dropped first. An edge is written with a query: a new one linked to the queries it
    resembles, both ways (the event's plan, or the projector's ``link_queries``), and the change of
    that query reaches this process's projector, which calls ``changed``: the query's entry and those
    of its neighbours, whose lists just gained it, are dropped and read again when next met. A read
    that overlapped a drop is served but not kept, so nothing read before a change outlives it.

    Not seen: an edge a query's own list trimmed away (it keeps its ``QUERY_DEGREE`` most similar)
    whose other end kept it, which only a query linked to more than ``QUERY_DEGREE`` others at once
    makes; that neighbour's entry lacks the new query until it is used least recently of all."""

    def __init__(self, graph: RetrievalGraph, capacity: int) -> None:
        self.graph = graph
        self.entries: Lru[tuple[str, str], Adjacency] = Lru(capacity)
        self._epoch = 0  # drops so far: a read begun before one is not kept
        self._lock = threading.Lock()

    def neighbours(self, namespace: str, query_ids: Collection[str]) -> dict[str, dict[str, float]]:
        """``RetrievalGraph.neighbours``: the kept ones from memory, the others in one read."""
        held = self.entries.get_many((namespace, q) for q in query_ids)
        out = {q: dict(zip(*a, strict=True)) for (_, q), a in held.items()}
        missing = [q for q in query_ids if q not in out]
        if not missing:
            return out
        epoch = self._epoch
        read = self.graph.neighbours(namespace, missing)
        out.update(read)
        if self.entries.capacity > 0:
            kept = [((namespace, q), _adjacency(nbrs)) for q, nbrs in read.items()]
            with self._lock:
                if epoch == self._epoch:
                    self.entries.offer(kept)
        return out

    def warm(
        self, namespaces: Iterable[tuple[str, Iterable[str]]], stop: threading.Event | None = None
    ) -> int:
        """Read the neighbours of the queries of each (namespace, its query ids), a thousand a read,
        up to ``capacity``, never evicting what is held; returns the queries read."""
        read = 0
        for namespace, ids in namespaces:
            page: list[str] = []
            for q in ids:
                page.append(q)
                if len(page) >= WARM_PAGE:
                    read += self._warm_page(namespace, page)
                    page = []
                if len(self.entries) >= self.entries.capacity or (stop is not None and stop.is_set()):
                    return read
            read += self._warm_page(namespace, page)
        return read

    def _warm_page(self, namespace: str, page: list[str]) -> int:
        room = self.entries.capacity - len(self.entries)
        if not page or room <= 0:
            return 0
        epoch = self._epoch
        read = self.graph.neighbours(namespace, page[:room])
        kept = [((namespace, q), _adjacency(nbrs)) for q, nbrs in read.items()]
        with self._lock:
            if epoch == self._epoch:
                self.entries.offer(kept, lambda held, offered: True)  # what is held is as new
        return len(read)

    def changed(self, refs: Collection[EventKey]) -> None:
        """Queries changed in the store (the projector's): their entries and their neighbours'
        dropped. One read of their neighbours per namespace."""
        if not refs or len(self.entries) == 0:
            with self._lock:
                self._epoch += 1
            return
        with self._lock:
            self._epoch += 1
        by_ns: dict[str, list[str]] = {}
        for ns, q in refs:
            by_ns.setdefault(ns, []).append(q)
        for ns, ids in by_ns.items():
            linked = self.graph.neighbours(ns, ids)
            gone = {(ns, q) for q in ids} | {(ns, n) for nbrs in linked.values() for n in nbrs}
            with self._lock:
                self._epoch += 1
                self.entries.drop(gone)


__all__ = ["QueryGraphCache"]
