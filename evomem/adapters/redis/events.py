"""The task-event stream in Redis: publish, read in batches through a consumer group, ack, dead-letter.

On the stream an event is one entry with one field, ``event``, whose value is the JSON document of
the task event's JSON Schema; any language can publish with a plain XADD.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from evomem import keys
from evomem.adapters.redis.connection import Client, durable, is_cluster, mapped
from evomem.core.editing import event_digest
from evomem.core.ports import Entry
from evomem.errors import InvalidEventError, StoreError, TransientError
from schemas import ControlRequest, TaskEvent

# Checks that every insight the event names exists in its namespace and that its event id was not
# applied or decided before for other content (ARGV[2], the event's digest); returns the first
# offending id ("bad:") or "reused:"; else appends the event, sets its state marker (when ARGV[6+n],
# its TTL, is not 0) and returns "ok:" and the new entry id, or on a cluster (no stream among the
# keys: it lives in another slot) "ok:" alone, and the caller appends and marks.
# KEYS: the event's applied marker, its decision, its published digest, the n insights it names,
# then on one server the event's state marker and the stream. ARGV: document, digest, the published
# digest's TTL, n, the insight ids, state, the state's TTL.
_PUBLISH = """
for i = 1, 3 do
  local seen = redis.call('GET', KEYS[i])
  if seen then
    local ok, d = pcall(cjson.decode, seen)
    if ok and type(d) == 'table' and d.digest and d.digest ~= cjson.null and d.digest ~= ARGV[2] then
      return 'reused:'
    end
  end
end
local n = tonumber(ARGV[4])
for i = 1, n do
  if redis.call('EXISTS', KEYS[3 + i]) == 0 then return 'bad:' .. ARGV[4 + i] end
