"""``evomem export`` / ``evomem import``: a memory as JSON lines, for backups, audits and moves.

One record per line: ``{"kind": "query", ...}`` for each query node with its neighbours, and
``{"kind": "insight", ...}`` for each insight with its evidence, lineage links, hyperedges and edit
history. Import writes the nodes under their own ids and versions and announces each on the change
feed, so any projector rebuilds its index from them; importing the same file twice changes nothing
the second time (a node is only written if absent or older).
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Iterator
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from evomem import keys
from evomem.adapters.redis.connection import Client, mapped
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.core.ports import EXPORT_FORMAT as FORMAT
from evomem.core.ports import EditRecord
from evomem.errors import InvalidEventError, StoreError
from schemas import InsightNode, QueryNode
from schemas.models import MAX_INSIGHT_CHARS, Namespace


class _HistoryRecord(BaseModel):
    """An edit record as the store keeps it (``EditRecord``): exactly its fields, typed."""

    model_config = ConfigDict(extra="forbid", strict=True)

    event_id: str = Field(max_length=200)
    op: str = Field(max_length=32)
    outcome: str = Field(max_length=2000)
    insight_id: str | None = Field(max_length=200)
    new_id: str | None = Field(max_length=200)
    query_id: str = Field(max_length=200)
    decided_by: str = Field(max_length=200)
    at: str = Field(max_length=64)
    note: str | None = Field(None, max_length=4000)  # an operator's edit: "reverted ... by ..."
    undoes: str | None = Field(None, max_length=64)  # a REVERT: the outcome it undid


assert set(_HistoryRecord.model_fields) == {f.name for f in fields(EditRecord)}
_NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)

# Write one insight unless the store holds it at the same or a newer version. The evidence goes on
# both sides (the query's supports/harms too); returns the queries whose evidence grew. The caller
# checks first that the id is no other namespace's, and writes the id directory and the namespace
# list after (other slots on a cluster); it announces the written nodes at the end, once the
# revision links are all in (``inherits``). KEYS: the insight, the namespace's insights, its texts;
# the evidence keys share their slot. ARGV: namespace prefix, id, doc.
_PUT_INSIGHT = """
local N, id, doc = ARGV[1], ARGV[2], cjson.decode(ARGV[3])
local function k(kind, x) return N .. ':' .. kind .. ':' .. x end
local key = KEYS[1]
local have = redis.call('HGET', key, 'version')
if have and tonumber(have) >= doc.version then return {} end
if not have then  -- a new node: its words join the namespace's counts (keys.insight_words)
  local wk = N .. ':words'
  if redis.call('SCARD', KEYS[2]) == 0 and redis.call('EXISTS', wk) == 0 then
    redis.call('HSET', wk, '#complete', 1)
  end
  for _, f in ipairs(doc.words) do redis.call('HINCRBY', wk, string.format('%d', f), 1) end
  redis.call('HINCRBY', wk, '#n', 1)
end
redis.call('HSET', key, 'text', doc.text, 'state', doc.state, 'version', doc.version,
  'created_by_event', doc.created_by_event, 'created_at', doc.created_at, 'updated_at', doc.updated_at,
  'jpos', doc.jpos, 'jneg', doc.jneg)
if doc.revised_from ~= cjson.null then redis.call('HSET', key, 'revised_from', doc.revised_from) end
if doc.revised_to ~= cjson.null then redis.call('HSET', key, 'revised_to', doc.revised_to) end
local grew = {}
for _, q in ipairs(doc.positive) do
  redis.call('SADD', k('ins.pos', id), q)
  if redis.call('SADD', k('q.pos', q), id) == 1 then table.insert(grew, q) end
end
for _, q in ipairs(doc.negative) do
  redis.call('SADD', k('ins.neg', id), q)
  if redis.call('SADD', k('q.neg', q), id) == 1 then table.insert(grew, q) end
