"""The retrieval read model (the embedded index's queries' evidence and insights' state, the query
graph's adjacency) is kept current by the projector: after changes made through another process,
a retrieval process that kept its read model all along serves what one opened afterwards serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from evomem import Memory, Settings
from evomem.adapters.qdrant.edge import EdgeIndex

NS = "alpha"
QUERIES = [f"Verify claim {n} about the fleet's vehicles" for n in range(12)]

# another process: it reports and consolidates through Redis, with no index of its own
_WRITER = """
import json, sys
from evomem import Memory, Settings
args = json.loads(sys.argv[1])
settings = Settings(data_dir=args["data_dir"], redis_url=args["redis_url"], controller="rules")
with Memory.open_local(settings, index=False) as writer:
    for i in range(args["first"], args["first"] + args["n"]):
        harmful = args["harmful"][i % len(args["harmful"])] if args["harmful"] else None
        writer.report(
            None,
            namespace=args["ns"],
            query=args["queries"][i % len(args["queries"])],
            status="failed" if harmful else "resolved",
            proposed_insight=f"Lesson {i}: check the vehicle class before claim {i}.",
            **({"retrieved_insight_ids": [harmful], "insight_feedback": {harmful: "harmful"}}
               if harmful else {}),
        )
    writer.consolidate()
"""


def _write_elsewhere(settings: Settings, first: int, n: int, harmful: list[str] | None = None) -> None:
    args = {
        "data_dir": str(settings.data_dir),
        "redis_url": settings.redis_url,
        "ns": NS,
        "queries": QUERIES,
        "first": first,
        "n": n,
        "harmful": harmful or [],
    }
    subprocess.run([sys.executable, "-c", _WRITER, json.dumps(args)], check=True, timeout=120)


def _answers(mem: Memory) -> list[list[tuple[str, float]]]:
    served = [mem.retriever.retrieve(q, NS, record=False) for q in QUERIES]
    return [[(i.id, round(i.score, 9)) for i in r.insights] for r in served]


def test_changes_made_through_another_process_are_served_from_a_kept_read_model(
    tmp_path: Path, redis_url: str
) -> None:
    settings = Settings(data_dir=tmp_path / "reader", redis_url=redis_url, controller="rules")
    _write_elsewhere(settings, 0, 12)
    with Memory.open_local(settings) as reader:
        reader.retriever.warm()  # the read model and the adjacency filled, as at a service's start
        before = _answers(reader)
        served = sorted({i for answer in before for i, _ in answer})
        assert served
        _write_elsewhere(settings, 12, 12, harmful=served[:2])  # new queries, insights, harms
        assert reader.projector is not None
        while reader.projector.run_once().changes:  # this process's projector catches up
            pass
        index = reader.retriever.index
        assert isinstance(index, EdgeIndex)
        graph = reader.retriever.query_graph
        hits = (index.query_cache.hits, index.insight_cache.hits, graph.entries.hits)
        after = _answers(reader)
        assert index.query_cache.hits > hits[0] and index.insight_cache.hits > hits[1]
        assert graph.entries.hits > hits[2]  # served from memory, not read again
        ids = reader.runtime.graph.query_ids(NS)
        assert graph.neighbours(NS, ids) == reader.runtime.graph.neighbours(NS, ids)
    fresh_settings = settings.model_copy(update={"data_dir": tmp_path / "fresh"})
    with Memory.open_local(fresh_settings) as fresh:  # its index built from Redis now
        assert _answers(fresh) == after
    assert after != before
