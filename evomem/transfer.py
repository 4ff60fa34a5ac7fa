"""``evomem export`` / ``evomem import``: a memory as JSON lines, for backups, audits and moves.

One record per line: ``{"kind": "query", ...}`` for each query node with its neighbours, and
``{"kind": "insight", ...}`` for each insight with its evidence, lineage links, hyperedges and edit
history. Import writes the nodes under their own ids and versions and announces each on the change
feed, so any projector rebuilds its index from them; importing the same file twice changes nothing
the second time (a node is only written if absent or older).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Any, TextIO

import redis

from evomem import keys
from evomem.errors import InvalidEventError
from evomem.redis_server import Client
from evomem.stores.redis_graph import RedisGraphStore
from schemas import InsightNode, QueryNode

FORMAT = 1

# Write one node unless the store holds it at the same or a newer version; announce it.
_PUT_INSIGHT = """
local P, id, doc = ARGV[1], ARGV[2], cjson.decode(ARGV[3])
local key = P .. ':ins:' .. id
local have = redis.call('HGET', key, 'namespace')
if have and have ~= doc.namespace then
  return redis.error_reply('namespace: insight ' .. id .. ' exists elsewhere')
end
if have and tonumber(redis.call('HGET', key, 'version')) >= doc.version then return 0 end
redis.call('HSET', key, 'namespace', doc.namespace, 'text', doc.text, 'state', doc.state,
  'version', doc.version, 'created_by_event', doc.created_by_event, 'created_at', doc.created_at,
  'updated_at', doc.updated_at)
if doc.revised_from ~= cjson.null then redis.call('HSET', key, 'revised_from', doc.revised_from) end
if doc.revised_to ~= cjson.null then redis.call('HSET', key, 'revised_to', doc.revised_to) end
for _, q in ipairs(doc.positive) do redis.call('SADD', key .. ':pos', q) end
for _, q in ipairs(doc.negative) do redis.call('SADD', key .. ':neg', q) end
for _, e in ipairs(doc.edges) do redis.call('SADD', key .. ':edges', e[1] .. '|' .. e[2]) end
if redis.call('EXISTS', key .. ':hist') == 0 then
  for _, h in ipairs(doc.history) do redis.call('RPUSH', key .. ':hist', cjson.encode(h)) end
end
redis.call('SADD', P .. ':namespaces', doc.namespace)
redis.call('SADD', P .. ':ns:' .. doc.namespace .. ':insights', id)
if doc.state == 'active' and doc.text_key then
  redis.call('HSET', P .. ':ns:' .. doc.namespace .. ':texts', doc.text_key, id)
end
redis.call('XADD', P .. ':changes', '*', 'kind', 'insight', 'id', id, 'version', doc.version)
return 1
"""

_PUT_QUERY = """
local P, id, doc = ARGV[1], ARGV[2], cjson.decode(ARGV[3])
local key = P .. ':q:' .. id
local have = redis.call('HGET', key, 'namespace')
if have and have ~= doc.namespace then
  return redis.error_reply('namespace: query ' .. id .. ' exists elsewhere')
end
for _, n in ipairs(doc.neighbours) do redis.call('SADD', key .. ':nbr', n) end
if have then return 0 end
redis.call('HSET', key, 'namespace', doc.namespace, 'text', doc.text, 'status', doc.status,
  'trajectory', doc.trajectory_json, 'event_id', doc.event_id, 'created_at', doc.created_at)
redis.call('SADD', P .. ':namespaces', doc.namespace)
redis.call('SADD', P .. ':ns:' .. doc.namespace .. ':queries', id)
redis.call('XADD', P .. ':changes', '*', 'kind', 'query', 'id', id, 'version', 1)
return 1
"""


def export(graph: RedisGraphStore, namespaces: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Every node of the namespaces, queries first (insights' evidence refers to them)."""
    yield {"kind": "header", "format": FORMAT}
    for ns in sorted(namespaces):
        query_ids = sorted(graph.query_ids(ns))
        neighbours = graph.neighbours(query_ids)
        for q in graph.queries(query_ids).values():
            yield {
                "kind": "query",
                **q.model_dump(mode="json"),
                "neighbours": sorted(neighbours.get(q.id, ())),
            }
        for node in graph.insights(sorted(graph.insight_ids(ns))).values():
            yield {
                "kind": "insight",
                **node.model_dump(mode="json"),
                "edges": [list(e) for e in graph.edges_into(node.id)],
                "history": [asdict(h) for h in graph.history(node.id)],
            }


def write_jsonl(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    n = 0
    for record in records:
        out.write(json.dumps(record, sort_keys=True) + "\n")
        n += 1
    return n


def import_jsonl(client: Client, lines: Iterable[str]) -> dict[str, int]:
    """Write the records of an export; returns how many nodes were written and skipped."""
    put_insight = client.register_script(_PUT_INSIGHT)
    put_query = client.register_script(_PUT_QUERY)
    counts = {"queries": 0, "insights": 0, "skipped": 0}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record.pop("kind")
        except (ValueError, KeyError, AttributeError):
            raise InvalidEventError(f"line {n}", "not an export record") from None
        if kind == "header":
            if record.get("format") != FORMAT:
                raise InvalidEventError(f"line {n}", f"export format {record.get('format')} is not {FORMAT}")
            continue
        try:
            counts_key = _put(kind, record, put_query, put_insight)
        except redis.ResponseError as exc:
            raise InvalidEventError(f"line {n}", str(exc)) from None
        counts[counts_key] += 1
    return counts


def _put(kind: str, record: dict[str, Any], put_query: Any, put_insight: Any) -> str:
    from evomem.editing import text_key

    if kind == "query":
        neighbours = record.pop("neighbours", [])
        query = QueryNode.model_validate(record)
        doc = {
            **query.model_dump(mode="json"),
            "neighbours": neighbours,
            "trajectory_json": json.dumps(query.trajectory),
        }  # cjson would turn [] into {}
        return "queries" if put_query(args=[keys.PREFIX, query.id, json.dumps(doc)]) else "skipped"
    if kind == "insight":
        edges, history = record.pop("edges", []), record.pop("history", [])
        node = InsightNode.model_validate(record)
        doc = {
            **node.model_dump(mode="json"),
            "positive": sorted(node.positive),
            "negative": sorted(node.negative),
            "edges": edges,
            "history": history,
            "text_key": text_key(node.text),
        }
        return "insights" if put_insight(args=[keys.PREFIX, node.id, json.dumps(doc)]) else "skipped"
    raise InvalidEventError("kind", f"unknown record kind {kind!r}")


__all__ = ["export", "import_jsonl", "write_jsonl"]