end
for _, e in ipairs(doc.edges) do redis.call('SADD', k('ins.edges', id), e[1] .. '|' .. e[2]) end
if redis.call('EXISTS', k('ins.hist', id)) == 0 then
  for _, h in ipairs(doc.history) do redis.call('RPUSH', k('ins.hist', id), cjson.encode(h)) end
end
if have then  -- an older node rewritten: its history says so
  local rec = doc.overwrite
  rec.outcome = 'replaced version ' .. have .. ' by ' .. doc.version
  redis.call('RPUSH', k('ins.hist', id), cjson.encode(rec))
end
redis.call('SADD', KEYS[2], id)
if doc.state == 'active' then
  redis.call('HSET', KEYS[3], doc.text_key, id)
  for _, band in ipairs(doc.bands) do redis.call('SADD', k('dup', band), id) end
end
table.insert(grew, 1, '')
return grew
"""

# Write one query and its weighted edges (a query's content never changes); 1 if it was new.
# KEYS: the query, its neighbours, the namespace's queries. ARGV: doc.
_PUT_QUERY = """
local doc = cjson.decode(ARGV[1])
for _, n in ipairs(doc.neighbours) do redis.call('ZADD', KEYS[2], 'GT', n[2], n[1]) end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'text', doc.text, 'status', doc.status,
  'trajectory', doc.trajectory_json, 'event_id', doc.event_id, 'created_at', doc.created_at)
redis.call('SADD', KEYS[3], doc.id)
return 1
"""


#: The largest version an imported node may carry: a change-feed version is a whole number the
#: projector and the edit scripts read back as an integer (Lua numbers are doubles: 2^53).
MAX_VERSION = 2**53


def import_jsonl(
    client: Client, lines: Iterable[str], namespaces: Collection[str] | None = None
) -> dict[str, int]:
    """Write the records of an export; returns how many nodes were written and skipped.

    Every record is validated first, line by line, and nothing is written unless all are valid
    (``InvalidEventError`` names the first bad line); ``namespaces`` confines the import to those.
    What is written is announced on the change feed even if a write fails part way (Redis lost),
    so no node is left in Redis that no index learns of; importing the file again completes it."""
    RedisGraphStore(client)  # refuses a Redis in another layout, marks an empty one
    records = list(_validated(lines, namespaces))
    client = mapped(client)
    _check_owners(client, records)
    put_insight = client.register_script(_PUT_INSIGHT)
    put_query = client.register_script(_PUT_QUERY)
    counts = {"queries": 0, "insights": 0, "skipped": 0}
    changed: dict[tuple[str, str], None] = {}  # queries to announce, in order
    written: list[tuple[str, str]] = []  # insights written, announced at the end
    versions: dict[tuple[str, str], int] = {}
    try:
        for n, kind, record in records:
            try:
                counts_key, touched = _put(client, kind, record, put_query, put_insight, versions)
            except StoreError as exc:  # a script's error reply: this record cannot go in
                raise InvalidEventError(f"line {n}", str(exc.__cause__ or exc)) from None
            counts[counts_key] += 1
            if kind == "query":
                changed.update(dict.fromkeys(touched))
            elif counts_key == "insights":
                changed.update(dict.fromkeys(touched[1:]))
                written.append(touched[0])
    finally:
        _announce(client, written, changed, versions)
    return counts


def _validated(
    lines: Iterable[str], namespaces: Collection[str] | None
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Each record of the file checked as the store will hold it; the first bad one ends it all."""
    out = []
    for n, line in enumerate(lines, 1):
        if n == 1:
            line = line.removeprefix("\ufeff")  # a byte-order mark some editors write
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record.pop("kind")
        except (ValueError, KeyError, AttributeError, TypeError):
            raise InvalidEventError(f"line {n}", "not an export record") from None
        if kind == "header":
            if record.get("format") not in (1, FORMAT):
                raise InvalidEventError(f"line {n}", f"export format {record.get('format')} is not {FORMAT}")
            continue
        try:
            _check(kind, record, namespaces)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or kind
            raise InvalidEventError(f"line {n}", f"{where}: {err['msg']}") from None
        except ValueError as exc:
            raise InvalidEventError(f"line {n}", str(exc)) from None
        out.append((n, kind, record))
    return iter(out)


