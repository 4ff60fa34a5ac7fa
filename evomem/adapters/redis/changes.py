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


def _change(cursor: str, f: dict[str, str]) -> Change:
    """One feed entry; a malformed one comes back with its ``problem`` rather than failing the page."""
    kind: Literal["insight", "query"] = "query" if f.get("kind") == "query" else "insight"
    node, version = f.get("id", ""), f.get("version", "")
    problem = None
    if not node:
        problem = "the change names no node id"
    elif not version.isdigit() or len(version) > 18:
        problem = f"version {version[:40]!r} is not a whole number below 10^18"
    return Change(cursor, kind, f.get("ns", ""), node, 0 if problem else int(version), problem)


class RedisChangeFeed:
    """A ``ChangeFeed`` on the ``em:changes`` stream; cursors under ``em:projector:<identity>``."""

    def __init__(self, client: Client) -> None:
        self.r = mapped(client)

    def changes(self, after: str, count: int) -> list[Change]:
        entries = self.r.xread({keys.CHANGES_STREAM: after or "0-0"}, count=count)
        out: list[Change] = []
        for _stream, items in entries or []:
            for entry_id, fields in items:
                out.append(_change(_s(entry_id), {_s(k): _s(v) for k, v in fields.items()}))
        return out

    # -- changes that can never apply (the projector skips them here) ---------------------------------
    def dead_letter(self, change: Change, reason: str) -> None:
        self.r.xadd(
            keys.CHANGES_DEAD,
            {
                "cursor": change.cursor,
                "kind": change.kind,
                "ns": change.namespace,
                "id": change.id,
                "version": change.version,
                "reason": reason[:2000],
                "at": f"{time.time():.3f}",
            },
        )

    def dead_changes(self, count: int = 1000) -> list[dict[str, str]]:
        """The skipped changes, oldest first: their dead-letter id, change fields and reason."""
        return [
            {"dead_id": _s(i), **{_s(k): _s(v) for k, v in f.items()}}
            for i, f in self.r.xrange(keys.CHANGES_DEAD, count=count)
        ]

    def replay_dead(self, dead_ids: list[str]) -> int:
        """Announce the skipped changes again (once their cause is fixed), then forget them."""
        done = 0
        for letter in self.dead_changes(1_000_000):
            if letter["dead_id"] not in dead_ids:
                continue
            fields = {k: letter[k] for k in ("kind", "ns", "id", "version") if k in letter}
            self.r.xadd(keys.CHANGES_STREAM, fields)
            self.r.xdel(keys.CHANGES_DEAD, letter["dead_id"])
            done += 1
        return done

    def drop_dead(self, dead_ids: list[str]) -> int:
        return int(self.r.xdel(keys.CHANGES_DEAD, *dead_ids)) if dead_ids else 0

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
