"""The system of record in Redis: insight and query nodes, evidence sets, edges and history.

Plain redis-py, not redis-om: evidence must be added with SADD and an event's edits committed in
one Lua script, atomically and idempotently, which an object mapper that saves whole hashes cannot do
(the README's "Storage" section says more).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import datetime
from importlib import resources
from typing import Any

import redis

from evomem import keys
from evomem.editing import EditPlan
from evomem.errors import InvalidEventError, TransientError
from evomem.ports import ApplyResult, Change, EditOutcome, EditRecord, RetrievalRecord
from evomem.redis_server import Client
from schemas import ControllerDecision, InsightNode, QueryNode

CHANGES_MAXLEN = 2_000_000
HISTORY_MAXLEN = 10_000_000


# Link a query to similar ones of its own namespace, both ways, and clear its "link" flag.
_LINK = """
local P, q = ARGV[1], ARGV[2]
local ns = redis.call('HGET', P .. ':q:' .. q, 'namespace')
if not ns then return 0 end
for i = 3, #ARGV do
  local other = ARGV[i]
  if other ~= q and redis.call('HGET', P .. ':q:' .. other, 'namespace') == ns then
    redis.call('SADD', P .. ':q:' .. q .. ':nbr', other)
    redis.call('SADD', P .. ':q:' .. other .. ':nbr', q)
  end