def _check_owners(client: Any, records: list[tuple[int, str, dict[str, Any]]]) -> None:
    """An insight id already another namespace's is refused before anything is written."""
    insights = [(n, r["id"], r["namespace"]) for n, kind, r in records if kind == "insight"]
    pipe = client.pipeline(transaction=False)
    for _, i, _ns in insights:
        pipe.hget(keys.INSIGHT_DIRECTORY, i)
    for (n, i, ns), owner in zip(insights, pipe.execute() if insights else [], strict=True):
        if owner is not None and _str(owner) != ns:
            raise InvalidEventError(f"line {n}", f"namespace: insight {i} exists elsewhere")


def _list(record: dict[str, Any], name: str) -> list[Any]:
    """A record's list field (absent: empty); anything else is refused in one line."""
    value = record.get(name, [])
    if not isinstance(value, list):
        raise ValueError(f"{name}: a list, not {type(value).__name__}")
    return value


def _check(kind: str, record: dict[str, Any], namespaces: Collection[str] | None) -> None:
    if kind == "query":
        query = QueryNode.model_validate({k: v for k, v in record.items() if k != "neighbours"})
        _NAMESPACE.validate_python(query.namespace)
        for nb in _list(record, "neighbours"):
            pair = nb if isinstance(nb, list) else [nb, 1.0]
            if len(pair) != 2 or not isinstance(pair[0], str) or not isinstance(pair[1], (int, float)):
                raise ValueError("neighbours: each is [query id, weight]")
            if not math.isfinite(pair[1]):
                raise ValueError("neighbours: a weight is not a finite number")
        ns = query.namespace
    elif kind == "insight":
        fields = {k: v for k, v in record.items() if k not in ("edges", "history", "judged")}
        node = InsightNode.model_validate(fields)
        _NAMESPACE.validate_python(node.namespace)
        if not 1 <= node.version <= MAX_VERSION:
            raise ValueError(f"version: {node.version} is not between 1 and 2^53")
        if len(node.text) > MAX_INSIGHT_CHARS:
            raise ValueError(f"text: {len(node.text)} characters, more than {MAX_INSIGHT_CHARS}")
        for j, h in enumerate(_list(record, "history")):
            try:
                _HistoryRecord.model_validate(h)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ValueError(f"history[{j}].{where}: {err['msg']}") from None
        for e in _list(record, "edges"):
            if not (
                isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) and "|" not in x for x in e)
            ):
                raise ValueError("edges: each is [query id, query id]")
        judged = record.get("judged")
        if judged is not None and not (
            isinstance(judged, list)
            and len(judged) == 2
            and all(isinstance(j, int) and not isinstance(j, bool) and 0 <= j <= MAX_VERSION for j in judged)
        ):
            raise ValueError("judged: [judged positives, judged negatives], two whole numbers")
        ns = node.namespace
    else:
        raise ValueError(f"unknown record kind {kind!r}")
    if namespaces is not None and ns not in namespaces:
        raise ValueError(
            f"namespace {ns!r} is not one of those this import may write ({', '.join(sorted(namespaces))})"
        )


def _announce(
    client: Any,
    written: list[tuple[str, str]],
    changed: dict[tuple[str, str], None],
    versions: dict[tuple[str, str], int],
) -> None:
    for ns in sorted({ns for ns, _ in written}):
        _rebuild_inherits(client, ns)
    pipe = client.pipeline(transaction=False)
    for ns, i in written:
        pipe.xadd(keys.CHANGES_STREAM, {"kind": "insight", "ns": ns, "id": i, "version": versions[(ns, i)]})
    pipe.execute()
    for ns, q in changed:  # the query's version in its slot first, then its change (another slot)
        version = client.hincrby(keys.query(ns, q), "version", 1)
        client.xadd(keys.CHANGES_STREAM, {"kind": "query", "ns": ns, "id": q, "version": version})


