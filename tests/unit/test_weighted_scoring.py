"""Similarity-weighted utility (beyond the paper) and its neighbour weights, as pure functions.

``scoring="count"`` is Eq. 8-9 exactly; ``weighted`` counts each supporting (and conflicting) query
by its similarity w(q) to the current one, a query reached through the query graph by the
similarity of the one that led to it times the edge's. Ties go to the more similar.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest

from evomem.core.retrieval import Candidate, expand_neighbours, rank_insights


def cand(i: str, pos: Collection[str] = (), neg: Collection[str] = ()) -> Candidate:
    return Candidate(i, f"text of {i}", frozenset(pos), frozenset(neg))


def graph(edges: Mapping[str, Mapping[str, float]]) -> object:
    def neighbours_of(ids: Collection[str]) -> Mapping[str, Mapping[str, float]]:
        return {q: dict(edges.get(q, {})) for q in ids}

    return neighbours_of


# the same text again (1.0) against two queries that share only a template word (0.25 each)
SAME, LOOK_ALIKES = {"same": 1.0}, {"alike1": 0.25, "alike2": 0.25}
WEIGHTS = {**SAME, **LOOK_ALIKES}


def test_a_supporting_query_with_the_same_text_outweighs_two_look_alikes() -> None:
    mine, popular = cand("mine", ["same"]), cand("popular", ["alike1", "alike2"])
    expanded = set(WEIGHTS)
    weighted = rank_insights([popular, mine], expanded, 1.0, 3, weights=WEIGHTS, scoring="weighted")
    assert [(i.id, i.score, i.support, i.similarity) for i in weighted] == [
        ("mine", 1.0, 1, 1.0),
        ("popular", 0.5, 2, 0.25),
    ]
    counted = rank_insights([popular, mine], expanded, 1.0, 3, weights=WEIGHTS, scoring="count")
    assert [(i.id, i.score, i.support) for i in counted] == [("popular", 2.0, 2), ("mine", 1.0, 1)]


def test_conflict_is_weighted_too_so_a_failure_on_the_same_task_weighs_most() -> None:
    # helped twice on look-alikes, harmed once on this very task: 0.25 + 0.25 − 1.0 ≤ 0, held back
    harmed_here = cand("h", ["alike1", "alike2"], ["same"])
    assert rank_insights([harmed_here], set(WEIGHTS), 1.0, 3, weights=WEIGHTS, scoring="weighted") == []
    # counted, the same insight is served: 2 − 1 = 1
    assert [i.score for i in rank_insights([harmed_here], set(WEIGHTS), 1.0, 3)] == [1.0]
    # harmed on a look-alike only: served, its conflict counted as it is
    [served] = rank_insights(
        [cand("h", ["same"], ["alike1"])], set(WEIGHTS), 1.0, 3, weights=WEIGHTS, scoring="weighted"
    )
    assert (served.score, served.support, served.conflict) == (0.75, 1, 1)


def test_ties_go_to_the_more_similar_best_supporting_query_under_either_scoring() -> None:
    near, far = cand("z-near", ["same"]), cand("a-far", ["alike1"])
    counted = rank_insights([far, near], set(WEIGHTS), 1.0, 3, weights=WEIGHTS, scoring="count")
    assert [i.id for i in counted] == ["z-near", "a-far"]  # s ties at 1: the more similar, not the id
    # weighted: 1.0 from one query of the same text ties 0.5 + 0.5 from two halfway-similar ones
    halves = {"same": 1.0, "alike1": 0.5, "alike2": 0.5}
    two = cand("a-two", ["alike1", "alike2"])
    weighted = rank_insights([two, near], set(halves), 1.0, 3, weights=halves, scoring="weighted")
    assert [(i.id, i.score) for i in weighted] == [("z-near", 1.0), ("a-two", 1.0)]
    # without similarity the paper's order stands: more support, then the id
    assert [i.id for i in rank_insights([near, far], set(WEIGHTS), 1.0, 3)] == ["a-far", "z-near"]


def test_weighted_scoring_needs_the_weights() -> None:
    with pytest.raises(ValueError, match="weight"):
        rank_insights([cand("a", ["same"])], {"same"}, 1.0, 3, scoring="weighted")


def test_a_neighbour_weighs_the_similarity_that_led_to_it_times_the_edge() -> None:
    edges = {"s1": {"n1": 0.5, "n2": 0.9}, "s2": {"n2": 0.4}, "n1": {"far": 1.0}}
    one = expand_neighbours(["s1", "s2"], graph(edges), 1, similarity=[0.8, 0.6])  # type: ignore[arg-type]
    assert one.expanded == {"s1", "s2", "n1", "n2"}
    assert one.weights == pytest.approx({"s1": 0.8, "s2": 0.6, "n1": 0.4, "n2": 0.72})  # max over parents
    two = expand_neighbours(["s1", "s2"], graph(edges), 2, similarity=[0.8, 0.6])  # type: ignore[arg-type]
    assert two.weights["far"] == pytest.approx(0.4)
    assert all(two.weights[q] <= max(0.8, 0.6) for q in two.expanded)  # never above what led there


def test_a_similar_query_keeps_its_own_similarity_even_when_it_is_also_a_neighbour() -> None:
    edges = {"s1": {"s2": 1.0}}
    exp = expand_neighbours(["s1", "s2"], graph(edges), 1, similarity=[0.9, 0.3])  # type: ignore[arg-type]
    assert exp.weights == {"s1": 0.9, "s2": 0.3}


def test_plain_neighbour_sets_weigh_as_the_query_that_led_to_them() -> None:
    exp = expand_neighbours(["s"], lambda ids: {q: {"n"} for q in ids}, 1, similarity=[0.7])
    assert exp.weights == {"s": 0.7, "n": 0.7}
