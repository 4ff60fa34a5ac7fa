"""Staleness and the review queue on every graph store (in memory, Redis, Redis Cluster): serves and
helps counted once per applied event, a retire request that archives once, never a pinned or edited
insight, reverted like any archive; held edits whose first decision stands."""

from __future__ import annotations

import uuid
from datetime import timedelta

from evomem.core.ports import GraphStore
from evomem.core.review import HeldEdit, ReviewDecision
from evomem.core.staleness import retire_request_id
from evomem.pipeline.consolidate import apply_control
from schemas import ControlRequest
from tests.contract import test_graph_contract
from tests.contract.test_graph_contract import ARCHIVE, KEEP, NS, T0, Graph

store = test_graph_contract.store  # the same stores: in memory, Redis, Redis Cluster


def counts(s: GraphStore, insight_id: str) -> tuple[int, int]:
    (record,) = [r for r in s.served_records(NS) if r.insight_id == insight_id]
    return record.served, record.helped


def retire(s: GraphStore, insight_id: str, version: int) -> bool:
    """Whether this request archived the insight (a replay archives nothing again)."""
    request = ControlRequest(
        request_id=retire_request_id(NS, insight_id, version),
        namespace=NS,
        action="retire",
        by="staleness",
        reason="served 3 times, never helping",
        insight_id=insight_id,
        expected_version=version,
    )
    result = apply_control(s, request)
    return result.changed and not result.replayed


def test_serves_and_helps_are_counted_once_per_applied_event(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    assert counts(store, "A") == (0, 0)
    plan = g.plan(KEEP("A"), retrieved=["A", "B"])
    store.apply(plan)
    store.apply(plan)  # a replay counts nothing
    g.apply(retrieved=["A", "B"])  # served, no verdict
    assert counts(store, "A") == (2, 1) and counts(store, "B") == (2, 0)
    (b,) = [r for r in store.served_records(NS) if r.insight_id == "B"]
    assert b.last_served == T0 + timedelta(seconds=g.n)


def test_a_retire_request_archives_once_and_a_revert_reactivates_with_serves_counted_afresh(
    store: GraphStore,
) -> None:
    g = Graph(store)
    g.add("A")
    g.apply(retrieved=["A"])
    version = g.node("A").version
    assert retire(store, "A", version)
    assert not retire(store, "A", version)  # the same request: applied once
    node = g.node("A")
    assert node.state == "archived"
    last = store.history("A")[-1]
    assert (last.op, last.outcome, last.decided_by) == ("ARCHIVE", "stale", "staleness")
    assert store.insight_points([(NS, "A")])[(NS, "A")].state == "archived"
    assert "A" not in {r.insight_id for r in store.served_records(NS)}
    stale_event = str(retire_request_id(NS, "A", version))
    assert store.is_applied(NS, stale_event)
    r = apply_control(store, ControlRequest(namespace=NS, action="revert", by="ops", event_id=stale_event))
    assert r.reverted == 1
    assert g.node("A").state == "active" and counts(store, "A") == (0, 0)


def test_a_retire_request_leaves_a_pinned_or_since_edited_insight_as_it_is(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    version = g.node("B").version
    g.apply(ARCHIVE("B"), policy="evidence", ratio=10)  # an edit since it was found stale
    assert not retire(store, "B", version)
    apply_control(store, ControlRequest(namespace=NS, action="pin", by="ops", insight_id="A"))
    assert not retire(store, "A", g.node("A").version)
    assert g.node("A").state == "active" and g.node("B").state == "active"


def test_a_held_edit_is_decided_once(store: GraphStore) -> None:
    held = HeldEdit(
        review_id="r1",
        namespace=NS,
        event_id=str(uuid.uuid4()),
        query_id="q1",
        status="failed",
        retrieved=["A"],
        edit=ARCHIVE("A"),
        reason="support",
        held_at=T0,
    )
    store.hold([held])
    store.hold([held.model_copy(update={"reason": "again"})])  # held before: the first record stays
    assert store.held_ids(NS, ["r1", "r2"]) == {"r1"}
    (review,) = store.reviews(NS)
    assert review.state == "pending" and review.held.reason == "support"
    no = ReviewDecision(state="rejected", by="ops", at=T0, note="wrong")
    yes = ReviewDecision(state="approved", by="lead", at=T0)
    decided = store.decide_review(NS, "r1", no)
    assert decided is not None and decided.decision == no
    again = store.decide_review(NS, "r1", yes)
    assert again is not None and again.decision == no  # the first decision stands
    assert store.decide_review(NS, "r2", yes) is None
    assert store.reviews("elsewhere") == []


def test_one_sweep_per_interval_across_the_processes_of_a_store(store: GraphStore) -> None:
    assert store.claim_sweep(3600)
    assert not store.claim_sweep(3600)  # another process (or this one) within the interval
    assert store.claim_sweep(0)  # 0: every time