def _rebuild_inherits(client: Client, namespace: str) -> None:
    """What each insight inherits Ω⁺ from follows from the revision links: every node on the chain
    after a revised or absorbed node inherits it."""
    graph = RedisGraphStore(client)
    ids = sorted(graph.insight_ids(namespace))
    pipe = client.pipeline(transaction=False)
    for i in ids:
        pipe.hget(keys.insight(namespace, i), "revised_to")
    successor = {i: _str(t) for i, t in zip(ids, pipe.execute(), strict=True) if t is not None}
    grows: dict[str, set[str]] = {}
    for start in successor:
        current, hops = start, 0
        while current in successor and hops < 64:
            current, hops = successor[current], hops + 1
            grows.setdefault(current, set()).add(start)
    pipe = client.pipeline(transaction=False)
    for target, sources in grows.items():
        pipe.sadd(keys.insight_inherits(namespace, target), *sorted(sources))
    pipe.execute()


def _put(
    client: Client,
    kind: str,
    record: dict[str, Any],
    put_query: Any,
    put_insight: Any,
    versions: dict[tuple[str, str], int],
) -> tuple[str, list[tuple[str, str]]]:
    from evomem.core import duplicates
    from evomem.core.editing import text_key
    from evomem.core.hashing import word_features

    if kind == "query":
        neighbours = [n if isinstance(n, list) else [n, 1.0] for n in record.pop("neighbours", [])]
        query = QueryNode.model_validate(record)
        doc = {
            **query.model_dump(mode="json"),
            "neighbours": neighbours,
            "trajectory_json": json.dumps(query.trajectory),
        }  # cjson would turn [] into {}
        ns, q = query.namespace, query.id
        written = put_query(
            keys=[keys.query(ns, q), keys.query_neighbours(ns, q), keys.namespace_queries(ns)],
            args=[json.dumps(doc)],
        )
        client.sadd(keys.NAMESPACES, ns)
        if written:
            return "queries", [(ns, q)]
        return "skipped", []
    if kind == "insight":
        edges, history = record.pop("edges", []), record.pop("history", [])
        # judged evidence counts (format 2); an older export counts all its evidence as judged
        judged = record.pop("judged", None)
        node = InsightNode.model_validate(record)
        jpos, jneg = judged if judged else (len(node.positive), len(node.negative))
        doc = {
            **node.model_dump(mode="json"),
            "positive": sorted(node.positive),
            "negative": sorted(node.negative),
            "edges": edges,
            "history": history,
            "text_key": text_key(node.text),
            "bands": duplicates.bands(node.text),
            "words": sorted(word_features(node.text)),
            "jpos": int(jpos),
            "jneg": int(jneg),
            "overwrite": {  # the edit record of an import that replaces an older version
                "event_id": "import",
                "op": "IMPORT",
                "outcome": "",
                "insight_id": node.id,
                "new_id": None,
                "query_id": "",
                "decided_by": "import",
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        }
        ns = node.namespace
        owner = client.hget(keys.INSIGHT_DIRECTORY, node.id)
        if owner is not None and _str(owner) != ns:
            raise StoreError(f"namespace: insight {node.id} exists elsewhere")
        grew = put_insight(
            keys=[keys.insight(ns, node.id), keys.namespace_insights(ns), keys.namespace_texts(ns)],
            args=[keys.ns_prefix(ns), node.id, json.dumps(doc)],
        )
        client.sadd(keys.NAMESPACES, ns)
        client.hset(keys.INSIGHT_DIRECTORY, node.id, ns)
        if not grew:
            return "skipped", []
        versions[(node.namespace, node.id)] = node.version
        return "insights", [(node.namespace, node.id), *((node.namespace, _str(q)) for q in grew[1:])]
    raise InvalidEventError("kind", f"unknown record kind {kind!r}")


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["import_jsonl"]