end
redis.call('SET', KEYS[3], cjson.encode({digest = ARGV[2]}), 'EX', tonumber(ARGV[3]), 'NX')
if #KEYS == 3 + n then return 'ok:' end
local id = redis.call('XADD', KEYS[#KEYS], '*', 'event', ARGV[1])
if ARGV[6 + n] ~= '0' then redis.call('SET', KEYS[#KEYS - 1], ARGV[5 + n], 'EX', ARGV[6 + n]) end
return 'ok:' .. id
"""


#: How long a published event's digest is kept to refuse a conflicting event with its id.
PUBLISHED_TTL_S = 86_400


def _s(v: Any) -> str:
    """Text of a Redis reply; bytes that are not UTF-8 (a foreign XADD) are shown escaped, never fatal."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)


def _entry(entry_id: Any, fields: Any) -> Entry:
    raw = fields.get(b"event") if fields else None
    if raw is None and fields and b"control" in fields:
        return Entry(_s(entry_id), fields[b"control"], 1, None, "control")
    missing = tuple(_s(k) for k in fields) if fields and raw is None else None
    return Entry(_s(entry_id), raw, 1, missing)


class EventStream:
    def __init__(
        self,
        client: Client,
        maxlen: int = 1_000_000,
        stream: str = keys.EVENTS_STREAM,
        group: str = keys.CONSUMER_GROUP,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        state_ttl_s: int = 86_400,
    ) -> None:
        self.r = mapped(client)
        self.state_ttl_s = state_ttl_s  # how long an event's state marker is kept (0: none)
        self.maxlen = maxlen
        self.stream = stream
        self.group = group
        self.clustered = is_cluster(self.r)
        # replicas that must hold a reported event before report() returns (a failover keeps it)
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self._publish = self.r.register_script(_PUBLISH)
        self._group_ready = False

    def publish(self, event: TaskEvent) -> str:
        """Validate the ids the event names and append it, in one round trip; return the entry id."""
        doc = event.model_dump_json()
        named = event.named_insight_ids()
        event_id = str(event.event_id)
        ns = event.namespace
        checked = [
            keys.applied(ns, event_id),
            keys.decision(ns, event_id),
            keys.published(ns, event_id),
            *(keys.insight(ns, i) for i in named),
        ]
        state = json.dumps({"namespace": ns, "state": "queued"})
        try:
            res = _s(
                self._publish(
                    keys=checked if self.clustered else [*checked, keys.event_state(event_id), self.stream],
                    args=[
                        doc,
                        event_digest(event),
                        PUBLISHED_TTL_S,
                        len(named),
                        *named,
                        state,
                        self.state_ttl_s,
                    ],
                )
            )
            if res == "ok:":  # a cluster: the stream is in another slot, appended once the checks pass
                res = "ok:" + _s(self.r.xadd(self.stream, {"event": doc}))
                self._mark(event_id, state)
            durable(self.r, [self.stream], self.wait_replicas, self.wait_timeout_ms)
        except TransientError as exc:
            raise TransientError("redis unreachable; the event was not published") from exc
        if res.startswith("reused:"):
            raise InvalidEventError(
                "event_id",
                f"event {event_id} was reported before with other content; a retry must repeat the event",
            )
        if res.startswith("bad:"):
            bad = res[4:]
            field = (
                f"insight_feedback[{bad}]"
                if bad in event.insight_feedback
                else f"retrieved_insight_ids[{event.retrieved_insight_ids.index(bad)}]"
            )
            raise InvalidEventError(field, f"no insight {bad!r} in namespace {event.namespace!r}")
        return res[3:]

    def publish_control(self, request: ControlRequest) -> str:
        """Append an operator's request as one entry with the field ``control``."""
        try:
            entry_id = _s(self.r.xadd(self.stream, {"control": request.model_dump_json()}))
            durable(self.r, [self.stream], self.wait_replicas, self.wait_timeout_ms)
        except TransientError as exc:
            raise TransientError("redis unreachable; the request was not published") from exc
        return entry_id

    def _mark(self, event_id: str, state: str) -> None:
        if self.state_ttl_s:
            self.r.set(keys.event_state(event_id), state, ex=self.state_ttl_s)

    def state_of(self, event_id: str) -> dict[str, Any] | None:
        """The state marker of a reported event: its ``namespace`` and ``state`` (``queued`` or
        ``dead-lettered``, then with ``reason``, ``field`` and ``dead_letter_id``); None when none
        is kept (never reported here, reported before ``EVENT_STATE_TTL_S``, or by a plain XADD)."""
        raw = self.r.get(keys.event_state(event_id))
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) and isinstance(doc.get("namespace"), str) else None

    def publish_raw(self, document: str | bytes) -> str:
        """Append a document as it is, unvalidated (what a foreign publisher's XADD does)."""
        return _s(self.r.xadd(self.stream, {"event": document}))

    def ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self.r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except StoreError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def read(
        self, consumer: str, count: int, block_ms: int | None = None, pending_first: bool = True
    ) -> list[Entry]:
        """A batch for ``consumer``: its own unacknowledged entries first, then new ones."""
        self.ensure_group()
        entries: list[Entry] = []
        try:
            if pending_first:
                entries = self._parse(
                    self.r.xreadgroup(self.group, consumer, {self.stream: "0"}, count=count)
                )
                if entries:
                    return self._with_deliveries(entries)
            # BLOCK 0 would wait forever: no wait at all is "no BLOCK"
            return self._parse(
                self.r.xreadgroup(
                    self.group, consumer, {self.stream: ">"}, count=count, block=block_ms or None
                )
            )
        except TransientError as exc:
            raise TransientError("redis unreachable while reading events") from exc

    def _parse(self, reply: Any) -> list[Entry]:
        return [_entry(entry_id, fields) for _stream, items in reply or [] for entry_id, fields in items]

    def _with_deliveries(self, entries: list[Entry]) -> list[Entry]:
        pending = self.r.xpending_range(
            self.stream, self.group, min=entries[0].id, max=entries[-1].id, count=len(entries) * 2
        )
        counts = {_s(p["message_id"]): int(p["times_delivered"]) for p in pending}
        return [Entry(e.id, e.raw, counts.get(e.id, 1), e.fields, e.kind) for e in entries]

    def claim_stale(self, consumer: str, min_idle_ms: int, count: int) -> list[Entry]:
        """Take over entries that another consumer was given and has not acked for ``min_idle_ms``
        (it died, or hangs): the janitor's XAUTOCLAIM. Entries trimmed meanwhile come back with
        ``raw=None``."""
        self.ensure_group()
        try:
            reply = self.r.xautoclaim(self.stream, self.group, consumer, min_idle_ms, "0-0", count=count)
        except TransientError as exc:
            raise TransientError("redis unreachable while claiming events") from exc
        claimed = [_entry(i, f) for i, f in reply[1]]
        gone = [Entry(_s(i), None) for i in (reply[2] if len(reply) > 2 else [])]
        return self._with_deliveries(claimed) + gone if claimed else gone

    def has_backlog(self) -> bool:
        """Whether any entry waits: never delivered to the group, or delivered and not acked."""
        self.ensure_group()
        group = self._group_info()
        if int(group.get("pending", 0)):
            return True
        last = _s(group.get("last-delivered-id", "0-0"))
        return bool(self.r.xrange(self.stream, min=f"({last}", max="+", count=1))

    def _group_info(self) -> dict[str, Any]:
        groups = {_s(g["name"]): g for g in self.r.xinfo_groups(self.stream)}
        return dict(groups.get(self.group, {}))

    def trim(self) -> int:
        """Once the stream is longer than its maxlen, drop the entries every consumer is done with:
        those before the first one still pending or not yet read. An unacknowledged event is never
        trimmed, so a stream whose consumers lag grows past maxlen; ``info()["lag"]`` shows it."""
        self.ensure_group()
        if int(self.r.xlen(self.stream)) <= self.maxlen:
            return 0
        last = _s(self._group_info().get("last-delivered-id", "0-0"))
        bound = _next_id(last)
        oldest_pending = self.r.xpending_range(self.stream, self.group, min="-", max="+", count=1)
        if oldest_pending:
            bound = min(bound, _s(oldest_pending[0]["message_id"]), key=_id_key)
        return int(self.r.xtrim(self.stream, minid=bound, approximate=False))

    def ack(self, ids: Sequence[str]) -> None:
        if ids:
            self.r.xack(self.stream, self.group, *ids)

    def release(self, consumer: str, entries: Sequence[Entry]) -> None:
        """XCLAIM with RETRYCOUNT: each entry's delivery count back to what it was before this read
        (JUSTID claims without counting a delivery). Entries trimmed meanwhile are skipped."""
        by_count: dict[int, list[str]] = {}
        for e in entries:
            if e.raw is not None:
                by_count.setdefault(max(0, e.deliveries - 1), []).append(e.id)
        for count, ids in by_count.items():
            self.r.xclaim(self.stream, self.group, consumer, 0, ids, retrycount=count, justid=True)

    def dead_letter(self, entry: Entry, reason: str, field: str | None = None) -> None:
        """Move an entry to the dead-letter stream with its reason, and ack it (atomically on one
        server)."""
        doc = {
            "source_id": entry.id,
            "reason": reason,
            "field": field or "",
            "deliveries": str(entry.deliveries),
            "at": str(time.time()),
            "event": entry.raw if entry.raw is not None else b"",
        }
        if entry.kind == "control":  # an operator's request: replayed as one
            doc["kind"] = "control"
        # one MULTI on one server; on a cluster the two streams are in two slots, so the dead letter
        # goes first and the ack after: a process that dies in between leaves the entry pending,
        # to be dead-lettered again — never lost
        if self.clustered:
            dlq_id = self.r.xadd(keys.DLQ_STREAM, doc, maxlen=self.maxlen, approximate=True)
            self.r.xack(self.stream, self.group, entry.id)
        else:
            pipe = self.r.pipeline(transaction=True)
            pipe.xadd(keys.DLQ_STREAM, doc, maxlen=self.maxlen, approximate=True)
            pipe.xack(self.stream, self.group, entry.id)
            dlq_id, _ = pipe.execute()
        named = _named(entry.raw)
        if named is not None:  # a document that names its event and namespace: its state says why
            state = {"namespace": named[1], "state": "dead-lettered", "reason": reason, "field": field}
            self._mark(named[0], json.dumps({**state, "dead_letter_id": _s(dlq_id)}))

    def dlq(self, count: int = 100) -> list[dict[str, str]]:
        """The newest dead letters first: id, source_id, reason, field, deliveries, at, event."""
        items = self.r.xrevrange(keys.DLQ_STREAM, count=count)
        return [{"id": _s(i), **{_s(k): _s(v) for k, v in f.items()}} for i, f in items]

    def dead_letter_entry(self, dlq_id: str) -> dict[str, str] | None:
        """One dead letter, or None when no entry has this id (or it is not an id at all)."""
        try:
            items = self.r.xrange(keys.DLQ_STREAM, min=dlq_id, max=dlq_id, count=1)
        except StoreError:  # not a stream id
            return None
        return {"id": _s(items[0][0]), **{_s(k): _s(v) for k, v in items[0][1].items()}} if items else None

    def replay(self, dlq_ids: Sequence[str]) -> list[str]:
        """Put dead letters back on the event stream (after a fix), removing them from the DLQ.
        An event that was applied before cannot be applied twice: its marker makes it a no-op."""
        new_ids = []
        for dlq_id in dlq_ids:
            try:
                items = self.r.xrange(keys.DLQ_STREAM, min=dlq_id, max=dlq_id, count=1)
            except StoreError:  # not a stream id
                continue
            document = items[0][1].get(b"event") if items else None
            if not document:
                continue
            field = "control" if items[0][1].get(b"kind") == b"control" else "event"
            # back on the stream (the bytes as they were, not a decoded copy) and out of the dead
            # letters: one MULTI on one server; on a cluster in that order, so a failure in between
            # leaves it in both, and applying it twice is a no-op
            if self.clustered:
                new_id = self.r.xadd(self.stream, {field: document})
                self.r.xdel(keys.DLQ_STREAM, dlq_id)
            else:
                pipe = self.r.pipeline(transaction=True)
                pipe.xadd(self.stream, {field: document})
                pipe.xdel(keys.DLQ_STREAM, dlq_id)
                new_id, _ = pipe.execute()
            new_ids.append(_s(new_id))
            named = _named(document)
            if named is not None:  # back in the queue
                self._mark(named[0], json.dumps({"namespace": named[1], "state": "queued"}))
        return new_ids

    def info(self, lag_cap: int = 100_000) -> dict[str, int]:
        """Stream length; the group's pending (delivered, not acked) and lag (not yet delivered;
        counted up to ``lag_cap`` where the server does not report it); dead letters; consumers."""
        self.ensure_group()
        length = int(self.r.xlen(self.stream))
        g = self._group_info()
        lag = g.get("lag")
        if lag is None:  # Redis < 7 does not report it
            last = _s(g.get("last-delivered-id", "0-0"))
            lag = len(self.r.xrange(self.stream, min=f"({last}", max="+", count=lag_cap))
        return {
            "length": length,
            "pending": int(g.get("pending", 0)),
            "lag": int(lag),
            "consumers": int(g.get("consumers", 0)),
            "dead_letters": int(self.r.xlen(keys.DLQ_STREAM)),
        }


def _named(raw: bytes | str | None) -> tuple[str, str] | None:
    """The event id and namespace a stream document names, when it is JSON that names both."""
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:  # not JSON at all (nor UTF-8): nothing names it
        return None
    if not isinstance(doc, dict):
        return None
    event_id, namespace = doc.get("event_id"), doc.get("namespace")
    if isinstance(event_id, str) and isinstance(namespace, str) and 0 < len(event_id) <= 128:
        return event_id, namespace
    return None


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _next_id(entry_id: str) -> str:
    ms, seq = _id_key(entry_id)
    return f"{ms}-{seq + 1}"


__all__ = ["EventStream"]
