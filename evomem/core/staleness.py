"""Staleness: which active insights stopped earning their place, and the deterministic id of the
request that archives each (so two sweeps that find the same insight archive it once).

An insight is stale when no reported task was served it for ``after_s`` seconds (since it was last
served, or created), or when it was served to ``served`` reported tasks and no event ever credited
it (no KEEP verdict). "Served" counts what consolidation sees: the insights a reported task was
served (its retrieval record, and the ids the event names), once per applied event. A pinned
insight is never stale; the archive is an edit of its own, reverted like any other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from evomem.core.editing import ID_NAMESPACE

#: Who the staleness sweep's requests are recorded as.
STALENESS = "staleness"


@dataclass(frozen=True, slots=True)
class ServedCounts:
    """What the sweep reads of one insight: its state, pin, version and how it was served."""

    insight_id: str
    state: str
    pinned: bool
    version: int
    served: int  # reported tasks it was served to
    helped: int  # of those, the ones whose event credited it
    last_served: datetime  # when it was last served, or created if never


def stale_reason(record: ServedCounts, now: datetime, after_s: int, served: int) -> str | None:
    """Why ``record`` is stale at ``now`` (the words its history keeps), or None if it is not."""
    if record.state != "active" or record.pinned:
        return None
    if served > 0 and record.helped == 0 and record.served >= served:
        times = "once" if record.served == 1 else f"{record.served} times"
        return f"served {times}, never helping"
    idle = (now - record.last_served).total_seconds()
    if after_s > 0 and idle >= after_s:
        return f"not served for {int(idle)} s (since {record.last_served.isoformat()})"
    return None


def retire_request_id(namespace: str, insight_id: str, version: int) -> uuid.UUID:
    """One request per insight and version: found stale again before it is archived, the same one."""
    return uuid.uuid5(ID_NAMESPACE, f"stale:{namespace}:{insight_id}:{version}")


__all__ = ["STALENESS", "ServedCounts", "retire_request_id", "stale_reason"]
