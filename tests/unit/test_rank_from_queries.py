"""The retrieval path ranks with ``rank_from_queries``: Eq. 7-10 summed from the query side, without
a candidate object per insight, from one value (``RankingInputs``) and calling nothing back, with the
text factor weighed only for the few that can be served. It must serve exactly what the reference,
``rank_insights(candidates_from_queries(...))``, serves — the functions the equation tests check
against the paper — on any evidence, inheritance, weights, scoring, λ, budget and text relevance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from evomem.core.retrieval import (
    RankingInputs,
    ServingInsight,
    TextInputs,
    candidates_from_queries,
    rank_from_queries,
    rank_insights,
)

QUERIES = [f"q{n}" for n in range(8)]
INSIGHTS = [f"i{n}" for n in range(10)]
# weights on a coarse grid, so that exact ties (on r, on similarity, on support) are common
WEIGHT = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, object]:
    queries = draw(st.lists(st.sampled_from(QUERIES), min_size=1, max_size=8, unique=True))
    weights = {q: draw(WEIGHT) for q in queries}
    supports = {q: tuple(draw(st.lists(st.sampled_from(INSIGHTS), max_size=5, unique=True))) for q in queries}
    harms = {q: tuple(draw(st.lists(st.sampled_from(INSIGHTS), max_size=3, unique=True))) for q in queries}
    named = {i for ids in supports.values() for i in ids}
    active = {i for i in named if draw(st.booleans())}
    heirs: dict[str, tuple[str, ...]] = {}
    for heir in draw(st.lists(st.sampled_from(INSIGHTS), max_size=3, unique=True)):
        inherited = tuple(draw(st.lists(st.sampled_from(INSIGHTS), min_size=1, max_size=3, unique=True)))
        if heir not in inherited and not named.isdisjoint(inherited):
            heirs[heir] = inherited
    relevance = {i: draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])) for i in INSIGHTS}
    finer = {i: draw(st.sampled_from([0.0, 0.05, 0.3, 0.8])) for i in INSIGHTS}
    # an upper bound of each one's relevance, exact or loose, or none known
    slack = {i: draw(st.sampled_from([None, 0.0, 0.05, 0.6])) for i in INSIGHTS}
    ceiling = {i: min(1.0, relevance[i] + d) for i, d in slack.items() if d is not None}
    return {
        "weights": weights,
        "supports": supports,
        "harms": harms,
        "active": active,
        "heirs": heirs,
        "relevance": relevance,
        "refine": draw(st.sampled_from([None, finer])),
        "ceiling": draw(st.sampled_from([None, ceiling])),
        "lam": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
        "budget": draw(st.integers(1, 5)),
        "scoring": draw(st.sampled_from(["weighted", "count"])),
        "power": draw(st.sampled_from([1.0, 3.0])),
        "relevance_power": draw(st.sampled_from([0.0, 1.0, 2.0])),
    }


def reference(w: Mapping[str, object]) -> list[tuple[str, float, int, int, float]]:
    supports: Mapping[str, Sequence[str]] = w["supports"]  # type: ignore[assignment]
    active: set[str] = w["active"]  # type: ignore[assignment]
    heirs: Mapping[str, tuple[str, ...]] = w["heirs"]  # type: ignore[assignment]
    rel: Mapping[str, float] = w["relevance"]  # type: ignore[assignment]
    weights: Mapping[str, float] = w["weights"]  # type: ignore[assignment]
    # what the index serves: each active named insight and each active heir, with what it inherits
    serving = [ServingInsight(i, f"text {i}", 0, heirs.get(i, ())) for i in sorted(active | set(heirs))]
    candidates = candidates_from_queries(supports, w["harms"], serving)  # type: ignore[arg-type]
    ranked = rank_insights(
        candidates,
        set(weights),
        w["lam"],  # type: ignore[arg-type]
        w["budget"],  # type: ignore[arg-type]
        weights=weights,
        scoring=w["scoring"],  # type: ignore[arg-type]
        power=w["power"],  # type: ignore[arg-type]
        relevance=lambda c: rel[c.id],
        relevance_power=w["relevance_power"],  # type: ignore[arg-type]
        refine=(lambda c: finer[c.id]) if (finer := w["refine"]) is not None else None,  # type: ignore[index]
    )
    return [(i.id, i.score, i.support, i.conflict, i.similarity) for i in ranked]


class Asked(dict[str, float]):
    """Relevances by id that note which ids the ranking looked up."""

    def __init__(self, values: Mapping[str, float], asked: list[str]) -> None:
        super().__init__(values)
        self.asked = asked

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.append(key)
        return super().get(key, default)


def ranking(
    supports: Mapping[str, Sequence[str]],
    harms: Mapping[str, Sequence[str]],
    active: set[str],
    heirs: Mapping[str, tuple[str, ...]],
    weights: Mapping[str, float],
    lam: float,
    budget: int,
    **options: Any,
) -> RankingInputs:
    text = options.pop("text", None)
    return RankingInputs(supports, harms, active, heirs, weights, lam, budget, text=text, **options)


def fast(w: Mapping[str, object]) -> tuple[list[tuple[str, float, int, int, float]], int, list[str]]:
    rel: Mapping[str, float] = w["relevance"]  # type: ignore[assignment]
    asked: list[str] = []
    text = TextInputs(relevance=Asked(rel, asked), refined=w["refine"], ceiling=w["ceiling"])  # type: ignore[arg-type]
    top, n = rank_from_queries(
        ranking(
            w["supports"],  # type: ignore[arg-type]
            w["harms"],  # type: ignore[arg-type]
            w["active"],  # type: ignore[arg-type]
            w["heirs"],  # type: ignore[arg-type]
            w["weights"],  # type: ignore[arg-type]
            w["lam"],  # type: ignore[arg-type]
            w["budget"],  # type: ignore[arg-type]
            scoring=w["scoring"],
            power=w["power"],
            relevance_power=w["relevance_power"],
            text=text,
        )
    )
    return [(r.id, r.score, r.support, r.conflict, r.similarity) for r in top], n, asked


@hsettings(max_examples=400, deadline=None)
@given(worlds())
def test_the_query_side_ranking_serves_what_the_reference_serves(w: dict[str, object]) -> None:
    expected = reference(w)
    got, n, _ = fast(w)
    assert [g[0] for g in got] == [e[0] for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert g[1] == pytest.approx(e[1], rel=1e-12, abs=1e-12)
        assert g[2:4] == e[2:4]
        assert g[4] == pytest.approx(e[4])
    serving = [ServingInsight(i, "", 0, w["heirs"].get(i, ())) for i in w["active"] | set(w["heirs"])]  # type: ignore[attr-defined, operator]
    assert n == len(candidates_from_queries(w["supports"], w["harms"], serving))  # type: ignore[arg-type]


def test_relevance_is_asked_for_the_few_that_can_still_be_served() -> None:
    """Forty candidates in descending support, all fully relevant: the top two are settled by the
    third, so no text beyond the first batch is read."""
    supports = {f"q{n}": tuple(f"i{m}" for m in range(n, 40)) for n in range(40)}
    weights = dict.fromkeys(supports, 1.0)
    active = {f"i{m}" for m in range(40)}
    asked: list[str] = []
    text = TextInputs(relevance=Asked(dict.fromkeys(active, 1.0), asked))
    top, n = rank_from_queries(
        ranking(supports, {}, active, {}, weights, 1.0, 2, scoring="weighted", relevance_power=1.0, text=text)
    )
    assert [r.id for r in top] == ["i39", "i38"] and n == 40
    assert 0 < len(asked) <= 8


@pytest.mark.parametrize("seed", range(30))
def test_a_finer_relevance_ranks_again_the_first_that_the_first_relevance_finds(seed: int) -> None:
    import random

    from evomem.core.retrieval import RELEVANCE_FLOOR, refine_depth

    rng = random.Random(seed)
    weights = {f"q{n}": rng.choice([0.3, 0.6, 0.9, 1.0]) for n in range(12)}
    ids = [f"i{n}" for n in range(30)]
    supports = {q: tuple(rng.sample(ids, rng.randint(1, 6))) for q in weights}
    first = {i: rng.choice([0.05, 0.2, 0.5, 1.0]) for i in ids}
    finer = {i: rng.choice([0.0, 0.1, 0.4, 0.9]) for i in ids}
    budget = rng.randint(1, 4)
    plain, _ = rank_from_queries(
        ranking(supports, {}, set(ids), {}, weights, 1.0, len(ids), scoring="weighted", power=3.0)
    )
    raw = {r.id: r for r in plain}

    def order(rel: dict[str, float]) -> Any:
        return lambda i: (
            -raw[i].score * max(rel[i], RELEVANCE_FLOOR) ** 2,
            -raw[i].similarity,
            -raw[i].support,
            i,
        )

    shortlist = sorted(raw, key=order(first))[: refine_depth(budget)]
    expected = sorted(shortlist, key=order(finer))[:budget]
    top, _ = rank_from_queries(
        ranking(
            supports, {}, set(ids), {}, weights, 1.0, budget, scoring="weighted", power=3.0,
            relevance_power=2.0, text=TextInputs(relevance=first, refined=finer),
        )
    )  # fmt: skip
    assert [r.id for r in top] == expected


def test_a_candidate_its_ceiling_shows_cannot_reach_the_top_is_not_asked_about() -> None:
    """Forty candidates of nearly the same score, the first two the most relevant: a bound of 0.1 on
    the others' relevance settles the top two without asking about any past the first batch;
    without it, every one is asked about."""
    supports = {f"q{m}": (f"i{m}",) for m in range(40)}
    weights = {f"q{m}": 1.0 - m / 1000 for m in range(40)}
    active = {f"i{m}" for m in range(40)}
    rel = {f"i{m}": 0.5 if m < 2 else 0.1 for m in range(40)}

    def ranked(ceiling: float | None) -> tuple[list[str], list[str]]:
        asked: list[str] = []
        cap = None if ceiling is None else {i: max(rel[i], ceiling) for i in rel}
        top, _ = rank_from_queries(
            ranking(
                supports, {}, active, {}, weights, 1.0, 2, scoring="weighted", relevance_power=2.0,
                text=TextInputs(relevance=Asked(rel, asked), ceiling=cap),
            )
        )  # fmt: skip
        return [r.id for r in top], asked

    plain, asked_plain = ranked(None)
    bounded, asked_bounded = ranked(0.1)
    assert plain == bounded == ["i0", "i1"]
    assert len(asked_bounded) == 8 and len(asked_plain) == 40


@pytest.mark.parametrize("seed", range(20))
def test_the_text_factor_from_word_sets_is_the_cosine_and_the_idf_cosine_of_those_sets(seed: int) -> None:
    """Given the word sets (and the word weights), the ranking weighs each candidate by
    ``text_relevance`` of its set and refines by ``idf_relevance``: the same ranking as with those
    numbers given outright; and the bound from how many task words some insight holds changes
    nothing."""
    import random

    from evomem.core.retrieval import SquaredIdf, idf_relevance, text_relevance

    rng = random.Random(seed)
    weights = {f"q{n}": rng.choice([0.3, 0.6, 0.9, 1.0]) for n in range(12)}
    ids = [f"i{n}" for n in range(30)]
    supports = {q: tuple(rng.sample(ids, rng.randint(1, 6))) for q in weights}
    task = frozenset(rng.sample(range(40), 8))
    words = {i: frozenset(rng.sample(range(40), rng.randint(0, 10))) for i in ids}
    counts = {f: rng.randint(0, 30) for f in range(40)}
    squared = SquaredIdf(30, counts)  # each weight computed when first looked up
    every = {f: squared[f] for f in range(40)}
    norm2 = sum(every[f] for f in task)
    first = {i: text_relevance(task, words[i]) for i in ids}
    finer = {i: idf_relevance(task, words[i], every, norm2) for i in ids}
    held = sum(1 for f in task if counts[f] > 0)
    budget = rng.randint(1, 4)

    def served(text: TextInputs) -> list[str]:
        top, _ = rank_from_queries(
            ranking(supports, {}, set(ids), {}, weights, 1.0, budget, scoring="weighted", power=3.0,
                    relevance_power=2.0, text=text)
        )  # fmt: skip
        return [r.id for r in top]

    expected = served(TextInputs(relevance=first, refined=finer))
    assert served(TextInputs(task, words, SquaredIdf(30, counts))) == expected
    assert served(TextInputs(task, words, SquaredIdf(30, counts), held)) == expected
    assert served(TextInputs(task, words, every, held)) == expected
    assert served(TextInputs(task, words)) == served(TextInputs(relevance=first))
