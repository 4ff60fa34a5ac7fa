"""The system of record in Redis: insight and query nodes, evidence sets, edges and history.

Plain redis-py, not redis-om: evidence must be added with SADD and an event's edits committed in
one Lua script, atomically and idempotently, which an object mapper that saves whole hashes cannot do
(the README's "Storage" section says more). Key layout: ``evomem/keys.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from importlib import resources
from typing import Any

import redis

from evomem import keys
from evomem.adapters.redis.changes import RedisChangeFeed
from evomem.adapters.redis.connection import Client, durable, is_cluster, mapped
from evomem.core.editing import EditPlan
from evomem.core.hashing import word_features
from evomem.core.lifecycle import CONTROL_OPS, AppliedEdit, AppliedEvent, ControlPlan, ControlResult
from evomem.core.ports import (
    ApplyResult,
    Change,
    EditOutcome,
    EditRecord,
    EventKey,
    InsightHead,
    InsightPoint,
    QualitySignal,
    QueryPoint,
    RetrievalRecord,
    StoredDecision,
)
from evomem.core.review import HeldEdit, Review, ReviewDecision
from evomem.core.staleness import ServedCounts
from evomem.errors import ConfigError, InvalidEventError, StoreError, TransientError
from schemas import ControllerDecision, InsightNode, QueryNode

CHANGES_MAXLEN = 2_000_000
HISTORY_MAXLEN = 10_000_000
_CHAIN = 64  # lineage hops read at most, each way
CLOCK_SLACK_MS = 60_000  # a worker's clock ahead of the server's: history read from this much earlier

# Link a query to similar ones of its namespace, both ways, each side keeping its ``degree`` most
# similar neighbours, and clear its "link" flag. KEYS[1]: the query; the neighbours' keys share its
# hash slot (the namespace's). ARGV: namespace prefix, query id, degree, then (neighbour id,
# similarity) pairs.
_LINK = """
local N, q, degree = ARGV[1], ARGV[2], tonumber(ARGV[3])
local function k(kind, id) return N .. ':' .. kind .. ':' .. id end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local function link(a, b, w)
  redis.call('ZADD', k('q.nbr', a), 'GT', w, b)
  if degree > 0 then redis.call('ZREMRANGEBYRANK', k('q.nbr', a), 0, -(degree + 1)) end
end
for i = 4, #ARGV, 2 do
  local other, w = ARGV[i], tonumber(ARGV[i + 1])
  if other ~= q and redis.call('EXISTS', k('q', other)) == 1 then
    link(q, other, w)
    link(other, q, w)
  end
