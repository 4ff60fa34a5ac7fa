"""Export: every node of some namespaces as JSON records (``evomem export``), read through the graph
ports; ``evomem import`` writes them back (``evomem.adapters.redis.importer``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Any, TextIO

from evomem.core.ports import EXPORT_FORMAT as FORMAT
from evomem.core.ports import GraphStore


def export(graph: GraphStore, namespaces: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Every node of the namespaces, queries first (insights' evidence refers to them)."""
    yield {"kind": "header", "format": FORMAT}
    for ns in sorted(namespaces):
        query_ids = sorted(graph.query_ids(ns))
        neighbours = graph.neighbours(ns, query_ids)
        for q in graph.queries(ns, query_ids).values():
            yield {
                "kind": "query",
                **q.model_dump(mode="json"),
                "neighbours": sorted([n, w] for n, w in neighbours.get(q.id, {}).items()),
            }
        ids = sorted(graph.insight_ids(ns))
        heads = graph.heads(ns, ids)
        for node in graph.insights(ids).values():
            head = heads[node.id]
            yield {
                "kind": "insight",
                **node.model_dump(mode="json"),
                "judged": [head.judged_positive, head.judged_negative],
                "edges": [list(e) for e in graph.edges_into(node.id)],
                "history": [asdict(h) for h in graph.history(node.id)],
            }


def write_jsonl(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    n = 0
    for record in records:
        out.write(json.dumps(record, sort_keys=True) + "\n")
        n += 1
    return n


__all__ = ["FORMAT", "export", "write_jsonl"]
