"""export → import round-trips a memory: nodes, evidence, lineage, edges, history; twice is once."""

from __future__ import annotations

import io
from pathlib import Path

import redis

from evomem import Memory, Settings
from evomem.adapters.redis.connection import EmbeddedRedis
from evomem.adapters.redis.importer import import_jsonl
from evomem.core.hashing import word_features
from evomem.pipeline.export import export, write_jsonl


def test_an_export_imported_elsewhere_serves_the_same_insights(memory: Memory, tmp_path: Path) -> None:
    memory.report(
        None,
        namespace="fever",
        query="Verify: Mohra is a truck",
        status="resolved",
        proposed_insight="Check the vehicle class.",
    )
    memory.consolidate()
    r = memory.retrieve("Verify: Mohra is a lorry", "fever")
    memory.report(
        r,
        status="failed",
        insight_feedback={
            r.insights[0].id: {"verdict": "partial", "revised_text": "Check the vehicle class and its year."}
        },
    )
    memory.consolidate()
    buf = io.StringIO()
    write_jsonl(export(memory.graph, ["fever"]), buf)

    other = EmbeddedRedis(tmp_path / "other-redis")
    url = other.ensure()
    try:
        with Memory.open_local(Settings(data_dir=tmp_path / "other", redis_url=url)) as copy:
            first = import_jsonl(copy.redis, io.StringIO(buf.getvalue()))
            again = import_jsonl(copy.redis, io.StringIO(buf.getvalue()))
            assert first == {"queries": 2, "insights": 2, "skipped": 0}
            assert again == {"queries": 0, "insights": 0, "skipped": 4}
            ids = memory.graph.insight_ids("fever")
            assert copy.graph.insights(ids) == memory.graph.insights(ids)
            for i in ids:
                assert copy.graph.history(i) == memory.graph.history(i)
                assert copy.graph.lineage(i) == memory.graph.lineage(i)
                assert copy.graph.edges_into(i) == memory.graph.edges_into(i)
            # the words text relevance weighs by are counted as the nodes come in, once
            words = {f for n in memory.graph.insights(ids).values() for f in word_features(n.text)}
            assert copy.graph.word_counts("fever", words) == memory.graph.word_counts("fever", words)
            assert memory.graph.word_counts("fever", words) is not None
            copy.consolidate()  # projects what the import announced
            served = copy.retrieve("Verify: Mohra is a lorry", "fever").insights
            assert [s.text for s in served] == ["Check the vehicle class and its year."]
    finally:
        other.stop()


def test_an_import_never_moves_a_node_into_another_namespace(
    memory: Memory, redis_client: redis.Redis
) -> None:
    import pytest

    from evomem.errors import InvalidEventError

    memory.report(None, namespace="alpha", query="q", status="resolved", proposed_insight="Alpha lesson.")
    memory.consolidate()
    buf = io.StringIO()
    write_jsonl(export(memory.graph, ["alpha"]), buf)
    forged = buf.getvalue().replace('"namespace": "alpha"', '"namespace": "beta"')
    with pytest.raises(InvalidEventError, match="exists elsewhere"):
        import_jsonl(redis_client, io.StringIO(forged))
    assert memory.graph.insight_ids("beta") == set()
