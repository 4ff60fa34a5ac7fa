"""The graph store contract: every ``GraphStore`` applies an edit plan with the same semantics.

The same tests run against the in-memory reference store and the Redis system of record (Lua), so
what the paper's Eq. 13-18 and the rules of ``evomem.core.editing`` promise holds on both; a property test
then drives both stores with the same random sequence of plans and compares their final state.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from evomem import keys
from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.adapters.redis.connection import connect
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.core.editing import (
    EditPlan,
    PlannedEdit,
    added_insight_id,
    plan_edits,
    query_id_for,
    revised_insight_id,
    text_key,
)
from evomem.core.embedding import pack_vector
from evomem.core.hashing import word_features
from evomem.core.ports import ApplyResult, GraphStore, RetrievalRecord, StoredDecision
from evomem.settings import ALLOWED_OPERATIONS
from schemas import AddDecision, ControllerDecision, InsightEdit, InsightNode, TaskEvent

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
NS = "fever"


# -- helpers -----------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def store(request: pytest.FixtureRequest) -> Iterator[GraphStore]:
    if request.param == "memory":
        yield InMemoryGraphStore()
    elif request.param == "redis":
        yield RedisGraphStore(request.getfixturevalue("redis_client"))
    else:  # the same script on a cluster, its shared writes through the outbox
        client = connect(request.getfixturevalue("redis_cluster").url)
        client.flushdb()
        yield RedisGraphStore(client)
        client.close()


class Graph:
    """Builds hand-made plans with readable ids and applies them to one store."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store
        self.n = 0

    def plan(
        self,
        *edits: PlannedEdit,
        ns: str = NS,
        status: str = "resolved",
        retrieved: Sequence[str] | None = None,
        similar: Sequence[str] = (),
        policy: str = "evidence",
        ratio: float = 0.5,
        streak: int = 0,
        archived_repeats: str = "new",
        event: str | None = None,
        query: str | None = None,
        at: datetime | None = None,
    ) -> EditPlan:
        self.n += 1
        if retrieved is None:
            retrieved = [e.insight_id for e in edits if e.insight_id]
        return EditPlan(
            event_id=event or f"e{self.n}",
            namespace=ns,
            query_id=query or f"q{self.n}",
            query_text=f"task {self.n}",
            status=status,
            trajectory_json='["step"]',
            similar=list(similar),
            retrieved=list(retrieved),
            edits=list(edits),
            archive_policy=policy,
            archive_ratio=ratio,
            archive_streak=streak,
            archived_repeats=archived_repeats,
            at=at or T0 + timedelta(seconds=self.n),
        )

    def apply(self, *edits: PlannedEdit, **kw: Any) -> ApplyResult:
        return self.store.apply(self.plan(*edits, **kw))

    def node(self, insight_id: str) -> InsightNode:
        return self.store.insights([insight_id])[insight_id]

    def add(self, insight_id: str, text: str | None = None, ns: str = NS) -> str:
        """A new insight; returns the query id that supports it."""
        result = self.apply(ADD(insight_id, text or f"insight {insight_id}"), ns=ns)
        assert result.outcomes[0].outcome == "added"
        return f"q{self.n}"

    def support(self, insight_id: str, times: int) -> None:
        for _ in range(times):
            self.apply(KEEP(insight_id))


def KEEP(i: str, by: str = "feedback") -> PlannedEdit:
    return PlannedEdit(op="KEEP", insight_id=i, decided_by=by)


def ARCHIVE(i: str, by: str = "feedback") -> PlannedEdit:
    return PlannedEdit(op="ARCHIVE", insight_id=i, decided_by=by)


def REVISE(i: str, new_id: str, text: str, by: str = "feedback") -> PlannedEdit:
    return PlannedEdit(
        op="REVISE", insight_id=i, new_id=new_id, text=text, text_key=text_key(text), decided_by=by
    )


def ADD(new_id: str, text: str, by: str = "feedback") -> PlannedEdit:
    return PlannedEdit(op="ADD", new_id=new_id, text=text, text_key=text_key(text), decided_by=by)


def snapshot(store: GraphStore, namespaces: Iterable[str] | None = None) -> dict[str, Any]:
    """Everything a reader of the store can observe, in a comparable form."""
    out: dict[str, Any] = {"namespaces": sorted(store.namespaces())}
    for ns in sorted(namespaces if namespaces is not None else store.namespaces()):
        ins = sorted(store.insight_ids(ns))
        qs = sorted(store.query_ids(ns))
        out[ns] = {
            "insights": {i: n.model_dump() for i, n in store.insights(ins).items()},
            "queries": {q: n.model_dump() for q, n in store.queries(ns, qs).items()},
            "neighbours": {q: sorted(v.items()) for q, v in store.neighbours(ns, qs).items()},
            "edges": {i: store.edges_into(i) for i in ins},
            "history": {i: store.history(i) for i in ins},
            "lineage": {i: store.lineage(i) for i in ins},
            # what the read model is built from: the evidence from the query side, the inheritance
            "query_points": sorted(store.query_points([(ns, q) for q in qs]).values(), key=str),
            "insight_points": sorted(store.insight_points([(ns, i) for i in ins]).values(), key=str),
            "heads": sorted(store.heads(ns, ins).values(), key=str),
        }
    out["changes"] = [(c.kind, c.namespace, c.id, c.version) for c in store.changes("", 1_000_000)]
    return out


# -- Eq. 17: KEEP ------------------------------------------------------------------------------------


def test_keep_adds_the_query_to_positive_evidence_and_keeps_the_node_active(store: GraphStore) -> None:
    g = Graph(store)
    q1 = g.add("A")
    result = g.apply(KEEP("A"))
    node = g.node("A")
    assert result.outcomes[0].outcome == "kept"
    assert node.state == "active"
    assert node.positive == {q1, "q2"}
    assert node.negative == frozenset()
    assert node.version == 2


# -- Eq. 13 and the evidence policy: ARCHIVE -----------------------------------------------------------


def test_immediate_policy_archives_at_the_first_harmful_verdict(store: GraphStore) -> None:
    """The paper's rule (Eq. 13): q → Ω⁻ and z = 0 at once, whatever the positive evidence."""
    g = Graph(store)
    g.add("A")
    g.support("A", 5)
    result = g.apply(ARCHIVE("A"), policy="immediate")
    node = g.node("A")
    assert result.outcomes[0].outcome == "archived"
    assert node.state == "archived"
    assert node.negative == {f"q{g.n}"}
    assert len(node.positive) == 6