end
redis.call('HDEL', P .. ':q:' .. q, 'link')
return 1
"""


def _lua(name: str) -> str:
    return resources.files("evomem.stores").joinpath("lua", name).read_text()


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisGraphStore:
    """A ``GraphStore`` on one Redis (or Valkey) server."""

    def __init__(self, client: Client) -> None:
        self.r = client
        self._apply = self.r.register_script(_lua("apply.lua"))
        self._link = self.r.register_script(_LINK)

    # -- writes ------------------------------------------------------------------------------
    def apply(self, plan: EditPlan) -> ApplyResult:
        try:
            raw = self._apply(args=[plan.to_json(), keys.PREFIX, CHANGES_MAXLEN, HISTORY_MAXLEN])
        except redis.ConnectionError as exc:
            raise TransientError(f"redis unreachable while applying event {plan.event_id}") from exc
        except redis.ResponseError as exc:
            if str(exc).startswith("query_id:"):
                raise InvalidEventError("query_id", str(exc).split(": ", 1)[1]) from None
            raise
        return _result(json.loads(_s(raw)))

    def apply_many(self, plans: Collection[EditPlan]) -> list[ApplyResult | Exception]:
        """Apply several plans in one round trip, each atomic on its own; a plan that fails gives
        its exception in its place and the others are applied."""
        if not plans:
            return []
        pipe = self.r.pipeline(transaction=False)
        for plan in plans:
            self._apply(args=[plan.to_json(), keys.PREFIX, CHANGES_MAXLEN, HISTORY_MAXLEN], client=pipe)
        try:
            raw = pipe.execute(raise_on_error=False)
        except redis.ConnectionError as exc:
            raise TransientError("redis unreachable while applying a batch") from exc
        return [_error(r) if isinstance(r, Exception) else _result(json.loads(_s(r))) for r in raw]

    def link_queries(self, query_id: str, similar: Collection[str]) -> None:
        self._link(args=[keys.PREFIX, query_id, *similar])

    def unlinked(self, query_ids: Collection[str]) -> set[str]:
        ids = list(query_ids)
        pipe = self.r.pipeline(transaction=False)
        for q in ids:
            pipe.hexists(keys.query(q), "link")
        return {q for q, flag in zip(ids, pipe.execute(), strict=True) if flag}

    def save_decisions(self, decisions: Mapping[str, ControllerDecision]) -> dict[str, ControllerDecision]:
        """Store each decision unless one is stored for its event; return the stored ones."""
        ids = list(decisions)
        pipe = self.r.pipeline(transaction=False)
        for event_id in ids:
            pipe.set(keys.decision(event_id), decisions[event_id].model_dump_json(), nx=True)
        for event_id in ids:
            pipe.get(keys.decision(event_id))
        stored = pipe.execute()[len(ids) :]
        return {i: ControllerDecision.model_validate_json(raw) for i, raw in zip(ids, stored, strict=True)}

    def load_decisions(self, event_ids: Collection[str]) -> dict[str, ControllerDecision]:
        ids = list(event_ids)
        if not ids:
            return {}
        raw = self.r.mget([keys.decision(i) for i in ids])
        return {i: ControllerDecision.model_validate_json(r) for i, r in zip(ids, raw, strict=True) if r}

    def load_retrievals(self, retrieval_ids: Collection[str]) -> dict[str, RetrievalRecord]:
        ids = list(dict.fromkeys(retrieval_ids))
        if not ids:
            return {}
        raw = self.r.mget([keys.retrieval(i) for i in ids])
        return {i: _retrieval(i, r) for i, r in zip(ids, raw, strict=True) if r is not None}

    def save_decision(self, event_id: str, decision: ControllerDecision) -> ControllerDecision:
        key = keys.decision(event_id)
        pipe = self.r.pipeline()
        pipe.set(key, decision.model_dump_json(), nx=True)
        pipe.get(key)
        _, stored = pipe.execute()
        return ControllerDecision.model_validate_json(stored)

    def save_retrieval(self, record: RetrievalRecord, ttl_s: int) -> None:
        doc = {
            "namespace": record.namespace,
            "query": record.query,
            "similar": list(record.similar),
            "insight_ids": list(record.insight_ids),
        }
        self.r.set(keys.retrieval(record.id), json.dumps(doc), ex=ttl_s)

    # -- reads -------------------------------------------------------------------------------
    def insights(self, ids: Collection[str]) -> dict[str, InsightNode]:
        ids = list(dict.fromkeys(ids))
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(keys.insight(i))
            pipe.smembers(keys.insight_positive(i))
            pipe.smembers(keys.insight_negative(i))
        raw = pipe.execute()
        out: dict[str, InsightNode] = {}
        for n, i in enumerate(ids):
            h, pos, neg = raw[3 * n], raw[3 * n + 1], raw[3 * n + 2]
            if not h:
                continue
            d = {_s(k): _s(v) for k, v in h.items()}
            out[i] = InsightNode(
                id=i,
                namespace=d["namespace"],
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
            )
        return out

    def queries(self, ids: Collection[str]) -> dict[str, QueryNode]:
        ids = list(dict.fromkeys(ids))
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(keys.query(i))
        out: dict[str, QueryNode] = {}
        for i, h in zip(ids, pipe.execute(), strict=True):
            if not h:
                continue
            d = {_s(k): _s(v) for k, v in h.items()}
            out[i] = QueryNode(
                id=i,
                namespace=d["namespace"],
                text=d["text"],
                status=d["status"],
                trajectory=json.loads(d["trajectory"]),
                event_id=d["event_id"],
                created_at=datetime.fromisoformat(d["created_at"]),
            )
        return out

    def neighbours(self, query_ids: Collection[str]) -> dict[str, set[str]]:
        ids = list(query_ids)
        pipe = self.r.pipeline(transaction=False)
        for q in ids:
            pipe.smembers(keys.query_neighbours(q))
        try:
            raw = pipe.execute()
        except redis.ConnectionError as exc:
            raise TransientError("redis unreachable while expanding neighbours") from exc
        return {q: {_s(x) for x in members} for q, members in zip(ids, raw, strict=True)}

    def states(self, ids: Collection[str]) -> dict[str, str]:
        """active | archived per insight id, without reading evidence (cheap for stats)."""
        ids = list(ids)
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hget(keys.insight(i), "state")
        return {i: _s(st) for i, st in zip(ids, pipe.execute(), strict=True) if st is not None}

    def namespace_of(self, ids: Collection[str]) -> dict[str, str]:
        ids = list(ids)
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hget(keys.insight(i), "namespace")
        return {i: _s(ns) for i, ns in zip(ids, pipe.execute(), strict=True) if ns is not None}

    def history(self, insight_id: str) -> list[EditRecord]:
        return [
            EditRecord(**json.loads(_s(x))) for x in self.r.lrange(keys.insight_history(insight_id), 0, -1)
        ]

    def lineage(self, insight_id: str) -> list[str]:
        def hop(i: str, field: str) -> str | None:
            v = self.r.hget(keys.insight(i), field)
            return _s(v) if v is not None else None

        if not self.r.exists(keys.insight(insight_id)):
            return []
        chain = [insight_id]
        back = hop(insight_id, "revised_from")
        while back and len(chain) < 32:
            chain.insert(0, back)
            back = hop(back, "revised_from")
        fwd = hop(insight_id, "revised_to")
        while fwd and len(chain) < 64:
            chain.append(fwd)
            fwd = hop(fwd, "revised_to")
        return chain

    def edges_into(self, insight_id: str) -> list[tuple[str, str]]:
        members = (_s(m).split("|", 1) for m in self.r.smembers(keys.insight_edges(insight_id)))
        return sorted((a, q) for a, q in members)

    def load_decision(self, event_id: str) -> ControllerDecision | None:
        raw = self.r.get(keys.decision(event_id))
        return ControllerDecision.model_validate_json(raw) if raw else None

    def is_applied(self, event_id: str) -> bool:
        return bool(self.r.exists(keys.applied(event_id)))

    def load_retrieval(self, retrieval_id: str) -> RetrievalRecord | None:
        raw = self.r.get(keys.retrieval(retrieval_id))
        return None if raw is None else _retrieval(retrieval_id, raw)

    def changes(self, after: str, count: int) -> list[Change]:
        entries = self.r.xread({keys.CHANGES_STREAM: after or "0-0"}, count=count)
        out: list[Change] = []
        for _stream, items in entries or []:
            for entry_id, fields in items:
                f = {_s(k): _s(v) for k, v in fields.items()}
                out.append(Change(_s(entry_id), f["kind"], f["id"], int(f["version"])))  # type: ignore[arg-type]
        return out

    def namespaces(self) -> set[str]:
        return {_s(x) for x in self.r.smembers(keys.NAMESPACES)}

    def insight_ids(self, namespace: str) -> set[str]:
        return {_s(x) for x in self.r.smembers(keys.namespace_insights(namespace))}

    def query_ids(self, namespace: str) -> set[str]:
        return {_s(x) for x in self.r.smembers(keys.namespace_queries(namespace))}

    def close(self) -> None:
        self.r.close()


def _retrieval(retrieval_id: str, raw: bytes | str) -> RetrievalRecord:
    d = json.loads(raw)
    return RetrievalRecord(
        retrieval_id, d["namespace"], d["query"], tuple(d["similar"]), tuple(d["insight_ids"])
    )


def _error(exc: Exception) -> Exception:
    """A script's error reply as the error it means."""
    if isinstance(exc, redis.ResponseError) and "query_id:" in str(exc):
        return InvalidEventError("query_id", str(exc).split("query_id: ", 1)[1])
    return exc


def _result(d: dict[str, Any]) -> ApplyResult:
    outcomes = tuple(
        EditOutcome(o["op"], o.get("insight_id"), o["outcome"], o.get("new_id"), o.get("forwarded_to"))
        for o in d.get("outcomes") or []
    )
    return ApplyResult(d["event_id"], bool(d.get("replayed")), outcomes, tuple(d.get("created") or []))


__all__ = ["RedisGraphStore"]
