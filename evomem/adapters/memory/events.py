"""An in-memory event log: the ``EventLog`` port with a consumer group's delivery rules, for unit
tests of consolidation without Redis. An entry read and not acknowledged stays pending under its
consumer and comes back (its ``deliveries`` grown) when that consumer reads again, or to another
consumer once it has been idle ``min_idle_ms``; a dead letter is acknowledged with it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from evomem.core.ports import EditStore, Entry
from evomem.errors import InvalidEventError
from schemas import ControlRequest, TaskEvent


@dataclass
class _Pending:
    consumer: str
    deliveries: int
    at: float


@dataclass(frozen=True, slots=True)
class DeadLetter:
    entry: Entry
    reason: str
    field: str | None


class InMemoryEventLog:
    def __init__(
        self,
        graph: EditStore | None = None,
        maxlen: int = 1_000_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.graph = graph  # when given, publish checks the insight ids an event names, as Redis does
        self.maxlen = maxlen
        self.clock = clock
        self.entries: dict[str, bytes] = {}
        self.controls: set[str] = set()  # entries that hold a control request
        self.pending: dict[str, _Pending] = {}
        self.dead_letters: list[DeadLetter] = []
        self._delivered: list[str] = []  # ids handed to the group, in order
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def publish(self, event: TaskEvent) -> str:
        if self.graph is not None:
            named = event.named_insight_ids()
            owners = self.graph.namespace_of(named) if named else {}
            for n, insight_id in enumerate(named):
                if owners.get(insight_id) != event.namespace:
                    field = (
                        f"insight_feedback[{insight_id}]"
                        if insight_id in event.insight_feedback
                        else f"retrieved_insight_ids[{n}]"
                    )
                    raise InvalidEventError(
                        field, f"no insight {insight_id!r} in namespace {event.namespace!r}"
                    )
        return self.publish_raw(event.model_dump_json())

    def publish_control(self, request: ControlRequest) -> str:
        entry_id = self.publish_raw(request.model_dump_json())
        with self._lock:
            self.controls.add(entry_id)
        return entry_id

    def publish_raw(self, document: str | bytes) -> str:
        """Append a document as it is, unvalidated (what a foreign publisher's XADD does)."""
        with self._lock:
            entry_id = f"{next(self._ids)}-0"
            self.entries[entry_id] = document.encode() if isinstance(document, str) else document
            return entry_id

    def read(self, consumer: str, count: int, block_ms: int | None = None) -> list[Entry]:
        with self._lock:
            own = [i for i, p in self.pending.items() if p.consumer == consumer][:count]
            if own:
                return [self._deliver(i, consumer) for i in own]
            fresh = [i for i in self.entries if i not in self.pending and i not in self._delivered][:count]
            self._delivered.extend(fresh)
            return [self._deliver(i, consumer) for i in fresh]

    def claim_stale(self, consumer: str, min_idle_ms: int, count: int) -> list[Entry]:
        with self._lock:
            now = self.clock()
            stale = [
                i
                for i, p in self.pending.items()
                if p.consumer != consumer and (now - p.at) * 1000 >= min_idle_ms
            ][:count]
            return [self._deliver(i, consumer) for i in stale]

    def _deliver(self, entry_id: str, consumer: str) -> Entry:
        before = self.pending.get(entry_id)
        deliveries = 1 if before is None else before.deliveries + 1
        self.pending[entry_id] = _Pending(consumer, deliveries, self.clock())
        kind: Literal["event", "control"] = "control" if entry_id in self.controls else "event"
        return Entry(entry_id, self.entries.get(entry_id), deliveries, kind=kind)

    def ack(self, ids: Sequence[str]) -> None:
        with self._lock:
            for i in ids:
                self.pending.pop(i, None)

    def release(self, consumer: str, entries: Sequence[Entry]) -> None:
        with self._lock:
            for e in entries:
                p = self.pending.get(e.id)
                if p is not None and p.consumer == consumer:
                    self.pending[e.id] = _Pending(consumer, max(0, p.deliveries - 1), p.at)

    def dead_letter(self, entry: Entry, reason: str, field: str | None = None) -> None:
        with self._lock:
            self.dead_letters.append(DeadLetter(entry, reason, field))
            self.pending.pop(entry.id, None)

    def trim(self) -> int:
        """Drop the oldest entries past ``maxlen`` that every consumer is done with."""
        with self._lock:
            done = [i for i in self._delivered if i not in self.pending]
            drop = done[: max(0, len(self.entries) - self.maxlen)]
            for i in drop:
                self.entries.pop(i, None)
                self._delivered.remove(i)
            return len(drop)


__all__ = ["DeadLetter", "InMemoryEventLog"]