@pytest.mark.parametrize(
    ("positives", "ratio", "harmful_to_archive"),
    [(1, 0.5, 1), (2, 0.5, 1), (3, 0.5, 2), (4, 0.5, 2), (5, 0.5, 3), (4, 1.0, 4), (6, 0.0, 1)],
)
def test_evidence_policy_archives_once_negatives_reach_max_1_rho_positives(
    store: GraphStore, positives: int, ratio: float, harmful_to_archive: int
) -> None:
    """|Ω⁻| ≥ max(1, ρ·|Ω⁺|): until then the node stays active and carries its negative evidence."""
    g = Graph(store)
    g.add("A")
    g.support("A", positives - 1)
    assert len(g.node("A").positive) == positives
    for n in range(1, harmful_to_archive + 1):
        result = g.apply(ARCHIVE("A"), status="failed", ratio=ratio)
        node = g.node("A")
        assert len(node.negative) == n
        if n < harmful_to_archive:
            assert (result.outcomes[0].outcome, node.state) == ("negative_evidence", "active")
        else:
            assert (result.outcomes[0].outcome, node.state) == ("archived", "archived")
    assert len(g.node("A").positive) == positives  # ARCHIVE never touches Ω⁺


def test_a_streak_of_judged_harms_archives_whatever_the_support_before_it(store: GraphStore) -> None:
    """ARCHIVE_STREAK=s: an insight that helped often and now harms every time (drift) is archived
    after a run of judged harms, long before ρ·|Ω⁺|: s of them, one more per power of ten of its
    judged support; a judged help in between restarts the count, and inferred evidence counts for
    neither."""
    g = Graph(store)
    g.add("A")
    g.support("A", 7)  # 8 judged positives, 9 after the KEEP below: ρ = 1 alone would wait for 9
    outcomes = []
    for op, inferred in (
        (ARCHIVE, False),
        (ARCHIVE, False),
        (KEEP, False),
        (ARCHIVE, False),
        (ARCHIVE, False),
        (ARCHIVE, True),
        (ARCHIVE, False),
    ):
        edit = op("A").model_copy(update={"inferred": inferred})
        outcomes.append(g.apply(edit, status="failed", streak=3, ratio=1.0).outcomes[0].outcome)
    assert outcomes == ["negative_evidence"] * 2 + ["kept"] + ["negative_evidence"] * 3 + ["archived"]
    assert g.node("A").state == "archived" and len(g.node("A").negative) == 6
    # 100 judged positives: a run of 5 (3 + 2); without a streak the run never archives by itself
    for name, streak, run in (("B", 3, 5), ("C", 0, None)):
        g.add(name)
        g.support(name, 99)
        for n in range(1, 8):
            outcome = g.apply(ARCHIVE(name), status="failed", streak=streak, ratio=1.0).outcomes[0].outcome
            assert outcome == ("archived" if n == run else "negative_evidence"), (name, n)
            if outcome == "archived":
                break


def test_evidence_policy_keeps_a_harmful_verdict_as_live_conflict_where_immediate_archives(
    redis_client: Any,
) -> None:
    for policy, expected in (("evidence", "active"), ("immediate", "archived")):
        redis_client.flushdb()
        for s in (InMemoryGraphStore(), RedisGraphStore(redis_client)):
            g = Graph(s)
            g.add("A")
            g.support("A", 2)
            g.apply(ARCHIVE("A"), status="failed", policy=policy)
            node = g.node("A")
            assert node.state == expected, (policy, type(s).__name__)
            assert node.negative == {"q4"}


# -- Eq. 14-15: REVISE -----------------------------------------------------------------------------


def test_revise_archives_the_old_node_and_creates_the_revised_one_with_inherited_evidence(
    store: GraphStore,
) -> None:
    g = Graph(store)
    q1 = g.add("A", "Trucks have four wheels.")
    g.apply(KEEP("A"))
    g.support("A", 2)
    g.apply(ARCHIVE("A"), status="failed")  # live conflict on A (4 positives, 1 negative)
    old_before = g.node("A")
    assert old_before.state == "active" and len(old_before.negative) == 1
    revised_text = "Trucks have at least four wheels; check the model, not the brand.  "
    result = g.apply(REVISE("A", "A2", revised_text.strip()), status="failed")
    q = f"q{g.n}"
    old, new = g.node("A"), g.node("A2")
    assert result.outcomes[0].outcome == "revised" and result.outcomes[0].new_id == "A2"
    assert result.created == ("A2",)
    # old: (κ, Ω⁺, Ω⁻ ∪ {q}, 0) with a pointer to its successor
    assert old.state == "archived"
    assert old.negative == old_before.negative | {q}
    assert old.positive == old_before.positive
    assert old.revised_to == "A2"
    assert old.text == "Trucks have four wheels."
    # new: (κ′, Ω⁺ ∪ {q}, ∅, 1) pointing back to its predecessor
    assert new.state == "active"
    assert new.text == revised_text.strip()
    assert new.positive == old_before.positive | {q}
    assert q1 in new.positive
    assert new.negative == frozenset()
    assert new.revised_from == "A"
    assert new.version == 1
    assert store.lineage("A") == store.lineage("A2") == ["A", "A2"]


