"""The retriever's word-set cache (``EVOMEM_TEXT_CACHE``): bounded by its setting, warmed from the
index's active insights when a retrieval process starts following, and never a change to what is
served, only to what is read from the index."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
import redis

from evomem import Memory, Settings
from evomem.core.retrieval import ServingInsight
from evomem.errors import EvomemError

NS = "ops"
TOPICS = ["git bisect", "docker volumes", "oauth login", "cron jobs", "dns caching", "tcp keepalive"]


def task(topic: str) -> str:
    return f"Write a short guide to {topic} for the team wiki"


def build(settings: Settings) -> None:
    """One insight per topic, and one archived (blamed by a failed task; archived at once)."""
    update = {"text_cache_warm": False, "archive_policy": "immediate"}
    with Memory.open_local(settings.model_copy(update=update)) as mem:
        for topic in TOPICS:
            r = mem.retrieve(task(topic), NS)
            mem.report(r, status="resolved", proposed_insight=f"For {topic}, check the basics first.")
            mem.consolidate()
        r = mem.retrieve("Restart the flaky staging runner", NS)
        mem.report(r, status="resolved", proposed_insight="For the staging runner, restart it twice.")
        mem.consolidate()
        r = mem.retrieve("Restart the flaky staging runner", NS)
        assert [i.text for i in r.insights][:1] == ["For the staging runner, restart it twice."]
        mem.report(r, status="failed", insight_feedback={r.insights[0].id: "harmful"})
        mem.consolidate()
        states = [n.state for n in mem.graph.insights(mem.graph.insight_ids(NS)).values()]
        assert sorted(states) == ["active"] * len(TOPICS) + ["archived"]


@pytest.fixture
def store(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> Settings:
    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_url, controller="rules")
    build(settings)
    return settings


class Reads:
    """Counts the insight ids the retriever reads from the index."""

    def __init__(self, mem: Memory) -> None:
        self.ids: list[str] = []
        index = mem.retriever.index
        real = index.read_insights

        def read(namespace: str, ids: Collection[str]) -> dict[str, ServingInsight]:
            self.ids.extend(ids)
            return real(namespace, ids)

        index.read_insights = read  # type: ignore[method-assign]


def served(mem: Memory) -> list[list[tuple[str, float]]]:
    return [
        [(i.text, round(i.score, 9)) for i in mem.retriever.retrieve(task(t), NS, record=False).insights]
        for t in TOPICS
    ]


def test_a_following_memory_warms_the_cache_with_the_active_insights(store: Settings) -> None:
    with Memory.open_local(store) as mem:
        active = {i for i, n in mem.graph.insights(mem.graph.insight_ids(NS)).items() if n.state == "active"}
        mem.follow()
        assert mem.retriever.wait_warm(30)
        state = mem.retriever.text_cache()
        assert (state.entries, state.warmed, state.warming) == (len(active), len(active), False)
        assert state.warm_s is not None
        assert set(mem.retriever._text_features) == active  # the archived insight's words are not kept
        reads = Reads(mem)
        result = served(mem)
        # ranking read no text: only the served ones, for their text, once each
        assert set(reads.ids) <= active
        assert len(reads.ids) == sum(len(r) for r in result)


def test_the_cache_never_changes_what_is_served(store: Settings) -> None:
    with Memory.open_local(store.model_copy(update={"text_cache": 0})) as mem:
        uncached = served(mem)
        reads = Reads(mem)
        assert served(mem) == uncached
        assert len(reads.ids) > sum(len(r) for r in uncached)  # every candidate's text, every time
        assert mem.retriever.text_cache().entries == 0
    with Memory.open_local(store) as mem:
        mem.follow()
        assert mem.retriever.wait_warm(30)
        assert served(mem) == uncached


def test_the_cache_holds_no_more_than_its_setting(store: Settings) -> None:
    with Memory.open_local(store.model_copy(update={"text_cache": 2})) as mem:
        mem.follow()
        assert mem.retriever.wait_warm(30)
        assert mem.retriever.text_cache().entries == 2
        served(mem)
        assert mem.retriever.text_cache().entries == 2  # retrievals evict the oldest


def test_warming_can_be_turned_off(store: Settings) -> None:
    with Memory.open_local(store.model_copy(update={"text_cache_warm": False})) as mem:
        mem.follow()
        assert mem.retriever.wait_warm(0)  # nothing started
        state = mem.retriever.text_cache()
        assert (state.entries, state.warmed, state.warm_s) == (0, 0, None)


def test_a_warm_up_that_fails_leaves_the_retriever_serving(
    store: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The index failing mid-scan ends the warm-up with what it had read, logged, not raised: the
    cache stays bounded and correct, and retrievals read what it misses."""
    with Memory.open_local(store.model_copy(update={"text_cache": 0})) as mem:
        uncached = served(mem)
    with Memory.open_local(store) as mem:
        real = mem.retriever.index.scan_insights

        def scan(batch: int) -> Iterator[list[tuple[str, str]]]:
            pages = real(batch)
            yield [next(pages)[0]]  # one insight, then the index goes away
            raise EvomemError("the index went away mid-scan")

        mem.retriever.index.scan_insights = scan  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="evomem.retriever"):
            mem.follow()
            assert mem.retriever.wait_warm(30)
        logged = [r.getMessage() for r in caplog.records if r.name == "evomem.retriever"]
        assert logged == ["retriever.warm_failed"]
        state = mem.retriever.text_cache()
        assert (state.entries, state.warmed, state.warming) == (1, 1, False)
        assert state.warm_s is not None
        assert served(mem) == uncached
