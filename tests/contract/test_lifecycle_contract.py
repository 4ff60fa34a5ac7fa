"""Revert and pins on every graph store: the same requests undo the same edits on the in-memory
reference, on Redis and on Redis Cluster (``evomem.core.lifecycle`` says what each revert undoes)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from evomem.core.ports import GraphStore
from evomem.pipeline.consolidate import apply_control
from schemas import ControlRequest
from tests.contract import test_graph_contract
from tests.contract.test_graph_contract import ADD, ARCHIVE, KEEP, NS, REVISE, T0, Graph

store = test_graph_contract.store  # the same stores: in memory, Redis, Redis Cluster


def revert(s: GraphStore, request_id: str | None = None, **target: object) -> tuple[int, int, bool]:
    request = ControlRequest(
        request_id=uuid.UUID(request_id) if request_id else uuid.uuid4(),
        namespace=NS,
        action="revert",
        by="ops",
        reason="bad deployment",
        **target,  # type: ignore[arg-type]
    )
    r = apply_control(s, request)
    return r.reverted, r.skipped, r.replayed


def pin(s: GraphStore, insight_id: str, action: str = "pin") -> bool:
    r = apply_control(
        s,
        ControlRequest(namespace=NS, action=action, by="ops", reason="known good", insight_id=insight_id),  # type: ignore[arg-type]
    )
    return r.changed


def test_a_reverted_revise_serves_the_old_version_and_archives_the_revision_keeping_lineage(
    store: GraphStore,
) -> None:
    g = Graph(store)
    g.add("A", "Check the vehicle class first.")
    result = g.apply(REVISE("A", "A2", "Trust the first source you find."), event="bad")
    assert result.outcomes[0].outcome == "revised"
    assert revert(store, event_id="bad") == (1, 0, False)
    old, new = g.node("A"), g.node("A2")
    assert old.state == "active" and new.state == "archived"
    assert old.negative == frozenset()  # the evidence the revise added is withdrawn
    assert store.lineage("A") == ["A", "A2"] and new.revised_from == "A"
    last = store.history("A")[-1]
    assert last.op == "REVERT" and last.decided_by == "ops"
    assert last.note is not None and last.note.startswith("reverted REVISE (revised) of event bad by ops")
    assert store.history("A2")[-1].op == "REVERT"
    # the read model learns of both state changes
    points = store.insight_points([(NS, "A"), (NS, "A2")])
    assert points[(NS, "A")].state == "active" and points[(NS, "A2")].state == "archived"


def test_archive_add_and_keep_reverted(store: GraphStore) -> None:
    g = Graph(store)
    q_a = g.add("A")
    g.apply(KEEP("A"), event="keep")
    g.apply(ARCHIVE("A"), event="archive", policy="immediate")
    assert g.node("A").state == "archived"
    revert(store, event_id="archive")
    node = g.node("A")
    assert node.state == "active" and node.negative == frozenset()
    revert(store, event_id="keep")
    assert g.node("A").positive == {q_a}
    g.apply(ADD("B", "A lesson the bad model made up."), event="add")
    revert(store, event_id="add")
    assert g.node("B").state == "archived" and g.node("B").positive == frozenset()


def test_the_same_revert_twice_or_an_overlapping_one_undoes_nothing_twice(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.apply(ARCHIVE("A"), event="archive", policy="immediate")
    rid = str(uuid.uuid4())
    assert revert(store, rid, event_id="archive") == (1, 0, False)
    assert revert(store, rid, event_id="archive") == (1, 0, True)  # the same request: replayed
    version = g.node("A").version
    assert revert(store, event_id="archive") == (0, 1, False)  # another request: the edit is undone already
    assert g.node("A").version == version


def test_a_namespace_rolled_back_to_t_is_what_it_was_at_t(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A", "Check the vehicle class first.")
    g.add("B", "Read the claim twice.")
    before = {i: (n.state, n.positive, n.negative, n.text) for i, n in store.insights(["A", "B"]).items()}
    t = T0 + timedelta(seconds=g.n + 1)
    g.n += 1  # the next edits come after t
    g.apply(REVISE("A", "A2", "Wrong 1."), event="d1")
    g.apply(REVISE("A2", "A3", "Wrong 2."), event="d2")
    g.apply(ARCHIVE("B"), event="d3", policy="immediate")
    g.apply(ADD("C", "Made up."), event="d4")
    reverted, _, _ = revert(store, since=t)
    assert reverted == 4
    after = {i: (n.state, n.positive, n.negative, n.text) for i, n in store.insights(["A", "B"]).items()}
    assert after == before
    states = {i: n.state for i, n in store.insights(["A2", "A3", "C"]).items()}
    assert states == {"A2": "archived", "A3": "archived", "C": "archived"}
    active = {i for i, st in store.states(store.insight_ids(NS)).items() if st == "active"}
    assert active == {"A", "B"}


def test_one_edit_of_an_event_reverted_leaves_its_others(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    g.apply(ARCHIVE("A"), ARCHIVE("B"), event="both", policy="immediate")
    revert(store, event_id="both", insight_id="B")
    assert (g.node("A").state, g.node("B").state) == ("archived", "active")


def test_a_pinned_insight_keeps_serving_whatever_the_verdicts_and_unpinning_lets_them_act(
    store: GraphStore,
) -> None:
    g = Graph(store)
    g.add("A")
    assert pin(store, "A") is True
    assert pin(store, "A") is False  # already pinned: one edit
    assert g.node("A").pinned
    r = g.apply(ARCHIVE("A"), policy="immediate")
    assert r.outcomes[0].outcome == "pinned"
    r = g.apply(REVISE("A", "A2", "Another text."))
    assert r.outcomes[0].outcome == "pinned"
    node = g.node("A")
    assert node.state == "active" and len(node.negative) == 2 and "A2" not in store.insight_ids(NS)
    records = [(h.op, h.outcome, h.decided_by) for h in store.history("A")]
    assert ("PIN", "pinned", "ops") in records
    assert store.history("A")[1].note == "pinned by ops: known good"
    assert pin(store, "A", "unpin") is True
    assert g.apply(ARCHIVE("A"), policy="immediate").outcomes[0].outcome == "archived"