def test_lineage_of_a_chain_of_revisions_is_oldest_first(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.apply(REVISE("A", "A2", "second"))
    g.apply(REVISE("A2", "A3", "third"))
    for i in ("A", "A2", "A3"):
        assert store.lineage(i) == ["A", "A2", "A3"]
    assert store.lineage("missing") == []


# -- Eq. 16: ADD -----------------------------------------------------------------------------------


def test_add_creates_an_active_node_whose_only_evidence_is_the_query(store: GraphStore) -> None:
    g = Graph(store)
    result = g.apply(ADD("N", "Check the vehicle class before the brand."), status="failed")
    node = g.node("N")
    assert result.outcomes[0].outcome == "added" and result.created == ("N",)
    assert node.model_dump(
        include={
            "text",
            "state",
            "positive",
            "negative",
            "version",
            "revised_from",
            "namespace",
            "created_by_event",
        }
    ) == {
        "text": "Check the vehicle class before the brand.",
        "state": "active",
        "positive": {"q1"},
        "negative": frozenset(),
        "version": 1,
        "revised_from": None,
        "namespace": NS,
        "created_by_event": "e1",
    }
    assert store.insight_ids(NS) == {"N"}


def test_add_of_an_exact_duplicate_text_adds_positive_evidence_instead_of_a_twin(store: GraphStore) -> None:
    """Case, punctuation and spacing do not make a new insight."""
    g = Graph(store)
    g.add("A", "Check the vehicle class first.")
    result = g.apply(ADD("B", "check  the Vehicle class, first!"))
    assert result.outcomes[0].outcome == "duplicate"
    assert result.outcomes[0].insight_id == "A"
    assert result.created == ()
    assert store.insight_ids(NS) == {"A"}
    assert g.node("A").positive == {"q1", "q2"}
    assert [h.outcome for h in store.history("A")] == ["added", "duplicate"]


def test_add_duplicating_an_archived_insight_or_another_namespace_makes_a_new_node(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A", "Same words.")
    g.apply(ARCHIVE("A"), policy="immediate")
    assert g.apply(ADD("B", "same words")).outcomes[0].outcome == "added"
    assert g.apply(ADD("C", "Same words."), ns="other").outcomes[0].outcome == "added"
    assert store.insight_ids(NS) == {"A", "B"}
    assert store.insight_ids("other") == {"C"}
    assert g.node("A").state == "archived"
    assert g.node("A").positive == {"q1"}


def test_a_proposal_repeating_an_archived_insight_is_its_evidence_not_a_fresh_start(
    store: GraphStore,
) -> None:
    """ARCHIVED_REPEATS=evidence: an agent proposing again what the memory archived for the harm it did
    records its query as that insight's evidence (judged only from a resolved task); the insight stays
    archived with its negatives, and no new node serves the lesson again from a clean slate."""
    g = Graph(store)
    g.add("A", "Ignore the shard key.")
    g.apply(ARCHIVE("A"), policy="immediate")
    again = g.apply(ADD("B", "ignore the shard key"), archived_repeats="evidence", status="failed")
    assert (again.outcomes[0].outcome, again.outcomes[0].insight_id, again.created) == (
        "evidence_only",
        "A",
        (),
    )
    near = PlannedEdit(
        op="ADD",
        new_id="C",
        text="Ignore the shard key!!",
        text_key=text_key("other"),
        twin="A",
        decided_by="rules",
    )
    assert g.apply(near, archived_repeats="evidence").outcomes[0].outcome == "evidence_only"
    node = g.node("A")
    assert store.insight_ids(NS) == {"A"}
    assert (node.state, node.positive, node.negative) == ("archived", {"q1", "q3", "q4"}, {"q2"})
    assert [h.outcome for h in store.history("A")] == ["added", "archived", "evidence_only", "evidence_only"]
    # the creating event and the repeat from a resolved task are judged support; the failed one is not
    assert store.heads(NS, ["A"])["A"].judged_positive == 2


def test_a_judged_repeat_restores_an_insight_its_record_no_longer_condemns(store: GraphStore) -> None:
    """ARCHIVED_REPEATS=restore: the repeat is evidence as with ``evidence``; one from a resolved task
    that leaves the judged negatives below max(m, ρ·judged positives) makes the insight active again,
    with no new node. A failed task's repeat, the immediate policy and a revised node never do."""
    g = Graph(store)
    g.add("A", "Ignore the shard key.")
    assert g.apply(ARCHIVE("A"), ratio=1.0).outcomes[0].outcome == "archived"  # 1 harm ≥ max(1, 1·1)
    failed = g.apply(ADD("B", "ignore the shard key"), archived_repeats="restore", ratio=1.0, status="failed")
    assert (failed.outcomes[0].outcome, g.node("A").state) == ("evidence_only", "archived")
    again = g.apply(ADD("C", "ignore the shard key"), archived_repeats="restore", ratio=1.0)
    assert (again.outcomes[0].outcome, again.outcomes[0].insight_id, again.created) == ("restored", "A", ())
    node = g.node("A")
    assert node.state == "active" and store.insight_ids(NS) == {"A"}
    assert [h.outcome for h in store.history("A")] == ["added", "archived", "evidence_only", "restored"]
    assert g.apply(KEEP("A")).outcomes[0].outcome == "kept"  # served and judged again as any active one

    g.add("D", "Skip the tests.")
    g.apply(ARCHIVE("D"), ratio=1.0)
    g.apply(ARCHIVE("D"), ratio=1.0)  # archived: its second harm is evidence only
    one_more = g.apply(ADD("E", "skip the tests"), archived_repeats="restore", ratio=1.0)
    # two judged harms still reach max(1, 1·2 judged positives): the record still condemns it
    assert (one_more.outcomes[0].outcome, g.node("D").state) == ("evidence_only", "archived")
    g.add("F", "Retry the upload.")
    g.apply(ARCHIVE("F"), policy="immediate")
    immediate = g.apply(ADD("G", "retry the upload"), archived_repeats="restore", policy="immediate")
    assert (immediate.outcomes[0].outcome, g.node("F").state) == ("evidence_only", "archived")
    g.add("H", "Check the pivot first.")
    g.apply(REVISE("H", "H2", "For quick sort, check the pivot first."))
    g.apply(ARCHIVE("H2"), policy="immediate")
    revised = g.apply(ADD("I", "check the pivot first"), archived_repeats="restore", ratio=1.0)
    assert (revised.outcomes[0].outcome, g.node("H").state) == ("evidence_only", "archived")


def test_a_proposal_repeating_a_revised_insight_is_evidence_of_the_insight_that_replaced_it(
    store: GraphStore,
) -> None:
    g = Graph(store)
    g.add("A", "Always check the pivot first.")
    g.apply(REVISE("A", "A2", "For quick sort, check the pivot first."))
    result = g.apply(ADD("B", "always check the pivot first"), archived_repeats="evidence")
    q = f"q{g.n}"
    outcome = result.outcomes[0]
    assert (outcome.outcome, outcome.insight_id, outcome.forwarded_to) == ("forwarded", "A", "A2")
    assert store.insight_ids(NS) == {"A", "A2"}
    assert q in g.node("A").positive and q in g.node("A2").positive
    assert g.node("A").state == "archived"


def test_add_duplicating_the_text_of_a_revised_active_insight_adds_evidence_to_it(store: GraphStore) -> None:
    """A revised node is an active insight like any other: an ADD of its text makes no twin."""
    g = Graph(store)
    g.add("A", "Old wording.")
    g.apply(REVISE("A", "A2", "New wording."))
    result = g.apply(ADD("B", "new wording"))
    assert result.outcomes[0].outcome == "duplicate" and result.outcomes[0].insight_id == "A2"
    assert "B" not in store.insight_ids(NS)
    assert "q3" in g.node("A2").positive


def test_a_failed_task_re_proposing_an_insight_links_its_query_without_judging_it(store: GraphStore) -> None:
    """A duplicate ADD puts the query in Ω⁺ as a new node's ADD would (Eq. 16), so the task that
    taught the insight is served it when it returns; from a failed task that evidence is inferred:
    it ranks and never counts toward the evidence policy's threshold."""
    g = Graph(store)
    g.add("A", "Check the vehicle class first.")
    result = g.apply(ADD("B", "Check the vehicle class first."), status="failed")
    assert result.outcomes[0].outcome == "duplicate"
    assert len(g.node("A").positive) == 2
    # the same from a resolved task is judged: with ρ = 1, one judged negative archives A (1 judged
    # positive) and not B (2)
    g.add("B", "Read the claim's date twice.")
    g.apply(ADD("B2", "Read the claim's date twice."), status="resolved")
    assert len(g.node("B").positive) == 2
    g.apply(ARCHIVE("A"), ARCHIVE("B"), ratio=1.0)
    assert (g.node("A").state, g.node("B").state) == ("archived", "active")


def test_revising_into_the_text_of_an_active_insight_merges_instead_of_making_a_twin(
    store: GraphStore,
) -> None:
    """Two over-general insights revised to the same rule end as one active node with both
    evidence sets (Eq. 15's inherited Ω⁺ ∪ {q} joins the existing node)."""
    g = Graph(store)
    q_a = g.add("A", "Years in claims are usually wrong.")
    q_b = g.add("B", "Dates in claims are usually wrong.")
    g.apply(REVISE("A", "A2", "Check a claim's year against the evidence."))
    result = g.apply(REVISE("B", "B2", "check a CLAIM'S year against the evidence!"), retrieved=["B", "A2"])
    assert result.outcomes[0].outcome == "merged"
    assert result.outcomes[0].new_id == "A2"
    assert result.created == ()
    assert "B2" not in store.insight_ids(NS)
    b, a2 = g.node("B"), g.node("A2")
    assert b.state == "archived" and b.revised_to == "A2" and "q4" in b.negative
    assert a2.active and {q_a, q_b, "q3", "q4"} <= a2.positive
    assert ("B", "q4") in store.edges_into("A2")
    assert all(a != "A2" for a, _ in store.edges_into("A2")), "no insight contextualises itself"


# -- Eq. 18: edges ---------------------------------------------------------------------------------


def test_resolved_task_links_every_retrieved_insight_to_every_new_or_revised_one(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    g.add("C")
    result = g.apply(
        REVISE("A", "A2", "A narrower"),
        KEEP("B"),
        ADD("N", "a new idea"),
        retrieved=["A", "B", "C"],
        status="resolved",
    )
    q = f"q{g.n}"
    assert set(result.created) == {"A2", "N"}
    for b in ("A2", "N"):
        assert store.edges_into(b) == [("A", q), ("B", q), ("C", q)]
    for existing in ("A", "B", "C"):
        assert store.edges_into(existing) == []


def test_failed_task_adds_no_edges(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    result = g.apply(
        REVISE("A", "A2", "A narrower"), ADD("N", "a new idea"), retrieved=["A", "B"], status="failed"
    )
    assert set(result.created) == {"A2", "N"}
    for i in ("A", "A2", "B", "N"):
        assert store.edges_into(i) == []


def test_edges_of_an_archived_node_are_kept(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.apply(ADD("N", "built on A"), retrieved=["A"])
    g.apply(ARCHIVE("N"), policy="immediate")
    assert g.node("N").state == "archived"
    assert store.edges_into("N") == [("A", "q2")]


# -- edits on superseded nodes --------------------------------------------------------------------------


def test_keep_on_a_revised_node_forwards_the_evidence_to_the_active_tip(store: GraphStore) -> None:
    """A stale retrieval still judging A after A → A2 → A3: A records q, A3 gets the credit."""
    g = Graph(store)
    g.add("A")
    g.apply(REVISE("A", "A2", "second"))
    g.apply(REVISE("A2", "A3", "third"))
    a2_before = g.node("A2")
    result = g.apply(KEEP("A"))
    q = f"q{g.n}"
    outcome = result.outcomes[0]
    assert (outcome.outcome, outcome.forwarded_to) == ("forwarded", "A3")
    a, a2, a3 = g.node("A"), g.node("A2"), g.node("A3")
    assert a.state == "archived" and q in a.positive
    assert a3.state == "active" and q in a3.positive
    assert a2 == a2_before
    assert store.history("A3")[-1].event_id == f"e{g.n}"
    assert store.history("A")[-1].new_id == "A3"


def test_keep_on_an_archived_node_without_active_successor_only_records_evidence(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.apply(ARCHIVE("A"), policy="immediate")
    g.add("B")
    g.apply(REVISE("B", "B2", "b two"))
    g.apply(ARCHIVE("B2"), policy="immediate")
    for i in ("A", "B"):
        result = g.apply(KEEP(i))
        assert result.outcomes[0].outcome == "evidence_only"
        assert f"q{g.n}" in g.node(i).positive
        assert g.node(i).state == "archived"
    assert g.node("B2").state == "archived"


def test_revise_or_archive_on_an_archived_node_only_adds_negative_evidence(store: GraphStore) -> None:
    """No second successor: the lineage never forks, and no node reactivates."""
    g = Graph(store)
    g.add("A")
    g.apply(REVISE("A", "A2", "second"))
    result = g.apply(REVISE("A", "X", "a fork"))
    assert result.outcomes[0].outcome == "negative_evidence"
    assert result.created == ()
    assert "X" not in store.insight_ids(NS)
    assert g.node("A").revised_to == "A2"
    assert f"q{g.n}" in g.node("A").negative
    result = g.apply(ARCHIVE("A"))
    assert result.outcomes[0].outcome == "negative_evidence"
    assert g.node("A").state == "archived"
    assert store.lineage("A") == ["A", "A2"]


# -- the ablations (paper Figure 3) ------------------------------------------------------------------


def _decision_for(a: str, b: str, c: str) -> ControllerDecision:
    return ControllerDecision(
        insight_edits=[
            InsightEdit(insight_id=a, operation="KEEP", decided_by="rules"),
            InsightEdit(insight_id=b, operation="ARCHIVE", decided_by="rules"),
            InsightEdit(
                insight_id=c, operation="REVISE", revised_insight_text="C, narrower", decided_by="rules"
            ),
        ],
        add_new_insight=AddDecision(decision=True, new_insight_text="a new one", decided_by="rules"),
    )


def _event(**kw: Any) -> TaskEvent:
    doc = {"namespace": NS, "query": "a task", "status": "resolved", **kw}
    return TaskEvent.model_validate(doc)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("all", {"A": ("kept", "active"), "B": ("archived", "archived"), "C": ("revised", "archived")}),
        ("add+keep+archive", {"A": ("kept", "active"), "B": ("archived", "archived"), "C": (None, "active")}),
        ("add+keep", {"A": ("kept", "active"), "B": (None, "active"), "C": (None, "active")}),
    ],
)
def test_each_ablation_applies_only_its_operations(
    store: GraphStore, mode: str, expected: dict[str, tuple[str | None, str]]
) -> None:
    """A disabled operation leaves the insight as it was and records nothing; ADD is always on."""
    g = Graph(store)
    for i in ("A", "B", "C"):
        g.add(i)
    before = store.insights(["A", "B", "C"])
    event = _event(status="failed")
    plan = plan_edits(
        event,
        _decision_for("A", "B", "C"),
        retrieved=["A", "B", "C"],
        similar=[],
        allowed_operations=ALLOWED_OPERATIONS[mode],
        archive_policy="immediate",
        archive_ratio=0.5,
        at=T0,
    )
    result = store.apply(plan)
    outcome_of = {o.insight_id: o.outcome for o in result.outcomes}
    for i, (outcome, state) in expected.items():
        node = g.node(i)
        assert outcome_of.get(i) == outcome
        assert node.state == state
        if outcome is None:
            assert node == before[i]
            assert [h.event_id for h in store.history(i)] == [before[i].created_by_event]
    assert added_insight_id(event.namespace, str(event.event_id)) in result.created
    if mode != "all":
        assert store.lineage("C") == ["C"]


def test_under_add_keep_no_insight_is_ever_archived_or_revised(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    for n in range(6):
        event = _event(status="failed", query=f"task {n}")
        decision = ControllerDecision(
            insight_edits=[
                InsightEdit(
                    insight_id="A", operation="ARCHIVE" if n % 2 else "REVISE", revised_insight_text="x"
                ),
            ]
        )
        store.apply(
            plan_edits(
                event,
                decision,
                retrieved=["A"],
                similar=[],
                allowed_operations=ALLOWED_OPERATIONS["add+keep"],
                archive_policy="immediate",
                archive_ratio=0.5,
                at=T0,
            )
        )
    node = g.node("A")
    assert (node.state, node.negative, node.version) == ("active", frozenset(), 1)
    assert store.insight_ids(NS) == {"A"}


# -- what a decision may touch ---------------------------------------------------------------------


def test_edits_naming_insights_that_were_not_retrieved_are_dropped(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    before = g.node("B")
    event = _event(status="failed")
    decision = ControllerDecision(
        insight_edits=[
            InsightEdit(insight_id="A", operation="KEEP"),
            InsightEdit(insight_id="B", operation="ARCHIVE"),
        ]
    )
    plan = plan_edits(
        event,
        decision,
        retrieved=["A"],
        similar=[],
        allowed_operations=ALLOWED_OPERATIONS["all"],
        archive_policy="immediate",
        archive_ratio=0.5,
        at=T0,
    )
    assert [(e.op, e.insight_id) for e in plan.edits] == [("KEEP", "A")]
    store.apply(plan)
    assert g.node("B") == before
    assert query_id_for(event) in g.node("A").positive


def test_the_first_edit_for_an_insight_wins() -> None:
    decision = ControllerDecision(
        insight_edits=[
            InsightEdit(insight_id="A", operation="ARCHIVE", decided_by="feedback"),
            InsightEdit(insight_id="A", operation="KEEP", decided_by="rules"),
        ]
    )
    plan = plan_edits(
        _event(),
        decision,
        retrieved=["A"],
        similar=[],
        allowed_operations=ALLOWED_OPERATIONS["all"],
        archive_policy="evidence",
        archive_ratio=0.5,
        at=T0,
    )
    assert [(e.op, e.decided_by) for e in plan.edits] == [("ARCHIVE", "feedback")]


def test_node_ids_are_derived_from_the_event_so_a_replay_recreates_the_same_nodes() -> None:
    event = _event(proposed_insight="x")
    decision = ControllerDecision(
        insight_edits=[InsightEdit(insight_id="A", operation="REVISE", revised_insight_text="A2")],
        add_new_insight=AddDecision(decision=True, new_insight_text="new"),
    )
    kw: dict[str, Any] = {
        "retrieved": ["A"],
        "similar": ["p"],
        "allowed_operations": ALLOWED_OPERATIONS["all"],
        "archive_policy": "evidence",
        "archive_ratio": 0.5,
        "at": T0,
    }
    one, two = plan_edits(event, decision, **kw), plan_edits(event, decision, **kw)
    assert one == two
    eid = str(event.event_id)
    ns = event.namespace
    assert [e.new_id for e in one.edits] == [revised_insight_id(ns, eid, "A"), added_insight_id(ns, eid)]
    moved = plan_edits(event.model_copy(update={"namespace": "elsewhere"}), decision, **kw)
    assert {e.new_id for e in moved.edits}.isdisjoint({e.new_id for e in one.edits})  # ids are unique
    other = plan_edits(_event(), decision, **kw)
    assert {e.new_id for e in other.edits}.isdisjoint({e.new_id for e in one.edits})
    assert other.query_id != one.query_id
    assert plan_edits(_event(query_id="my-q"), decision, **kw).query_id == "my-q"


def test_an_edit_of_another_namespaces_insight_is_rejected_and_changes_nothing(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A", "Tenant one's insight.", ns="one")
    g.apply(ADD("N", "Tenant two's insight."), ns="two")
    before = snapshot(store, ["one"])
    result = g.apply(
        KEEP("A"),
        ARCHIVE("A"),
        REVISE("A", "A2", "stolen"),
        ADD("M", "tenant one's insight"),
        ns="two",
        retrieved=["A"],
        similar=["q1"],
        policy="immediate",
    )
    assert [o.outcome for o in result.outcomes] == ["rejected", "rejected", "rejected", "added"]
    after = snapshot(store, ["one"])
    assert after["one"] == before["one"]
    assert store.namespace_of(["A", "M", "A2", "nope"]) == {"A": "one", "M": "two"}
    assert store.edges_into("M") == []  # no edge to a foreign insight
    assert store.neighbours("two", [f"q{g.n}"]) == {f"q{g.n}": {}}  # nor to a foreign query


def test_history_records_every_applied_edit_with_who_decided(store: GraphStore) -> None:
    g = Graph(store)
    g.apply(ADD("A", "first", by="rules"))
    g.apply(KEEP("A", by="llm:gpt-4o-mini@controller-v1"))
    g.apply(KEEP("A", by="rules"))
    g.apply(ARCHIVE("A", by="feedback"), status="failed")
    g.apply(REVISE("A", "A2", "second", by="llm:gpt-4o-mini@controller-v1"))
    hist = store.history("A")
    assert [(h.op, h.outcome, h.decided_by, h.event_id, h.query_id) for h in hist] == [
        ("ADD", "added", "rules", "e1", "q1"),
        ("KEEP", "kept", "llm:gpt-4o-mini@controller-v1", "e2", "q2"),
        ("KEEP", "kept", "rules", "e3", "q3"),
        ("ARCHIVE", "negative_evidence", "feedback", "e4", "q4"),
        ("REVISE", "revised", "llm:gpt-4o-mini@controller-v1", "e5", "q5"),
    ]
    assert hist[-1].new_id == "A2"
    assert [h.event_id for h in store.history("A2")] == ["e5"]
    assert [datetime.fromisoformat(h.at) for h in hist] == [T0 + timedelta(seconds=n) for n in range(1, 6)]


# -- idempotency -----------------------------------------------------------------------------------


def test_the_same_plan_applied_twice_changes_the_graph_once(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.add("B")
    g.support("A", 3)
    plan = g.plan(
        KEEP("A"),
        ARCHIVE("B"),
        REVISE("A", "A2", "again"),
        ADD("N", "new"),
        similar=["q1"],
        policy="immediate",
    )
    first = store.apply(plan)
    once = snapshot(store)
    again = store.apply(plan)
    # a redelivered event is re-planned later: same event id, a later time
    later = store.apply(plan.model_copy(update={"at": plan.at + timedelta(hours=1)}))
    assert not first.replayed and again.replayed and later.replayed
    assert again.outcomes == later.outcomes == first.outcomes
    assert again.created == first.created
    assert snapshot(store) == once
    assert store.is_applied(NS, plan.event_id) and not store.is_applied(NS, "never")
    assert not store.is_applied("other", plan.event_id)  # event ids are scoped to a namespace


# -- query nodes, the query graph, the change feed, stored decisions -------------------------------------


def test_a_query_node_is_linked_both_ways_to_the_similar_queries_it_retrieved(store: GraphStore) -> None:
    g = Graph(store)
    g.apply()  # q1
    g.apply()  # q2
    g.apply(ns="other")  # q3 in another namespace
    g.apply(similar=["q1", "q2", "q3", "ghost"])  # q4
    assert store.neighbours(NS, ["q1", "q2", "q3", "q4"]) == {
        "q1": {"q4": 1.0},
        "q2": {"q4": 1.0},
        "q3": {},
        "q4": {"q1": 1.0, "q2": 1.0},
    }
    node = store.queries(NS, ["q4"])["q4"]
    assert (node.namespace, node.status, node.text, node.trajectory, node.event_id) == (
        NS,
        "resolved",
        "task 4",
        ["step"],
        "e4",
    )
    assert store.query_ids(NS) == {"q1", "q2", "q4"} and store.query_ids("other") == {"q3"}


def test_a_query_reported_without_similar_queries_waits_for_the_projector_to_link_it(
    store: GraphStore,
) -> None:
    g = Graph(store)
    g.apply()
    store.apply(g.plan().model_copy(update={"similar": None}))
    assert store.unlinked(NS, ["q1", "q2"]) == {"q2"}
    store.link_queries(NS, "q2", {"q1": 0.5, "q2": 1.0, "missing": 0.9})
    assert store.unlinked(NS, ["q2"]) == set()
    assert store.neighbours(NS, ["q1", "q2"]) == {"q1": {"q2": 0.5}, "q2": {"q1": 0.5}}


def test_linking_never_crosses_namespaces(store: GraphStore) -> None:
    g = Graph(store)
    g.apply(ns="other")
    store.apply(g.plan().model_copy(update={"similar": None}))
    store.link_queries(NS, "q2", {"q1": 0.5})
    assert store.neighbours(NS, ["q1", "q2"]) == {"q1": {}, "q2": {}}
    assert store.neighbours("other", ["q1"]) == {"q1": {}}


def test_a_query_id_reused_by_a_later_event_keeps_its_first_node(store: GraphStore) -> None:
    g = Graph(store)
    g.apply(query="shared", status="failed")
    g.apply(query="shared", status="resolved")
    assert store.queries(NS, ["shared"])["shared"].event_id == "e1"
    assert [c.id for c in store.changes("", 100) if c.kind == "query"] == ["shared"]


def test_the_same_query_id_in_two_namespaces_is_two_queries_and_neither_touches_the_other(
    store: GraphStore,
) -> None:
    """Query ids are scoped to their namespace: a tenant cannot claim another's id, nor learn that it
    exists, nor reach its node or edges through it."""
    g = Graph(store)
    g.add("A", ns="one")  # q1 in namespace one
    g.apply(ns="two")  # q2 in namespace two
    before = snapshot(store, ["one"])
    result = g.apply(ADD("N", "tenant two's"), KEEP("A"), ns="two", query="q1", similar=["q2"])
    assert [o.outcome for o in result.outcomes] == ["added", "rejected"]
    assert snapshot(store, ["one"])["one"] == before["one"]
    assert store.queries("two", ["q1"])["q1"].text == f"task {g.n}"
    assert store.queries("one", ["q1"])["q1"].text == "task 1"
    assert store.neighbours("two", ["q1"]) == {"q1": {"q2": 1.0}}


def test_the_change_feed_lists_each_changed_node_with_its_new_version_in_order(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")
    g.apply(KEEP("A"), ADD("B", "b"))
    g.apply(REVISE("A", "A2", "a two"))
    g.apply(KEEP("B"), query="q2")  # the same query's evidence grows: it is announced again
    feed = store.changes("", 100)
    # a KEEP changes what the query supports, not what the read model holds of the insight: the
    # query is announced, the insight only when it is new, archived or revised (its version still moves)
    assert [(c.kind, c.namespace, c.id, c.version) for c in feed] == [
        ("query", NS, "q1", 1),
        ("insight", NS, "A", 1),
        ("query", NS, "q2", 1),
        ("insight", NS, "B", 1),
        ("query", NS, "q3", 1),
        ("insight", NS, "A", 3),
        ("insight", NS, "A2", 1),
        ("query", NS, "q2", 2),
    ]
    page = store.changes(feed[2].cursor, 3)
    assert [(c.id, c.version) for c in page] == [("B", 1), ("q3", 1), ("A", 3)]
    assert store.changes(feed[-1].cursor, 100) == []
    assert g.node("B").version == 2


def test_the_first_stored_decision_for_an_event_wins(store: GraphStore) -> None:
    first = StoredDecision(
        ControllerDecision(insight_edits=[InsightEdit(insight_id="A", operation="KEEP")]), "d1"
    )
    second = StoredDecision(
        ControllerDecision(insight_edits=[InsightEdit(insight_id="A", operation="ARCHIVE")])
    )
    assert store.load_decisions([(NS, "e1")]) == {}
    assert store.save_decisions({(NS, "e1"): first}) == {(NS, "e1"): first}
    assert store.save_decisions({(NS, "e1"): second, ("other", "e1"): second}) == {
        (NS, "e1"): first,
        ("other", "e1"): second,
    }
    assert store.load_decisions([(NS, "e1")]) == {(NS, "e1"): first}


def test_a_retrieval_record_round_trips(store: GraphStore) -> None:
    record = RetrievalRecord("r1", NS, "a task", ("q1", "q2"), ("A",), (0.9, 0.5), (0.9,))
    store.save_retrieval(record, ttl_s=60)
    assert store.load_retrieval(NS, "r1") == record
    assert store.load_retrieval("other", "r1") is None  # retrieval ids are scoped to a namespace
    assert store.load_retrieval(NS, "nope") is None
    carrying = RetrievalRecord("r2", NS, "a task", (), (), vector=pack_vector([0.6, 0.8], "e5:2"))
    store.save_retrieval(carrying, ttl_s=60)
    assert store.load_retrieval(NS, "r2") == carrying


# -- both stores, one behaviour (property) -----------------------------------------------------------

TEXTS = [
    "Check the class.",
    "check the CLASS",
    "Read the date twice.",
    "Prefer the primary source.",
    "Ask for the unit.",
]


def _check_never_reactivated(store: GraphStore, archived: set[str]) -> None:
    nodes = store.insights(archived)
    assert all(n.state == "archived" for n in nodes.values()), "an archived insight became active again"


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_random_sequence_of_events_leaves_both_stores_in_the_same_state(redis_url: str, data: Any) -> None:
    client = connect(redis_url)
    client.flushdb()
    ref, red = InMemoryGraphStore(), RedisGraphStore(client)
    owners: dict[str, str] = {}  # every insight ever created → its namespace
    queries: list[str] = []
    plans: list[EditPlan] = []
    archived: set[str] = set()
    try:
        for step in range(data.draw(st.integers(1, 14), label="steps")):
            if plans and data.draw(st.integers(0, 5), label="replay?") == 0:
                plan = data.draw(st.sampled_from(plans), label="replayed plan")
            else:
                ns = data.draw(st.sampled_from(["one", "two"]), label="namespace")
                pool = sorted(owners)
                targets = (
                    data.draw(st.lists(st.sampled_from(pool), max_size=4, unique=True), label="targets")
                    if pool
                    else []
                )
                edits = [
                    InsightEdit(
                        insight_id=t,
                        operation=op,
                        revised_insight_text=f"revised {t} at {step}" if op == "REVISE" else None,
                        decided_by=data.draw(st.sampled_from(["feedback", "rules", "llm:m@v1"])),
                    )
                    for t in targets
                    for op in [data.draw(st.sampled_from(["KEEP", "ARCHIVE", "REVISE"]), label="op")]
                ]
                add_text = data.draw(st.none() | st.sampled_from(TEXTS), label="add")
                decision = ControllerDecision(
                    insight_edits=edits,
                    add_new_insight=AddDecision(decision=add_text is not None, new_insight_text=add_text),
                )
                event = TaskEvent(
                    event_id=uuid.UUID(int=step + 1),
                    namespace=ns,
                    query=f"task {step}",
                    status=data.draw(st.sampled_from(["resolved", "failed"]), label="status"),
                    query_id=data.draw(st.none() | st.sampled_from(queries), label="query id")
                    if queries
                    else None,
                )
                plan = plan_edits(
                    event,
                    decision,
                    retrieved=targets + data.draw(st.lists(st.sampled_from(pool), max_size=2), label="more")
                    if pool
                    else targets,
                    similar=data.draw(st.lists(st.sampled_from(queries), max_size=3), label="similar")
                    if queries
                    else [],
                    allowed_operations=ALLOWED_OPERATIONS[
                        data.draw(st.sampled_from(list(ALLOWED_OPERATIONS)))
                    ],
                    archive_policy=data.draw(st.sampled_from(["evidence", "immediate"]), label="policy"),
                    archive_ratio=data.draw(st.sampled_from([0.0, 0.5, 1.0]), label="ratio"),
                    at=T0 + timedelta(seconds=step),
                )
                plans.append(plan)
            expected = ref.apply(plan)
            assert red.apply(plan) == expected
            for node_id in expected.created:
                owners[node_id] = plan.namespace
            if plan.query_id not in queries:
                queries.append(plan.query_id)
            _check_never_reactivated(ref, archived)
            _check_never_reactivated(red, archived)
            archived |= {i for i, n in ref.insights(owners).items() if n.state == "archived"}
        assert snapshot(red) == snapshot(ref)
        for i in owners:
            assert red.history(i) == ref.history(i)
    finally:
        client.close()


def test_the_recent_quality_signal_counts_what_events_found_harmful_and_retired(store: GraphStore) -> None:
    g = Graph(store)
    g.add("A")  # judged 0
    g.add("B")
    g.apply(KEEP("A"), KEEP("B"))  # judged 2, harmed 0
    g.apply(ARCHIVE("A"), status="failed", policy="immediate")  # judged 1, harmed 1, retired 1
    g.apply(REVISE("B", "B2", "narrower"), status="failed")  # judged 1, harmed 1, retired 1
    g.apply(ARCHIVE("B"), status="failed")  # B is archived already: harmed, not retired again
    g.apply(KEEP("A"), ns="other", retrieved=["A"])  # another namespace's event: rejected, its own
    signal = store.recent_quality(NS)
    assert (signal.events, signal.judged, signal.harmed, signal.retired) == (6, 5, 3, 2)
    assert signal.harmful_share == pytest.approx(3 / 5)
    assert signal.retired_per_100_events == pytest.approx(100 * 2 / 6)
    assert store.recent_quality("other").harmed == 0 and store.recent_quality("nobody").harmful_share is None


def test_an_inferred_archive_records_the_negative_and_never_archives(store: GraphStore) -> None:
    """What the rule controller infers from an outcome is evidence, not grounds for an irreversible
    edit: under either policy the node stays active, with its conflict."""
    g = Graph(store)
    g.add("A")
    weak = PlannedEdit(op="ARCHIVE", insight_id="A", inferred=True, decided_by="rules")
    for policy in ("immediate", "evidence", "evidence"):
        result = g.apply(weak, status="failed", policy=policy)
        assert result.outcomes[0].outcome == "negative_evidence"
    node = g.node("A")
    assert (node.state, len(node.negative)) == ("active", 3)
    assert g.apply(ARCHIVE("A"), status="failed", policy="immediate").outcomes[0].outcome == "archived"


# -- the word counts text relevance weighs by ----------------------------------------------------------


def _with_words(edit: PlannedEdit) -> PlannedEdit:
    return edit.model_copy(update={"words": sorted(word_features(edit.text or ""))})


def _forget_word_counts(store: GraphStore) -> None:
    """As an evomem that kept no word counts left the namespace."""
    if isinstance(store, RedisGraphStore):
        store.r.delete(keys.insight_words(NS))
    else:
        assert isinstance(store, InMemoryGraphStore)
        store._words.pop(NS)
        store._counted.pop(NS)


def test_every_new_node_counts_its_words_and_counting_afresh_agrees(store: GraphStore) -> None:
    g = Graph(store)
    texts = {
        "A": "For cron scheduling, check the time zone first.",
        "B": "For git bisect, check the good commit first.",
        "A2": "For cron scheduling, verify the overlap lock before any change.",
    }
    assert store.word_counts(NS, word_features(texts["A"])) is None  # nothing counted yet
    g.apply(_with_words(ADD("A", texts["A"])))
    g.apply(_with_words(ADD("B", texts["B"])))
    g.apply(_with_words(REVISE("A", "A2", texts["A2"])))  # a new node; A, archived, stays counted
    g.apply(ARCHIVE("B"))
    features = {f for t in texts.values() for f in word_features(t)} | word_features("unseen words")
    expected = Counter(f for t in texts.values() for f in word_features(t))
    counted = store.word_counts(NS, features)
    assert counted == (3, dict(expected))
    assert counted[1][next(iter(word_features("cron")))] == 2
    assert store.word_counts("elsewhere", features) is None

    assert store.word_table(NS, len(expected)) == (3, dict(expected))  # every word, nothing else
    assert store.word_table(NS, len(expected) - 1) is None  # more words than asked for
    assert store.word_table("elsewhere", 100) is None

    _forget_word_counts(store)
    assert store.word_counts(NS, features) is None
    assert store.word_table(NS, 100) is None
    assert store.count_words(NS)
    assert store.word_counts(NS, features) == (3, dict(expected))
    assert store.word_table(NS, len(expected)) == (3, dict(expected))


def test_counting_afresh_keeps_the_insights_created_meanwhile_counted(redis_client: Any) -> None:
    """A busy namespace gets insights while its texts are read: each one's apply script counted its
    words, and completing the counts keeps them (they are exact, and complete, at once)."""
    store = RedisGraphStore(redis_client)
    g = Graph(store)
    texts = [
        "For cron scheduling, check the time zone first.",
        "For git bisect, check the good commit first.",
    ]
    g.apply(_with_words(ADD("A", texts[0])))
    g.apply(_with_words(ADD("B", texts[1])))
    _forget_word_counts(store)  # as an evomem that kept no counts left it
    later = "For cron scheduling, verify the overlap lock first."
    g.apply(_with_words(ADD("C", later)))  # counted by its apply script: the counts are partial
    real = store._counted_so_far
    meanwhile = "For git bisect, mark the bad commit first."

    def read_then_one_more(**kwargs: Any) -> Any:
        got = real(**kwargs)
        g.apply(_with_words(ADD("D", meanwhile)))  # created while the texts are read
        return got

    store._counted_so_far = read_then_one_more  # type: ignore[method-assign]
    assert store.word_counts(NS, [1]) is None
    assert store.count_words(NS)
    expected = Counter(f for t in [*texts, later, meanwhile] for f in word_features(t))
    assert store.word_counts(NS, set(expected)) == (4, dict(expected))
    assert store.word_table(NS, 10_000) == (4, dict(expected))  # and nothing else: no zero left over
    store._counted_so_far = real  # type: ignore[method-assign]
    assert store.count_words(NS) and store.word_table(NS, 10_000) == (4, dict(expected))  # done once
