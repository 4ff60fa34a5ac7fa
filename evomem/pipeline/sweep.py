"""The staleness sweep: find the active insights that stopped earning their place
(``evomem.core.staleness``) and publish a request to archive each on the event stream, where the
consolidation workers apply it in order with the events (``control.lua``'s ``retire``).

Each request's id is derived from the insight and its version, so sweeps that overlap (two workers,
or a sweep before the last one's requests were applied) archive an insight once; an insight edited
since it was found stale, or pinned, is left as it is when the request is applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from evomem.core.ports import EventLog, StalenessSource
from evomem.core.staleness import STALENESS, retire_request_id, stale_reason
from evomem.logs import get_logger
from evomem.settings import Settings
from schemas import ControlRequest
from schemas.models import utcnow

log = get_logger("evomem.staleness")


def sweep_stale(
    graph: StalenessSource,
    events: EventLog,
    resolve: Callable[[str], Settings],
    now: datetime | None = None,
) -> int:
    """Publish a retire request for every stale insight of every namespace that asks for it (its
    ``stale_idle_s`` or ``stale_served``); returns how many were published."""
    now = now or utcnow()
    published = 0
    for ns in sorted(graph.namespaces()):
        s = resolve(ns)
        if not (s.stale_idle_s or s.stale_served):
            continue
        for record in graph.served_records(ns):
            reason = stale_reason(record, now, s.stale_idle_s, s.stale_served)
            if reason is None:
                continue
            events.publish_control(
                ControlRequest(
                    request_id=retire_request_id(ns, record.insight_id, record.version),
                    namespace=ns,
                    action="retire",
                    by=STALENESS,
                    reason=reason,
                    insight_id=record.insight_id,
                    expected_version=record.version,
                )
            )
            published += 1
    if published:
        log.info("staleness.swept", published=published)
    return published


class SweepClock:
    """When the next sweep is due: every ``stale_sweep_s`` (0: every time asked), once across the
    processes of a store (``claim_sweep``); each process asks the store at most that often."""

    def __init__(self, every_s: float, graph: StalenessSource | None = None) -> None:
        self.every_s = every_s
        self.graph = graph
        self._last: float | None = None

    def due(self) -> bool:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.every_s:
            return False
        self._last = now
        return self.graph is None or self.graph.claim_sweep(self.every_s)


__all__ = ["SweepClock", "sweep_stale"]
