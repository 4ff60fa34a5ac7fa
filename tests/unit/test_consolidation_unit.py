"""Consolidation on the in-memory ports: no Redis, no Qdrant, no process. The event log stub keeps a
consumer group's delivery rules, so at-least-once delivery, the poison guard and the dead letters
are tested here as the workers meet them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evomem import Settings
from evomem.adapters.memory.events import InMemoryEventLog
from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.core.decisions import Decision, DecisionFailure, DecisionInput, RuleController
from evomem.errors import TransientError
from evomem.pipeline.batches import ConsolidationWorker
from evomem.pipeline.consolidate import Consolidator
from schemas import TaskEvent


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, max_deliveries=3)


def loop(
    settings: Settings,
    graph: InMemoryGraphStore,
    log: InMemoryEventLog,
    consumer: str,
    controller: object = None,
) -> ConsolidationWorker:
    judge = controller if controller is not None else RuleController()
    consolidator = Consolidator(graph, log, judge, settings, max_deliveries=settings.max_deliveries)  # type: ignore[arg-type]
    return ConsolidationWorker(consolidator, log, settings, consumer)


def lesson(n: int) -> TaskEvent:
    return TaskEvent(
        namespace="ns", query=f"task {n}", status="resolved", proposed_insight=f"Lesson number {n}."
    )


def test_events_are_applied_acknowledged_and_malformed_ones_dead_lettered(settings: Settings) -> None:
    graph = InMemoryGraphStore()
    log = InMemoryEventLog(graph)
    for n in range(3):
        log.publish(lesson(n))
    log.publish_raw('{"namespace": "ns", "status": "resolved"}')  # no query
    report = loop(settings, graph, log, "w1").drain(budget_s=10, block_ms=0)
    assert (report.events, report.applied, report.dead_lettered) == (4, 3, 1)
    assert sorted(n.text for n in graph.insights(graph.insight_ids("ns")).values()) == [
        "Lesson number 0.",
        "Lesson number 1.",
        "Lesson number 2.",
    ]
    assert log.pending == {}  # everything acknowledged, the dead letter with it
    (dead,) = log.dead_letters
    assert dead.field == "query"
    assert report.stages_ns["apply"] > 0 and report.stages_ns["decide"] > 0


def test_a_dead_consumers_batch_is_claimed_and_applied_once(settings: Settings) -> None:
    clock = Clock()
    graph = InMemoryGraphStore()
    log = InMemoryEventLog(graph, clock=clock)
    first = lesson(1)
    log.publish(first)
    taken = log.read("dead-worker", 10)  # read and never acknowledged: that worker died
    assert [e.deliveries for e in taken] == [1]
    alive = loop(settings, graph, log, "w2")
    assert alive.run_batch(block_ms=0).events == 0  # not idle long enough to be claimed
    clock.now += settings.claim_idle_ms / 1000
    report = alive.run_batch(block_ms=0)
    assert (report.events, report.applied) == (1, 1)
    assert graph.is_applied("ns", str(first.event_id))
    log.publish(first)  # the same event reported again is one event
    assert loop(settings, graph, log, "w2").run_batch(block_ms=0).replayed == 1
    assert len(graph.insight_ids("ns")) == 1


class Unavailable:
    """A judge that is always unavailable (an LLM outage)."""

    name = "down"
    judges_additions = True

    def decide(self, inputs: Sequence[DecisionInput]) -> Sequence[Decision]:
        return [DecisionFailure("endpoint unavailable", transient=True) for _ in inputs]


def test_an_unavailable_judge_defers_events_until_their_deliveries_are_spent(settings: Settings) -> None:
    graph = InMemoryGraphStore()
    log = InMemoryEventLog(graph)
    log.publish(lesson(1))
    worker = loop(settings, graph, log, "w1", Unavailable())
    deferred = [worker.run_batch(block_ms=0).deferred for _ in range(settings.max_deliveries - 1)]
    assert deferred == [1] * (settings.max_deliveries - 1)
    assert list(log.pending) and not log.dead_letters  # still waiting, untouched
    last = worker.run_batch(block_ms=0)
    assert last.dead_lettered == 1
    assert "controller after 3 deliveries" in log.dead_letters[0].reason
    assert graph.insight_ids("ns") == set()


class _Unreachable(InMemoryGraphStore):
    """A store whose edits fail as an unreachable Redis does, until ``back`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.back = False

    def apply_many(self, plans: Sequence[Any]) -> list[Any]:  # type: ignore[override]
        if not self.back:
            raise TransientError("redis unreachable")
        return super().apply_many(plans)


def test_an_outage_longer_than_the_poison_guard_sends_nothing_to_the_dead_letters(settings: Settings) -> None:
    """Batches that fail because the store is away (a failover) give their delivery back: ten failed
    tries with MAX_DELIVERIES 3, and the events are applied once it is back, none dead-lettered."""
    graph = _Unreachable()
    log = InMemoryEventLog(graph)
    for n in range(4):
        log.publish(lesson(n))
    worker = loop(settings, graph, log, "w1")
    for _ in range(10):
        with pytest.raises(TransientError):
            worker.run_batch(block_ms=0)
    assert {p.deliveries for p in log.pending.values()} == {0}
    graph.back = True
    report = worker.drain(budget_s=10, block_ms=0)
    assert (report.applied, report.dead_lettered) == (4, 0) and not log.dead_letters