end
redis.call('HDEL', KEYS[1], 'link')
return 1
"""


# A namespace's insights and its word counts as they stand together (``count_words`` reads them
# first). KEYS: the counts, the namespace's insights.
_COUNTED_SO_FAR = """
return {redis.call('SMEMBERS', KEYS[2]), redis.call('HGETALL', KEYS[1])}
"""
# Complete a namespace's word counts (``count_words``): each count moves by what the insights read
# by ``_COUNTED_SO_FAR`` hold against what the counts then held, so the insights created since,
# which their apply script counted, stay counted. Nothing when another process completed them first.
# KEYS: the counts. ARGV: the insights read, the N then held, then feature, change pairs.
_COUNT_WORDS = """
if redis.call('HGET', KEYS[1], '#complete') then return 0 end
for i = 3, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) == 0 then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
redis.call('HINCRBY', KEYS[1], '#n', tonumber(ARGV[1]) - tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], '#complete', 1)
return 1
"""
# Read word counts: the features travel as one comma-separated argument and the counts come back as
# one string ("N,n1,n2,..."; an empty n: no insight holds it), so a retrieval that asks for hundreds
# does not pay the client's encoding and parsing per feature. Nothing while the counts are incomplete.
# KEYS: the counts. ARGV: the features.
_WORD_COUNTS = """
if not redis.call('HGET', KEYS[1], '#complete') then return false end
local out = {redis.call('HGET', KEYS[1], '#n') or '0'}
for f in string.gmatch(ARGV[1], '[^,]+') do out[#out + 1] = redis.call('HGET', KEYS[1], f) or '' end
return table.concat(out, ',')
"""
#: Fields of a namespace's word counts ``word_table`` asks for a round trip (HSCAN's COUNT): a page
#: keeps Redis busy well under a millisecond, so a large table never blocks the server.
WORD_TABLE_PAGE = 5_000
#: Insights whose texts ``count_words`` reads a round trip.
COUNT_BATCH = 1000


def _lua(name: str) -> str:
    return resources.files("evomem.adapters.redis").joinpath("lua", name).read_text()


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisGraphStore:
    """A ``GraphStore`` on one Redis (or Valkey) server."""

    def __init__(
        self, client: Client, degree: int = 0, wait_replicas: int = 0, wait_timeout_ms: int = 1000
    ) -> None:
        self.r = mapped(client)
        self.degree = degree
        self.clustered = is_cluster(self.r)
        # replicas that must hold an event's edits before it is acknowledged (a failover then keeps them)
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self._feed = RedisChangeFeed(self.r)
        check_layout(client)
        self._apply = self.r.register_script(_lua("apply.lua"))
        self._control = self.r.register_script(_lua("control.lua"))
        self._link = self.r.register_script(_LINK)
        self._count_words = self.r.register_script(_COUNT_WORDS)
        self._counted_so_far = self.r.register_script(_COUNTED_SO_FAR)
        self._word_counts = self.r.register_script(_WORD_COUNTS)

    # -- writes ------------------------------------------------------------------------------
    def apply(self, plan: EditPlan) -> ApplyResult:
        result = self.apply_many([plan])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def apply_many(self, plans: Collection[EditPlan]) -> list[ApplyResult | Exception]:
        """Apply several plans in one round trip, each atomic on its own; a plan that fails gives
        its exception in its place and the others are applied."""
        if not plans:
            return []
        pipe = self.r.pipeline(transaction=False)
        for plan in plans:
            self._apply(
                keys=self._apply_keys(plan),
                args=[plan.to_json(), keys.PREFIX, CHANGES_MAXLEN, HISTORY_MAXLEN],
                client=pipe,
            )
        try:
            raw = pipe.execute(raise_on_error=False)
        except TransientError as exc:
            raise TransientError("redis unreachable while applying a batch") from exc
        docs = [r if isinstance(r, Exception) else json.loads(_s(r)) for r in raw]
        try:
            if self.clustered:
                self._send_outboxes(
                    [
                        (p.namespace, keys.outbox(p.namespace, p.event_id), d)
                        for p, d in zip(plans, docs, strict=True)
                        if isinstance(d, dict)
                    ]
                )
            durable(
                self.r,
                [keys.applied(p.namespace, p.event_id) for p in plans],
                self.wait_replicas,
                self.wait_timeout_ms,
            )
        except TransientError as exc:
            raise TransientError(f"redis did not keep a batch's edits: {exc}") from exc
        return [_error(d) if isinstance(d, Exception) else _result(d) for d in docs]

    def _apply_keys(self, plan: EditPlan) -> list[str]:
        ns = plan.namespace
        own = [
            keys.applied(ns, plan.event_id),
            keys.namespace_insights(ns),
            keys.namespace_queries(ns),
            keys.namespace_texts(ns),
            keys.recent_outcomes(ns),
            keys.query(ns, plan.query_id),
            keys.outbox(ns, plan.event_id),
        ]
        if self.clustered:
            return own
        return [*own, keys.INSIGHT_DIRECTORY, keys.NAMESPACES, keys.HISTORY_STREAM, keys.CHANGES_STREAM]

    def _send_outboxes(self, applied: list[tuple[str, str, dict[str, Any]]]) -> None:
        """On a cluster: write what each applied event left in its outbox (history, change feed, id
        directory, namespace list, each in its own slot), then delete the outboxes. Run before the
        events are acknowledged, so a process that dies in between leaves the events pending and
        their replay sends the outbox again: the change feed and the history are at least once
        (a change is idempotent for a projector; a history record carries its event id)."""
        sent = [(ns, key, doc["outbox"]) for ns, key, doc in applied if doc.get("outbox")]
        if not sent:
            return
        pipe = self.r.pipeline(transaction=False)
        for ns, _, box in sent:
            pipe.sadd(keys.NAMESPACES, ns)
            ids = _list(box.get("ids"))
            if ids:
                pipe.hset(keys.INSIGHT_DIRECTORY, mapping=dict.fromkeys(ids, ns))
            for record in _list(box.get("history")):
                pipe.xadd(
                    keys.HISTORY_STREAM, {"ns": ns, "record": record}, maxlen=HISTORY_MAXLEN, approximate=True
                )
            for kind, node_id, version in _list(box.get("changes")):
                pipe.xadd(
                    keys.CHANGES_STREAM,
                    {"kind": kind, "ns": ns, "id": node_id, "version": version},
                    maxlen=CHANGES_MAXLEN,
                    approximate=True,
                )
        pipe.execute()
        pipe = self.r.pipeline(transaction=False)
        for _, key, _ in sent:
            pipe.delete(key)
        pipe.execute()
        durable(
            self.r,
            [keys.CHANGES_STREAM, keys.HISTORY_STREAM, keys.INSIGHT_DIRECTORY, keys.NAMESPACES],
            self.wait_replicas,
            self.wait_timeout_ms,
        )

    # -- control requests (evomem.core.lifecycle) ---------------------------------------------------
    def apply_control(self, plan: ControlPlan) -> ControlResult:
        ns = plan.namespace
        box = keys.outbox(ns, f"control:{plan.request_id}")
        own = [keys.control(ns, plan.request_id), keys.reverted(ns), box]
        try:
            raw = self._control(
                keys=own if self.clustered else [*own, keys.HISTORY_STREAM, keys.CHANGES_STREAM],
                args=[plan.to_json(), keys.PREFIX, CHANGES_MAXLEN, HISTORY_MAXLEN],
            )
            doc = json.loads(_s(raw))
            if self.clustered:
                self._send_outboxes([(ns, box, doc)])
            durable(self.r, [own[0]], self.wait_replicas, self.wait_timeout_ms)
        except TransientError as exc:
            raise TransientError(f"redis did not keep a control request: {exc}") from exc
        return ControlResult(
            doc["request_id"],
            bool(doc.get("replayed")),
            int(doc.get("reverted") or 0),
            int(doc.get("skipped") or 0),
            bool(doc.get("changed")),
        )

    def applied_events(self, namespace: str, event_ids: Collection[str]) -> dict[str, AppliedEvent]:
        ids = list(dict.fromkeys(event_ids))
        if not ids:
            return {}
        out: dict[str, AppliedEvent] = {}
        for e, raw in zip(ids, self.r.mget([keys.applied(namespace, e) for e in ids]), strict=True):
            if raw is None:
                continue
            d = json.loads(_s(raw))
            edits = tuple(
                AppliedEdit(
                    o["op"],
                    o["outcome"],
                    o.get("insight_id"),
                    o.get("new_id"),
                    o.get("forwarded_to"),
                    bool(o.get("judged", True)),
                )
                for o in _list(d.get("outcomes"))
            )
            query_id = d.get("query_id") or self._query_of(namespace, e, edits)
            out[e] = AppliedEvent(e, query_id, edits)
        return out

    def _query_of(self, namespace: str, event_id: str, edits: tuple[AppliedEdit, ...]) -> str:
        """An event applied before its result kept its query: the query its history records name."""
        for edit in edits:
            for node in (edit.insight_id, edit.new_id):
                if node is None:
                    continue
                for raw in self.r.lrange(keys.insight_history(namespace, node), 0, -1):
                    record = json.loads(_s(raw))
                    if record.get("event_id") == event_id:
                        return str(record["query_id"])
        return ""

    def events_since(self, namespace: str, since: datetime) -> list[str]:
        # the history stream's entry ids are the times its records were written, never before the
        # time an edit carries: reading from ``since`` on misses none
        start = f"{int(since.timestamp() * 1000) - CLOCK_SLACK_MS}-0"
        found: list[str] = []
        while True:
            page = self.r.xrange(keys.HISTORY_STREAM, min=start, max="+", count=5000)
            for _, fields in page:
                if _s(fields.get(b"ns", b"")) != namespace:
                    continue
                record = json.loads(_s(fields[b"record"]))
                if record.get("op") in CONTROL_OPS:
                    continue
                if datetime.fromisoformat(record["at"]) >= since:
                    found.append(record["event_id"])
            if len(page) < 5000:
                break
            start = "(" + _s(page[-1][0])
        return list(dict.fromkeys(found))

    def link_queries(self, namespace: str, query_id: str, similar: Mapping[str, float]) -> None:
        pairs = [x for q, w in similar.items() for x in (q, repr(float(w)))]
        self._link(
            keys=[keys.query(namespace, query_id)],
            args=[keys.ns_prefix(namespace), query_id, self.degree, *pairs],
        )

    def unlinked(self, namespace: str, query_ids: Collection[str]) -> set[str]:
        ids = list(query_ids)
        pipe = self.r.pipeline(transaction=False)
        for q in ids:
            pipe.hexists(keys.query(namespace, q), "link")
        return {q for q, flag in zip(ids, pipe.execute(), strict=True) if flag}

    def save_decisions(self, decisions: Mapping[EventKey, StoredDecision]) -> dict[EventKey, StoredDecision]:
        """Store each decision unless one is stored for its event; return the stored ones."""
        refs = list(decisions)
        pipe = self.r.pipeline(transaction=False)
        for ns, event_id in refs:
            pipe.set(keys.decision(ns, event_id), _dump_decision(decisions[(ns, event_id)]), nx=True)
        for ns, event_id in refs:
            pipe.get(keys.decision(ns, event_id))
        stored = pipe.execute()[len(refs) :]
        return {ref: _load_decision(raw) for ref, raw in zip(refs, stored, strict=True)}

    def load_decisions(self, events: Collection[EventKey]) -> dict[EventKey, StoredDecision]:
        refs = list(dict.fromkeys(events))
        if not refs:
            return {}
        raw = self.r.mget([keys.decision(ns, e) for ns, e in refs])
        return {ref: _load_decision(r) for ref, r in zip(refs, raw, strict=True) if r}

    def load_retrievals(self, retrievals: Collection[EventKey]) -> dict[EventKey, RetrievalRecord]:
        refs = list(dict.fromkeys(retrievals))
        if not refs:
            return {}
        raw = self.r.mget([keys.retrieval(ns, rid) for ns, rid in refs])
        return {
            (ns, rid): _retrieval(ns, rid, r) for (ns, rid), r in zip(refs, raw, strict=True) if r is not None
        }

    def save_retrieval(self, record: RetrievalRecord, ttl_s: int) -> None:
        doc = {
            "query": record.query,
            "similar": list(record.similar),
            "similar_scores": list(record.similar_scores),
            "insight_ids": list(record.insight_ids),
            "similarity": list(record.similarity),
            "scores": [list(s) for s in record.scores],
            "at": record.at,
        }
        if record.vector is not None:
            doc["vector"] = record.vector
        self.r.set(keys.retrieval(record.namespace, record.id), json.dumps(doc), ex=ttl_s)

    # -- reads for consolidation and retrieval ---------------------------------------------------
    def heads(self, namespace: str, ids: Collection[str]) -> dict[str, InsightHead]:
        ids = list(dict.fromkeys(ids))
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(keys.insight(namespace, i), "text", "state", "version", "jpos", "jneg")
            pipe.scard(keys.insight_positive(namespace, i))
            pipe.scard(keys.insight_negative(namespace, i))
        raw = pipe.execute()
        out: dict[str, InsightHead] = {}
        for n, i in enumerate(ids):
            (text, state, version, jpos, jneg), pos, neg = raw[3 * n], raw[3 * n + 1], raw[3 * n + 2]
            if text is not None and state is not None:
                out[i] = InsightHead(
                    i,
                    namespace,
                    _s(text),
                    _s(state),
                    int(version or 0),
                    pos,
                    neg,
                    int(jpos or 0),
                    int(jneg or 0),
                )
        return out

    def duplicate_candidates(self, namespace: str, bands: Collection[str]) -> set[str]:
        if not bands:
            return set()
        return {_s(x) for x in self.r.sunion([keys.duplicate_band(namespace, b) for b in bands])}

    def word_counts(self, namespace: str, features: Collection[int]) -> tuple[int, dict[int, int]] | None:
        fields = list(dict.fromkeys(features))
        raw = self._word_counts(keys=[keys.insight_words(namespace)], args=[",".join(map(str, fields))])
        if raw is None:
            return None
        total, *counts = _s(raw).split(",")
        return int(total), {f: int(n) for f, n in zip(fields, counts, strict=True) if n}

    def word_table(self, namespace: str, limit: int) -> tuple[int, dict[int, int]] | None:
        # paged (HSCAN), so a large table never blocks the server: a count that moves meanwhile is
        # one an insight being created moves, which its retriever is told of (``WordTable``)
        key = keys.insight_words(namespace)
        counts: dict[int, int] = {}
        meta: dict[str, int] = {}
        cursor: Any = 0
        while True:
            cursor, page = self.r.hscan(key, cursor, count=WORD_TABLE_PAGE)
            for f, n in page.items():
                name = _s(f)
                if name.startswith("#"):
                    meta[name] = int(n)
                else:
                    counts[int(name)] = int(n)
            if len(counts) > limit:
                return None
            if int(cursor) == 0:
                break
        if "#complete" not in meta:
            return None
        return meta.get("#n", 0), {f: n for f, n in counts.items() if n}

    def count_words(self, namespace: str) -> bool:
        words_key, members_key = keys.insight_words(namespace), keys.namespace_insights(namespace)
        members, held = self._counted_so_far(keys=[words_key, members_key])
        ids = sorted(_s(i) for i in members)
        before = {_s(f): int(n) for f, n in zip(held[::2], held[1::2], strict=True)}
        if "#complete" in before:
            return True
        counts: Counter[str] = Counter()
        for start in range(0, len(ids), COUNT_BATCH):
            pipe = self.r.pipeline(transaction=False)
            for i in ids[start : start + COUNT_BATCH]:
                pipe.hget(keys.insight(namespace, i), "text")
            for text in pipe.execute():
                if text is not None:
                    counts.update(str(f) for f in word_features(_s(text)))
        args: list[Any] = [len(ids), before.pop("#n", 0)]
        for f in counts.keys() | before.keys():
            change = counts.get(f, 0) - before.get(f, 0)
            if change:
                args += [f, change]
        self._count_words(keys=[words_key], args=args)
        return True

    def neighbours(self, namespace: str, query_ids: Collection[str]) -> dict[str, dict[str, float]]:
        ids = list(query_ids)
        pipe = self.r.pipeline(transaction=False)
        for q in ids:
            pipe.zrange(keys.query_neighbours(namespace, q), 0, -1, withscores=True)
        try:
            raw = pipe.execute()
        except TransientError as exc:
            raise TransientError("redis unreachable while expanding neighbours") from exc
        return {q: {_s(m): float(w) for m, w in members} for q, members in zip(ids, raw, strict=True)}

    def load_retrieval(self, namespace: str, retrieval_id: str) -> RetrievalRecord | None:
        raw = self.r.get(keys.retrieval(namespace, retrieval_id))
        return None if raw is None else _retrieval(namespace, retrieval_id, raw)

    def is_applied(self, namespace: str, event_id: str) -> bool:
        return bool(self.r.exists(keys.applied(namespace, event_id)))

    def applied_result(self, namespace: str, event_id: str) -> ApplyResult | None:
        raw = self.r.get(keys.applied(namespace, event_id))
        if raw is None:
            return None
        try:
            doc = json.loads(_s(raw))
        except ValueError:
            return None
        return _result(doc) if isinstance(doc, dict) and "event_id" in doc else None

    def recent_quality(self, namespace: str) -> QualitySignal:
        rows = [_s(x).split(":") for x in self.r.lrange(keys.recent_outcomes(namespace), 0, -1)]
        return QualitySignal(
            len(rows),
            sum(int(r[0]) for r in rows),
            sum(int(r[1]) for r in rows),
            sum(int(r[2]) for r in rows),
        )

    # -- projection ------------------------------------------------------------------------------
    def changes(self, after: str, count: int) -> list[Change]:
        return self._feed.changes(after, count)

    def query_points(self, refs: Collection[EventKey]) -> dict[EventKey, QueryPoint]:
        refs = list(dict.fromkeys(refs))
        pipe = self.r.pipeline(transaction=False)
        for ns, q in refs:
            pipe.hmget(keys.query(ns, q), "text", "status", "version", "vec")
            pipe.smembers(keys.query_supports(ns, q))
            pipe.smembers(keys.query_harms(ns, q))
        raw = pipe.execute()
        out: dict[EventKey, QueryPoint] = {}
        for n, (ns, q) in enumerate(refs):
            (text, status, version, vec), pos, neg = raw[3 * n], raw[3 * n + 1], raw[3 * n + 2]
            if text is None:
                continue
            out[(ns, q)] = QueryPoint(
                q,
                ns,
                _s(text),
                _s(status),
                int(version or 1),
                tuple(sorted(_s(x) for x in pos)),
                tuple(sorted(_s(x) for x in neg)),
                None if vec is None else _s(vec),
            )
        return out

    def insight_points(self, refs: Collection[EventKey]) -> dict[EventKey, InsightPoint]:
        refs = list(dict.fromkeys(refs))
        pipe = self.r.pipeline(transaction=False)
        for ns, i in refs:
            pipe.hmget(keys.insight(ns, i), "text", "state", "version")
            pipe.smembers(keys.insight_inherits(ns, i))
        raw = pipe.execute()
        out: dict[EventKey, InsightPoint] = {}
        for n, (ns, i) in enumerate(refs):
            (text, state, version), inherits = raw[2 * n], raw[2 * n + 1]
            if text is None or state is None:
                continue
            out[(ns, i)] = InsightPoint(
                i, ns, _s(text), _s(state), int(version or 1), tuple(sorted(_s(x) for x in inherits))
            )
        return out

    # -- the review queue (evomem.core.review) and staleness (evomem.core.staleness) --------------
    def hold(self, held: Sequence[HeldEdit]) -> None:
        if not held:
            return
        pipe = self.r.pipeline(transaction=False)
        for h in held:
            pipe.hsetnx(keys.reviews(h.namespace), h.review_id, h.model_dump_json())
        pipe.execute()
        durable(self.r, [keys.reviews(h.namespace) for h in held], self.wait_replicas, self.wait_timeout_ms)

    def held_ids(self, namespace: str, review_ids: Collection[str]) -> set[str]:
        ids = list(dict.fromkeys(review_ids))
        if not ids:
            return set()
        found = self.r.hmget(keys.reviews(namespace), ids)
        return {i for i, raw in zip(ids, found, strict=True) if raw is not None}

    def reviews(self, namespace: str) -> list[Review]:
        held = self.r.hgetall(keys.reviews(namespace))
        decided = self.r.hgetall(keys.review_decisions(namespace))
        out = [
            Review(
                held=HeldEdit.model_validate_json(raw),
                decision=ReviewDecision.model_validate_json(decided[k]) if k in decided else None,
            )
            for k, raw in held.items()
        ]
        return sorted(out, key=lambda r: (r.held.held_at, r.held.review_id))

    def decide_review(self, namespace: str, review_id: str, decision: ReviewDecision) -> Review | None:
        raw = self.r.hget(keys.reviews(namespace), review_id)
        if raw is None:
            return None
        key = keys.review_decisions(namespace)
        self.r.hsetnx(key, review_id, decision.model_dump_json())
        stands = self.r.hget(key, review_id)
        durable(self.r, [key], self.wait_replicas, self.wait_timeout_ms)
        return Review(
            held=HeldEdit.model_validate_json(raw),
            decision=ReviewDecision.model_validate_json(stands) if stands is not None else None,
        )

    def served_records(self, namespace: str) -> list[ServedCounts]:
        fields = ("state", "pinned", "version", "served", "helped", "served_at", "created_at")
        out: list[ServedCounts] = []
        ids: list[str] = []
        for member in self.r.sscan_iter(keys.namespace_insights(namespace), count=COUNT_BATCH):
            ids.append(_s(member))
            if len(ids) >= COUNT_BATCH:
                out.extend(self._served(namespace, ids, fields))
                ids = []
        out.extend(self._served(namespace, ids, fields))
        return out

    def claim_sweep(self, every_s: float) -> bool:
        if every_s <= 0:
            return True
        return bool(self.r.set(keys.STALE_SWEEP, "1", nx=True, px=max(1, int(every_s * 1000))))

    def _served(self, namespace: str, ids: list[str], fields: tuple[str, ...]) -> list[ServedCounts]:
        if not ids:
            return []
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(keys.insight(namespace, i), *fields)
        out = []
        for i, row in zip(ids, pipe.execute(), strict=True):
            state, pinned, version, served, helped, served_at, created_at = (
                None if v is None else _s(v) for v in row
            )
            if state != "active" or created_at is None:
                continue
            out.append(
                ServedCounts(
                    i,
                    state,
                    pinned == "1",
                    int(version or 0),
                    int(served or 0),
                    int(helped or 0),
                    datetime.fromisoformat(served_at or created_at),
                )
            )
        return out

    # -- inspection --------------------------------------------------------------------------------
    def namespace_of(self, ids: Collection[str]) -> dict[str, str]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        raw = self.r.hmget(keys.INSIGHT_DIRECTORY, ids)
        return {i: _s(ns) for i, ns in zip(ids, raw, strict=True) if ns is not None}

    def insights(self, ids: Collection[str]) -> dict[str, InsightNode]:
        where = self.namespace_of(ids)
        refs = list(where.items())
        pipe = self.r.pipeline(transaction=False)
        for i, ns in refs:
            pipe.hgetall(keys.insight(ns, i))
            pipe.smembers(keys.insight_positive(ns, i))
            pipe.smembers(keys.insight_negative(ns, i))
        raw = pipe.execute()
        out: dict[str, InsightNode] = {}
        for n, (i, ns) in enumerate(refs):
            h, pos, neg = raw[3 * n], raw[3 * n + 1], raw[3 * n + 2]
            if not h:
                continue
            d = {_s(k): _s(v) for k, v in h.items()}
            out[i] = InsightNode(
                id=i,
                namespace=ns,
                text=d["text"],
                state=d["state"],
                positive=frozenset(_s(x) for x in pos),
                negative=frozenset(_s(x) for x in neg),
                version=int(d["version"]),
                revised_from=d.get("revised_from"),
                revised_to=d.get("revised_to"),
                created_by_event=d["created_by_event"],
                created_at=datetime.fromisoformat(d["created_at"]),
                updated_at=datetime.fromisoformat(d["updated_at"]),
                pinned=d.get("pinned") == "1",
            )
        return out

    def queries(self, namespace: str, ids: Collection[str]) -> dict[str, QueryNode]:
        ids = list(dict.fromkeys(ids))
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(keys.query(namespace, i))
        out: dict[str, QueryNode] = {}
        for i, h in zip(ids, pipe.execute(), strict=True):
            if not h:
                continue
            d = {_s(k): _s(v) for k, v in h.items()}
            out[i] = QueryNode(
                id=i,
                namespace=namespace,
                text=d["text"],
                status=d["status"],
                trajectory=json.loads(d["trajectory"]),
                event_id=d["event_id"],
                created_at=datetime.fromisoformat(d["created_at"]),
            )
        return out

    def states(self, ids: Collection[str]) -> dict[str, str]:
        """active | archived per insight id, without reading evidence (cheap for stats)."""
        refs = list(self.namespace_of(ids).items())
        pipe = self.r.pipeline(transaction=False)
        for i, ns in refs:
            pipe.hget(keys.insight(ns, i), "state")
        return {i: _s(st) for (i, _), st in zip(refs, pipe.execute(), strict=True) if st is not None}

    def history(self, insight_id: str) -> list[EditRecord]:
        ns = self.namespace_of([insight_id]).get(insight_id)
        if ns is None:
            return []
        return [
            EditRecord(**json.loads(_s(x)))
            for x in self.r.lrange(keys.insight_history(ns, insight_id), 0, -1)
        ]

    def lineage(self, insight_id: str) -> list[str]:
        ns = self.namespace_of([insight_id]).get(insight_id)
        if ns is None or not self.r.exists(keys.insight(ns, insight_id)):
            return []

        def hop(i: str, field: str) -> str | None:
            v = self.r.hget(keys.insight(ns, i), field)
            return _s(v) if v is not None else None

        chain = [insight_id]
        back = hop(insight_id, "revised_from")
        while back and len(chain) < _CHAIN // 2:
            chain.insert(0, back)
            back = hop(back, "revised_from")
        fwd = hop(insight_id, "revised_to")
        while fwd and len(chain) < _CHAIN:
            chain.append(fwd)
            fwd = hop(fwd, "revised_to")
        return chain

    def edges_into(self, insight_id: str) -> list[tuple[str, str]]:
        ns = self.namespace_of([insight_id]).get(insight_id)
        if ns is None:
            return []
        members = (_s(m).split("|", 1) for m in self.r.smembers(keys.insight_edges(ns, insight_id)))
        return sorted((a, q) for a, q in members)

    def namespaces(self) -> set[str]:
        return {_s(x) for x in self.r.smembers(keys.NAMESPACES)}

    def insight_ids(self, namespace: str) -> set[str]:
        return {_s(x) for x in self.r.smembers(keys.namespace_insights(namespace))}

    def query_ids(self, namespace: str) -> set[str]:
        return {_s(x) for x in self.r.smembers(keys.namespace_queries(namespace))}

    def close(self) -> None:
        self.r.close()


def check_layout(client: Client) -> None:
    """Refuse a Redis that holds evomem data in another key layout; mark an empty one as ours."""
    found = client.get(keys.LAYOUT_KEY)
    if found is not None:
        if int(found) != keys.LAYOUT:
            raise ConfigError(
                f"this Redis holds evomem data in key layout {int(found)}; this evomem reads layout "
                f"{keys.LAYOUT}. Export it with the evomem that wrote it and import it here."
            )
        return
    if client.exists(keys.NAMESPACES) or client.exists("em:changes"):
        raise ConfigError(
            "this Redis holds evomem data in key layout 1 (evomem 0.1); this evomem reads layout "
            f"{keys.LAYOUT}. Export it with evomem 0.1 (`evomem export`) and import it here "
            "(`evomem import`) into an empty Redis."
        )
    client.set(keys.LAYOUT_KEY, keys.LAYOUT, nx=True)


def _list(value: Any) -> list[Any]:
    """A Lua table that cjson encoded: an empty one comes back as ``{}``."""
    return value if isinstance(value, list) else []


def _dump_decision(stored: StoredDecision) -> str:
    return json.dumps({"digest": stored.digest, "decision": stored.decision.model_dump(mode="json")})


def _load_decision(raw: bytes | str) -> StoredDecision:
    doc = json.loads(raw)
    return StoredDecision(ControllerDecision.model_validate(doc["decision"]), doc.get("digest"))


def _retrieval(namespace: str, retrieval_id: str, raw: bytes | str) -> RetrievalRecord:
    d = json.loads(raw)
    return RetrievalRecord(
        retrieval_id,
        namespace,
        d["query"],
        tuple(d["similar"]),
        tuple(d["insight_ids"]),
        tuple(d.get("similar_scores") or ()),
        tuple(d.get("similarity") or ()),
        tuple((float(s), int(p), int(c)) for s, p, c in d.get("scores") or ()),
        d.get("at"),
        d.get("vector") if isinstance(d.get("vector"), str) else None,
    )


def _error(exc: Exception) -> Exception:
    """A script's error reply (returned in its place by the pipeline) as the evomem error it means."""
    if isinstance(exc, redis.ResponseError):
        for field in ("event_id", "query_id"):
            marker = f"{field}: "
            if str(exc).startswith(marker) or f" {marker}" in str(exc):
                return InvalidEventError(field, str(exc).split(marker, 1)[1])
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return TransientError(f"redis unreachable while applying: {exc}")
    if isinstance(exc, redis.RedisError):
        return StoreError(f"redis refused an edit: {exc}")
    return exc


def _result(d: dict[str, Any]) -> ApplyResult:
    outcomes = tuple(
        EditOutcome(
            o["op"],
            o.get("insight_id"),
            o["outcome"],
            o.get("new_id"),
            o.get("forwarded_to"),
            bool(o.get("judged", True)),
        )
        for o in d.get("outcomes") or []
    )
    return ApplyResult(d["event_id"], bool(d.get("replayed")), outcomes, tuple(d.get("created") or []))


__all__ = ["RedisGraphStore", "check_layout"]
