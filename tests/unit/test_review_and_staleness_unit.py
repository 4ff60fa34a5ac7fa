"""The review queue and the staleness sweep on the in-memory ports: a low-confidence decision is
held whole, an approval applied once however often it is delivered, and two sweeps that find the
same stale insight archive it once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evomem import Settings
from evomem.adapters.memory.events import InMemoryEventLog
from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.core.decisions import Decision, DecisionInput, RuleController
from evomem.pipeline.batches import ConsolidationWorker
from evomem.pipeline.consolidate import Consolidator
from evomem.pipeline.sweep import sweep_stale
from schemas import AddDecision, ControllerDecision, ControlRequest, InsightEdit, TaskEvent


class Unsure:
    """A controller that archives what it was served and adds a lesson, and says it is unsure."""

    name = "unsure"
    judges_additions = True

    def decide(self, inputs: Sequence[DecisionInput]) -> Sequence[Decision]:
        return [
            ControllerDecision(
                insight_edits=[InsightEdit(insight_id=h.id, operation="ARCHIVE") for h in i.retrieved],
                add_new_insight=AddDecision(decision=True, new_insight_text=f"Lesson of {i.event.query}."),
                confidence=0.2,
            )
            for i in inputs
        ]


def worker(
    settings: Settings, graph: InMemoryGraphStore, log: InMemoryEventLog, judge: object
) -> ConsolidationWorker:
    consolidator = Consolidator(graph, log, judge, settings)  # type: ignore[arg-type]
    return ConsolidationWorker(consolidator, log, settings, "w1")


def test_a_low_confidence_decision_is_held_whole_and_an_approval_applies_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, review=True)
    graph = InMemoryGraphStore()
    log = InMemoryEventLog(graph)
    log.publish(TaskEvent(namespace="ns", query="task 1", status="resolved", proposed_insight="Lesson one."))
    first = worker(settings.model_copy(update={"review": False}), graph, log, Unsure())
    first.drain(budget_s=10, block_ms=0)
    (a,) = graph.insight_ids("ns")
    log.publish(TaskEvent(namespace="ns", query="task 2", status="failed", retrieved_insight_ids=[a]))
    report = worker(settings, graph, log, Unsure()).drain(budget_s=10, block_ms=0)
    assert report.outcomes["held"] == 2
    assert graph.insight_ids("ns") == {a} and graph.states([a]) == {a: "active"}
    held = graph.reviews("ns")
    assert sorted(r.held.edit.op for r in held) == ["ADD", "ARCHIVE"]
    assert all("confidence 0.2" in r.held.reason for r in held)
    (add,) = [r for r in held if r.held.edit.op == "ADD"]
    for _ in range(3):  # three approvals, one of them delivered twice
        request = ControlRequest(namespace="ns", action="approve", by="ops", review_id=add.held.review_id)
        log.publish_control(request)
    log.publish_control(request)
    worker(settings, graph, log, Unsure()).drain(budget_s=10, block_ms=0)
    texts = sorted(n.text for n in graph.insights(graph.insight_ids("ns")).values())
    assert texts == ["Lesson of task 1.", "Lesson of task 2."]
    assert {r.held.review_id: r.state for r in graph.reviews("ns")}[add.held.review_id] == "approved"


def test_two_sweeps_that_find_one_stale_insight_archive_it_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, stale_served=1, stale_sweep_s=3600)
    graph = InMemoryGraphStore()
    log = InMemoryEventLog(graph)
    log.publish(TaskEvent(namespace="ns", query="task 1", status="resolved", proposed_insight="Lesson one."))
    w = worker(settings, graph, log, RuleController())
    w.drain(budget_s=10, block_ms=0)
    (a,) = graph.insight_ids("ns")
    log.publish(TaskEvent(namespace="ns", query="task 2", status="failed", retrieved_insight_ids=[a]))
    w.run_batch(block_ms=0)  # served once, never helping (the rule controller gives no verdict)
    resolve = w.consolidator.resolve
    assert sweep_stale(graph, log, resolve) == 1
    assert sweep_stale(graph, log, resolve) == 1  # found again before the first request is applied
    report = w.drain(budget_s=10, block_ms=0)
    assert report.outcomes["stale"] == 1 and report.replayed == 1
    assert graph.states([a]) == {a: "archived"}
    assert [h.outcome for h in graph.history(a)].count("stale") == 1


def test_a_redelivered_event_applied_before_holds_nothing(tmp_path: Path) -> None:
    """Applied at its first delivery with the support its insight had then, an event delivered
    again after the support crossed the threshold is a replay: nothing of it is held."""
    settings = Settings(data_dir=tmp_path, review=True, review_support=2)
    graph = InMemoryGraphStore()
    log = InMemoryEventLog(graph)
    log.publish(TaskEvent(namespace="ns", query="task 1", status="resolved", proposed_insight="Lesson one."))
    w = worker(settings, graph, log, RuleController())
    w.drain(budget_s=10, block_ms=0)
    (a,) = graph.insight_ids("ns")
    harm = TaskEvent(namespace="ns", query="task 2", status="failed", insight_feedback={a: "harmful"})
    log.publish(harm)
    w.drain(budget_s=10, block_ms=0)  # support 1 < 2: applied at once
    assert graph.reviews("ns") == [] and graph.insights([a])[a].negative
    log.publish(TaskEvent(namespace="ns", query="task 3", status="resolved", insight_feedback={a: "helpful"}))
    w.drain(budget_s=10, block_ms=0)  # support 2 now
    log.publish(harm)  # the same event again (a client's retry after a lost ack)
    report = w.drain(budget_s=10, block_ms=0)
    assert report.replayed == 1 and graph.reviews("ns") == []
