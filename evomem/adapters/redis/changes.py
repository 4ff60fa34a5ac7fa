"""The change feed in Redis (``em:changes``, appended by the edit scripts), as the projector follows
it: pages of changes past a cursor, a blocking wait for the next one, the cursor each read model
keeps, and what the service and ``stats`` read of it (how far behind a projector is)."""

from __future__ import annotations

import time
from typing import Any, Literal

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.core.ports import Change


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cursor_order(cursor: str) -> tuple[int, int]:
    """A stream id as a sortable pair ("0-0" first)."""
    ms, _, seq = cursor.partition("-")
    return int(ms or 0), int(seq or 0)


class RedisChangeFeed:
    """A ``ChangeFeed`` on the ``em:changes`` stream; cursors under ``em:projector:<identity>``."""

    def __init__(self, client: Client) -> None:
        self.r = mapped(client)

    def changes(self, after: str, count: int) -> list[Change]:
        entries = self.r.xread({keys.CHANGES_STREAM: after or "0-0"}, count=count)
        out: list[Change] = []
        for _stream, items in entries or []:
            for entry_id, fields in items:
                f = {_s(k): _s(v) for k, v in fields.items()}
                kind: Literal["insight", "query"] = "query" if f["kind"] == "query" else "insight"
                out.append(Change(_s(entry_id), kind, f.get("ns", ""), f["id"], int(f["version"])))
        return out

    def wait(self, after: str, block_ms: int) -> None:
        self.r.xread({keys.CHANGES_STREAM: after or "0-0"}, count=1, block=block_ms)

    def load_cursor(self, identity: str) -> str:
        raw = self.r.get(keys.projector_cursor(identity))
        return _s(raw) if raw else "0-0"

    def save_cursor(self, identity: str, cursor: str) -> None:
        self.r.set(keys.projector_cursor(identity), cursor)

    def newest(self) -> str | None:
        """The cursor of the newest change, or None on an empty feed."""
        newest = self.r.xrevrange(keys.CHANGES_STREAM, count=1)
        return _s(newest[0][0]) if newest else None

    def age_after(self, cursor: str) -> float:
        """Seconds since the oldest change past ``cursor`` was written (0 when there is none)."""
        nxt = self.r.xrange(keys.CHANGES_STREAM, min=f"({cursor}", max="+", count=1)
        if not nxt:
            return 0.0
        written_ms = int(_s(nxt[0][0]).split("-")[0])
        return max(0.0, time.time() - written_ms / 1000)

    def between(self, after: str, upto: str, cap: int) -> int:
        """Changes past ``after`` up to ``upto`` (counted up to ``cap``)."""
        if cursor_order(after) >= cursor_order(upto):
            return 0
        return len(self.r.xrange(keys.CHANGES_STREAM, min=f"({after}", max=upto, count=cap))

    def lags(self, cap: int = 100_000) -> dict[str, int]:
        """Changes each known read model has not applied yet (from the cursors kept in Redis, which
        an embedded store's projector moves once what it projected is flushed: up to
        ``EVOMEM_INDEX_FLUSH_S`` behind what it serves)."""
        prefix = keys.projector_cursor("")
        lags = {}
        for key in self.r.scan_iter(match=prefix + "*"):
            cursor = self.r.get(key)
            if cursor is None:
                continue
            pending = self.r.xrange(keys.CHANGES_STREAM, min=f"({_s(cursor)}", max="+", count=cap)
            lags[_s(key)[len(prefix) :]] = len(pending)
        return lags


__all__ = ["RedisChangeFeed", "cursor_order"]
