"""Paper §3.1 and §3.3 on hand-built graphs: neighbour expansion (Eq. 3-4), the candidate rule (Eq. 7),
support, conflict and the conflict-penalised score (Eq. 8-9), top-B (Eq. 10).

Graphs are built with the reference graph store, through the same edit plans consolidation applies,
so the conflict penalty is exercised where it comes from: the evidence policy leaving a harmful
verdict on an insight that stays active.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.core.editing import EditPlan, PlannedEdit, text_key
from evomem.core.retrieval import (
    Candidate,
    conflict,
    conflict_penalized_score,
    expand_neighbours,
    rank_insights,
    support,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NS = "hotpotqa"


class QueryGraph:
    """An undirected query graph given by its edges, with a counter of round trips."""

    def __init__(self, edges: Iterable[tuple[str, str]]) -> None:
        self.adj: dict[str, set[str]] = {}
        for a, b in edges:
            self.adj.setdefault(a, set()).add(b)
            self.adj.setdefault(b, set()).add(a)
        self.calls: list[set[str]] = []

    def __call__(self, ids: Collection[str]) -> Mapping[str, set[str]]:
        self.calls.append(set(ids))
        return {q: set(self.adj.get(q, ())) for q in ids}


def cand(i: str, pos: Iterable[str] = (), neg: Iterable[str] = (), active: bool = True) -> Candidate:
    return Candidate(
        id=i, text=f"text of {i}", positive=frozenset(pos), negative=frozenset(neg), active=active
    )


# -- Eq. 3-4: Q̃ˢ = Qˢ ∪ ΔQ ------------------------------------------------------------------------------

# a path p1 - p2 - p3 - p4 off the similar query s, and a second similar query t with one neighbour
CHAIN = [("s", "p1"), ("p1", "p2"), ("p2", "p3"), ("p3", "p4"), ("t", "u")]


def test_one_hop_adds_the_neighbours_of_the_similar_queries_and_nothing_further() -> None:
    graph = QueryGraph(CHAIN)
    expansion = expand_neighbours(["s", "t"], graph, hops=1)
    assert expansion.similar == ("s", "t")
    assert expansion.expanded == {"s", "t", "p1", "u"}
    assert len(graph.calls) == 1  # one round trip for the whole frontier


def test_zero_hops_keeps_the_similar_queries_alone_without_reading_the_graph() -> None:
    graph = QueryGraph(CHAIN)
    assert expand_neighbours(["s", "t"], graph, hops=0).expanded == {"s", "t"}
    assert graph.calls == []


def test_two_hops_reach_neighbours_of_neighbours_and_only_fetch_the_new_frontier() -> None:
    graph = QueryGraph(CHAIN)
    expansion = expand_neighbours(["s", "t"], graph, hops=2)
    assert expansion.expanded == {"s", "t", "p1", "u", "p2"}
    assert graph.calls == [{"s", "t"}, {"p1", "u"}]


def test_expansion_stops_when_no_new_query_is_found_even_on_a_cycle() -> None:
    graph = QueryGraph([("a", "b"), ("b", "c"), ("c", "a")])
    expansion = expand_neighbours(["a"], graph, hops=4)
    assert expansion.expanded == {"a", "b", "c"}
    assert len(graph.calls) == 2
    assert expand_neighbours([], graph, hops=3).expanded == frozenset()


# -- Eq. 9 and 8 -----------------------------------------------------------------------------------


def test_support_and_conflict_count_evidence_inside_the_expanded_set_only() -> None:
    c = cand("A", pos={"q1", "q2", "far"}, neg={"q3", "elsewhere"})
    expanded = {"q1", "q2", "q3", "q4"}
    assert (support(c, expanded), conflict(c, expanded)) == (2, 1)
    assert conflict_penalized_score(2, 1, 1.0) == 1.0
    assert conflict_penalized_score(2, 1, 0.0) == 2.0
    assert conflict_penalized_score(5, 2, 1.5) == 2.0


def test_served_insights_carry_their_support_conflict_and_score() -> None:
    ranked = rank_insights([cand("A", pos={"q1", "q2", "q3"}, neg={"q4"})], {"q1", "q2", "q3", "q4"}, 0.5, 3)
    assert [(i.id, i.text, i.support, i.conflict, i.score) for i in ranked] == [("A", "text of A", 3, 1, 2.5)]


# -- the live conflict penalty, built through the evidence policy -------------------------------------------


class Builder:
    """Applies hand-made plans to the reference store; the query ids are q1, q2, ... in order."""

    def __init__(self, policy: str = "evidence") -> None:
        self.store = InMemoryGraphStore()
        self.policy = policy
        self.n = 0

    def event(self, *edits: PlannedEdit, status: str = "resolved", similar: Iterable[str] = ()) -> str:
        self.n += 1
        q = f"q{self.n}"
        self.store.apply(
            EditPlan(
                event_id=f"e{self.n}",
                namespace=NS,
                query_id=q,
                query_text=f"task {self.n}",
                status=status,
                trajectory_json="[]",
                similar=list(similar),
                retrieved=[e.insight_id for e in edits if e.insight_id],
                edits=list(edits),
                archive_policy=self.policy,
                archive_ratio=0.5,
                at=T0,
            )
        )
        return q

    def add(self, i: str) -> str:
        text = f"insight {i}"
        return self.event(PlannedEdit(op="ADD", new_id=i, text=text, text_key=text_key(text), decided_by="t"))

    def keep(self, *ids: str) -> str:
        return self.event(*(PlannedEdit(op="KEEP", insight_id=i, decided_by="t") for i in ids))

    def harmful(self, *ids: str) -> str:
        return self.event(
            *(PlannedEdit(op="ARCHIVE", insight_id=i, decided_by="t") for i in ids), status="failed"
        )

    def revise(self, i: str, new_id: str) -> str:
        return self.event(
            PlannedEdit(op="REVISE", insight_id=i, new_id=new_id, text=f"revised {i}", decided_by="t")
        )

    def candidates(self) -> list[Candidate]:
        """What the index holds for the namespace: every insight, with its state and evidence."""
        nodes = self.store.insights(self.store.insight_ids(NS)).values()
        return [Candidate(n.id, n.text, n.positive, n.negative, n.version, n.active) for n in nodes]

    def everything(self) -> set[str]:
        return self.store.query_ids(NS)

    def rank(self, lam: float = 1.0, budget: int = 3, expanded: Collection[str] | None = None) -> list[str]:
        return [
            i.id
            for i in rank_insights(
                self.candidates(), self.everything() if expanded is None else expanded, lam, budget
            )
        ]


def _two_equally_supported_insights(policy: str) -> Builder:
    """A and B supported by the same three queries; then one task finds A harmful."""
    b = Builder(policy)
    b.add("A")
    b.add("B")
    b.keep("A", "B")
    b.keep("A", "B")  # |Ω⁺| = 3 each
    b.harmful("A")  # evidence policy: 1 < max(1, 0.5·3) → A stays active
    return b


def test_an_active_insight_carrying_negative_evidence_ranks_below_an_equal_one_without() -> None:
    b = _two_equally_supported_insights("evidence")
    a = b.store.insights(["A"])["A"]
    assert a.active and len(a.negative) == 1
    ranked = rank_insights(b.candidates(), b.everything(), 1.0, 3)
    assert [(i.id, i.support, i.conflict, i.score) for i in ranked] == [("B", 3, 0, 3.0), ("A", 3, 1, 2.0)]


def test_without_the_penalty_lambda_zero_the_same_two_insights_tie_and_the_order_changes() -> None:
    b = _two_equally_supported_insights("evidence")
    assert b.rank(lam=0.0) == ["A", "B"]  # tie on r and on s: the id decides
    assert b.rank(lam=1.0) == ["B", "A"]  # the conflict penalty decides


def test_lambda_trades_support_against_conflict() -> None:
    """A: more support and more conflict; B: less of both. λ decides which is served first."""
    b = Builder()
    b.add("A")
    b.add("B")
    b.keep("A", "B")
    b.keep("A", "B")
    b.keep("A")
    b.keep("A")  # |Ω⁺(A)| = 5, |Ω⁺(B)| = 3
    b.harmful("A")
    b.harmful("A")  # 2 < max(1, 2.5): A active with two conflicts
    assert b.store.insights(["A"])["A"].active
    assert b.rank(lam=0.0) == ["A", "B"]  # 5 > 3
    assert b.rank(lam=0.5) == ["A", "B"]  # 4 > 3
    assert b.rank(lam=1.0) == ["A", "B"]  # 3 = 3, more support first
    assert b.rank(lam=2.0) == ["B", "A"]  # 1 < 3


def test_the_paper_immediate_rule_archives_instead_so_the_harmful_insight_is_not_served() -> None:
    b = _two_equally_supported_insights("immediate")
    assert not b.store.insights(["A"])["A"].active
    assert b.rank(lam=0.0) == ["B"]


def test_conflict_only_counts_where_the_insight_failed_near_the_current_query() -> None:
    """The failing query outside Q̃ˢ costs nothing: the penalty is local to the context."""
    b = _two_equally_supported_insights("evidence")
    near_success = {"q3", "q4", "q1", "q2"}  # the supporting queries, not the failed q5
    ranked = rank_insights(b.candidates(), near_success, 1.0, 3)
    assert {(i.id, i.conflict) for i in ranked} == {("A", 0), ("B", 0)}


# -- Eq. 7: who is a candidate -----------------------------------------------------------------------


def test_archived_insights_are_never_served_however_strong_their_support() -> None:
    b = Builder()
    b.add("A")
    b.keep("A")
    b.keep("A")
    b.revise("A", "A2")  # A archived (Eq. 14), A2 active with Ω⁺(A) ∪ {q} (Eq. 15)
    b.add("C")
    b.event(PlannedEdit(op="ARCHIVE", insight_id="C", decided_by="t"), status="failed")  # C archived
    assert not b.store.insights(["C"])["C"].active
    for lam in (0.0, 1.0):
        assert b.rank(lam=lam, budget=10) == ["A2"]
    # even a fabricated archived candidate with the best score is not served
    assert (
        rank_insights(
            [cand("Z", pos={"q1", "q2"}, active=False), cand("Y", pos={"q1"})], {"q1", "q2"}, 1.0, 3
        )[0].id
        == "Y"
    )


def test_an_insight_with_no_support_in_the_expanded_set_is_not_served() -> None:
    expanded = {"q1", "q2"}
    ranked = rank_insights(
        [
            cand("supported", pos={"q1"}),
            cand("elsewhere", pos={"q9"}),
            cand("only-conflict", pos={"q9"}, neg={"q1"}),
            cand("empty"),
        ],
        expanded,
        0.0,
        10,
    )
    assert [i.id for i in ranked] == ["supported"]


def test_expansion_depth_decides_which_insights_become_candidates() -> None:
    """An insight supported only by a query two hops away needs hops=2 (Eq. 3-4 feeding Eq. 7)."""
    b = Builder()
    b.add("near")  # q1
    b.keep()  # q2, links nothing
    b.event(similar=["q1"])  # q3 - q1
    b.event(similar=["q3"])  # q4 - q3
    b.store.apply(
        EditPlan(
            event_id="far",
            namespace=NS,
            query_id="q-far",
            query_text="far",
            status="resolved",
            trajectory_json="[]",
            similar=["q4"],
            retrieved=[],
            edits=[PlannedEdit(op="ADD", new_id="far", text="far away", text_key="k", decided_by="t")],
            archive_policy="evidence",
            archive_ratio=0.5,
            at=T0,
        )
    )  # q-far - q4, supports "far"
    cands = b.candidates()

    def served(hops: int) -> list[str]:
        expansion = expand_neighbours(["q3"], lambda ids: b.store.neighbours(NS, ids), hops)
        return [i.id for i in rank_insights(cands, expansion.expanded, 1.0, 5)]

    assert served(0) == []
    assert served(1) == ["near"]
    assert served(2) == ["far", "near"]  # both s = 1, the id decides


# -- Eq. 10: top-B, only r > 0 -----------------------------------------------------------------------


def test_only_a_positive_score_is_served() -> None:
    expanded = {"q1", "q2"}
    balanced = cand("balanced", pos={"q1"}, neg={"q2"})
    assert rank_insights([balanced], expanded, 1.0, 3) == []  # r = 1 − 1 = 0
    assert [i.score for i in rank_insights([balanced], expanded, 0.5, 3)] == [0.5]
    assert rank_insights([cand("worse", pos={"q1"}, neg={"q1", "q2"})], expanded, 0.6, 3) == []


def test_the_budget_is_a_maximum_and_takes_the_best() -> None:
    expanded = {"q1", "q2", "q3"}
    cands = [
        cand("one", pos={"q1"}),
        cand("three", pos=expanded),
        cand("two", pos={"q1", "q2"}),
        cand("held-back", pos={"q1"}, neg={"q2", "q3"}),
    ]
    assert [i.id for i in rank_insights(cands, expanded, 1.0, 10)] == ["three", "two", "one"]
    assert [i.id for i in rank_insights(cands, expanded, 1.0, 2)] == ["three", "two"]
    assert [i.id for i in rank_insights(cands, expanded, 1.0, 1)] == ["three"]


def test_ties_go_to_more_support_then_to_the_id_whatever_the_input_order() -> None:
    expanded = {"q1", "q2", "q3", "q4"}
    cands = [
        cand("b", pos={"q1", "q2"}),
        cand("a", pos={"q3", "q4"}),
        cand("c", pos={"q1", "q2", "q3"}, neg={"q4"}),
    ]  # r = 2 as well, with more support
    for order in (cands, cands[::-1], [cands[1], cands[2], cands[0]]):
        assert [i.id for i in rank_insights(order, expanded, 1.0, 3)] == ["c", "a", "b"]


QUERIES = [f"q{n}" for n in range(8)]
evidence = st.frozensets(st.sampled_from(QUERIES), max_size=6)
candidates = st.lists(
    st.builds(
        Candidate,
        id=st.sampled_from([f"i{n}" for n in range(12)]),
        text=st.just("t"),
        positive=evidence,
        negative=evidence,
        version=st.integers(0, 3),
        active=st.booleans(),
    ),
    max_size=12,
    unique_by=lambda c: c.id,
)


@hsettings(max_examples=200, deadline=None)
@given(
    cands=candidates,
    expanded=st.frozensets(st.sampled_from(QUERIES)),
    lam=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    budget=st.integers(1, 6),
    seed=st.randoms(),
)
def test_ranking_matches_the_equations_for_any_candidates(
    cands: list[Candidate], expanded: frozenset[str], lam: float, budget: int, seed: object
) -> None:
    """Top-B of {active, s > 0, r > 0} by (r, s) descending then id, independent of the input order."""

    def r(c: Candidate) -> float:
        return len(c.positive & expanded) - lam * len(c.negative & expanded)

    eligible = [c for c in cands if c.active and c.positive & expanded and r(c) > 0]
    expected = sorted(eligible, key=lambda c: (-r(c), -len(c.positive & expanded), c.id))[:budget]
    shuffled = list(cands)
    seed.shuffle(shuffled)  # type: ignore[attr-defined]
    ranked = rank_insights(shuffled, expanded, lam, budget)
    assert [i.id for i in ranked] == [c.id for c in expected]
    assert all(
        i.score == pytest.approx(r(c))
        and i.support == len(c.positive & expanded)
        and i.conflict == len(c.negative & expanded)
        for i, c in zip(ranked, expected, strict=True)
    )
