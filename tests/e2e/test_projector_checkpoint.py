"""The projector's cursor in Redis only moves past what the index has made durable: the embedded
store's namespace shards keep no write-ahead log, the change feed stands in for it."""

from __future__ import annotations

import shutil

import pytest
import redis

from evomem import Memory
from evomem.adapters.redis.changes import RedisChangeFeed
from evomem.settings import Settings


def _saved(mem: Memory) -> str:
    assert mem.projector is not None
    return RedisChangeFeed(mem.redis).load_cursor(mem.projector.index.identity)


@pytest.mark.parametrize("flush_s", [0.0, 3600.0])
def test_the_saved_cursor_follows_the_flushes(
    settings: Settings, redis_client: redis.Redis, flush_s: float
) -> None:
    mine = settings.model_copy(update={"index_flush_s": flush_s})
    with Memory.open(mine) as mem:
        assert mem.projector is not None
        before = _saved(mem)
        served = mem.retrieve("How do I reset the office router?", "ns")
        mem.report(served, status="resolved", proposed_insight="Unplug the router for ten seconds first.")
        mem.consolidate()
        projected = mem.projector.cursor
        assert projected != before
        # flushed after every batch, or not yet: the saved cursor is the projector's or still behind
        assert _saved(mem) == (projected if flush_s == 0 else before)
    with Memory.open(mine) as mem:  # closing flushed and saved it
        assert _saved(mem) == projected
        assert len(mem.retriever.similar_queries("ns", "How do I reset the office router?")) == 1


def test_a_rebuilt_store_does_not_resume_from_the_cursor_of_the_one_it_replaces(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """Deleting the embedded store rebuilds it from the feed's beginning: its cursor is reset at once,
    not at its first flush, so a process killed before that flush starts over again instead of
    resuming past changes the new store never kept."""
    mine = settings.model_copy(update={"index_flush_s": 3600.0})
    with Memory.open(mine) as mem:
        served = mem.retrieve("How do I reset the office router?", "ns")
        mem.report(served, status="resolved", proposed_insight="Unplug the router for ten seconds first.")
        mem.consolidate()
    assert mine.data_dir is not None
    shutil.rmtree(mine.data_dir / "qdrant")
    with Memory.open(mine) as mem:
        assert mem.projector is not None and mem.projector.cursor != "0-0"  # caught up with the feed
        assert _saved(mem) == "0-0"  # not flushed yet: nothing saved past the beginning
