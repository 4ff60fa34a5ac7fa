"""Utility-aware retrieval, paper §3.1 and §3.3, as pure functions.

Eq. 2 (top-k similar queries) is the index's job; this module holds what follows it:
Eq. 3-4 neighbour expansion, Eq. 7 candidate rule, Eq. 8-9 support and conflict, Eq. 10 top-B.

Evidence is read from the query side: each query of Q̃ˢ knows the insights it supports and harms,
and an insight that revised or absorbed others is supported by whatever supported them
(``inherits``). ``candidates_from_queries`` turns that into the candidates of Eq. 7 carrying
Ω⁺ ∩ Q̃ˢ and Ω⁻ ∩ Q̃ˢ, which is all Eq. 8-9 look at, so the work grows with |Q̃ˢ|, never with |Ω⁺|.
``rank_insights`` over those candidates is the reference the equation tests hold to the paper;
retrieval ranks with ``rank_from_queries``, the same Eq. 7-10 summed from the query side in one pass,
without a candidate object per insight, from one value the retriever gathers first
(``RankingInputs``: the evidence of Q̃ˢ, the weights, the candidates' word sets and word weights):
it calls nothing back, and weighs the text of the few candidates that can still be served only.

Two scorings. ``count`` is Eq. 8-9 exactly: s = |Ω⁺ ∩ Q̃ˢ|, c = |Ω⁻ ∩ Q̃ˢ|. ``weighted`` counts each
query by its similarity w(q) to the current one (Eq. 2's cosine; a neighbour reached through the
query graph gets the similarity of the query that led to it times the edge's own, so never more):
r = s_w − λ·c_w, so a supporting query with the very same text outweighs one that only shares a
template word. Either way, ties go to the insight whose best supporting query is the more similar.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evomem.results import ScoredInsight

Scoring = Literal["weighted", "count"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """An insight as ranking sees it: its evidence (the whole sets, or their part inside Q̃ˢ)."""

    id: str
    text: str
    positive: Collection[str]
    negative: Collection[str]
    version: int = 0
    active: bool = True


@dataclass(frozen=True, slots=True)
class Expansion:
    """Q̃ˢ: the similar queries and the neighbours the query graph adds to them, with the weight
    w(q) of each (its similarity to the current query; 1.0 where none was given)."""

    similar: tuple[str, ...]
    expanded: frozenset[str] = field(default_factory=frozenset)
    weights: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServingInsight:
    """An active insight as the read model serves it, with the insights it took Ω⁺ over from."""

    id: str
    text: str
    version: int = 0
    inherits: tuple[str, ...] = ()


Neighbours = Mapping[str, Iterable[str]] | Mapping[str, Mapping[str, float]]


def expand_neighbours(
    similar: Sequence[str],
    neighbours_of: Callable[[Collection[str]], Neighbours],
    hops: int = 1,
    similarity: Sequence[float] | None = None,
) -> Expansion:
    """Q̃ˢ = Qˢ ∪ ΔQ (Eq. 3-4), repeated ``hops`` times; ``hops=0`` keeps Qˢ alone.

    ``neighbours_of`` fetches the 1-hop neighbours of a set of query ids in one round trip, as ids
    or as {neighbour: edge similarity}. ``similarity`` holds Eq. 2's cosine of each similar query.
    A query reached through the graph weighs the best w(parent) · edge of the hop that reached it.
    """
    weights: dict[str, float] = {}
    for n, q in enumerate(similar):
        w = 1.0 if similarity is None else float(similarity[n])
        weights[q] = max(w, weights.get(q, 0.0))
    frontier: set[str] = set(weights)
    for _ in range(hops):
        if not frontier:
            break
        found = neighbours_of(frontier)
        reached: dict[str, float] = {}
        for parent, nbrs in found.items():
            base = weights.get(parent, 0.0)
            edges = nbrs.items() if isinstance(nbrs, Mapping) else ((q, 1.0) for q in nbrs)
            for q, edge in edges:
                if q not in weights:
                    w = base * float(edge)
                    if w >= reached.get(q, -1.0):
                        reached[q] = w
        weights.update(reached)
        frontier = set(reached)
    return Expansion(similar=tuple(similar), expanded=frozenset(weights), weights=weights)


def with_queries(expansion: Expansion, found: Mapping[str, float]) -> Expansion:
    """Q̃ˢ with more queries found outside Eq. 2 (the evidence search), each weighing its similarity
    (a query already in Q̃ˢ keeps the larger weight); they join ``similar``, unexpanded."""
    if not found:
        return expansion
    weights = dict(expansion.weights)
    for q, w in found.items():
        weights[q] = max(float(w), weights.get(q, 0.0))
    similar = (*expansion.similar, *(q for q in found if q not in expansion.similar))
    return Expansion(similar=similar, expanded=frozenset(weights), weights=weights)


def candidates_from_queries(
    supports: Mapping[str, Iterable[str]],
    harms: Mapping[str, Iterable[str]],
    serving: Iterable[ServingInsight],
) -> list[Candidate]:
    """Eq. 7 from the query side: each active insight with Ω⁺ ∩ Q̃ˢ ≠ ∅, carrying Ω⁺ ∩ Q̃ˢ and Ω⁻ ∩ Q̃ˢ.

    ``supports[q]`` / ``harms[q]``: the insights each query of Q̃ˢ is positive / negative evidence
    of; ``serving``: the active insights that one of those ids names, directly or by inheritance
    (its own positive evidence plus that of every insight it revised or absorbed).
    """
    supported_by: dict[str, set[str]] = {}
    for q, ids in supports.items():
        for i in ids:
            supported_by.setdefault(i, set()).add(q)
    harmed_by: dict[str, set[str]] = {}
    for q, ids in harms.items():
        for i in ids:
            harmed_by.setdefault(i, set()).add(q)
    out = []
    for ins in serving:
        positive: set[str] = set(supported_by.get(ins.id, ()))
        for source in ins.inherits:
            positive |= supported_by.get(source, set())
        if positive:
            negative = frozenset(harmed_by.get(ins.id, ()))
            out.append(Candidate(ins.id, ins.text, frozenset(positive), negative, ins.version, True))
    return out


@dataclass(frozen=True, slots=True)
class Ranked:
    """A candidate ``rank_from_queries`` serves, before its text and version are read."""

    id: str
    score: float
    support: int
    conflict: int
    similarity: float


@dataclass(frozen=True, slots=True)
class TextInputs:
    """What the text factor of the weighted score is computed from, gathered by the retriever before
    ranking: the task's word 1-2-gram set and each candidate's (``words``), and for
    ``EVOMEM_RELEVANCE=idf`` the squared IDF weight of their words (``squared``: every feature of
    the task and of the candidates' sets; one left out weighs 0). ``held``: how many of the task's
    words some insight of the namespace holds, which bounds each candidate's cosine by its set's
    size alone (``word_ceiling``), so that a candidate shown unable to reach the top is never
    weighed. A number given outright takes the place of the one computed from words: ``relevance``
    (a dense embedder's calibrated cosine, say), ``refined`` (the finer one), ``ceiling`` (a bound
    of ``relevance``)."""

    task: frozenset[int] = frozenset()
    words: Mapping[str, Collection[int]] = field(default_factory=dict)
    squared: Mapping[int, float] | None = None
    held: int | None = None
    relevance: Mapping[str, float] | None = None
    refined: Mapping[str, float] | None = None
    ceiling: Mapping[str, float] | None = None


@dataclass(frozen=True, slots=True)
class RankingInputs:
    """Every number Eq. 7-10 rank with, in one value: ``supports[q]`` / ``harms[q]``, the insights
    each query of Q̃ˢ is positive / negative evidence of; ``active``, the ids named by ``supports``
    that are active insights; ``heirs``, the active insights that inherit from a named id, with what
    they inherit (each such insight is supported by the union of its own supporters and theirs);
    ``weights``, w(q) of every query of Q̃ˢ; λ, B, the scoring, its similarity power, and the text
    factor's power and inputs (``text``: None, no text factor)."""

    supports: Mapping[str, Iterable[str]]
    harms: Mapping[str, Iterable[str]]
    active: Collection[str]
    heirs: Mapping[str, Sequence[str]]
    weights: Mapping[str, float]
    lam: float
    budget: int
    scoring: Scoring = "count"
    power: float = 1.0
    relevance_power: float = 0.0
    text: TextInputs | None = None


def rank_from_queries(inputs: RankingInputs) -> tuple[list[Ranked], int]:
    """``rank_insights(candidates_from_queries(...))`` without building a candidate per insight, and
    (the candidates, how many there were). Pure: it reads ``inputs`` and nothing else.

    The same Eq. 7-10, summed from the query side in one pass over the evidence of Q̃ˢ, so the work
    is the number of (query, insight) pairs of Q̃ˢ. With a text factor, the first relevance is
    ``text.relevance`` or the cosine of the word sets (``text_relevance``), computed only for the
    few candidates that can still reach the top (``_by_relevance``); with ``text.refined`` or
    ``text.squared``, the ``refine_depth(budget)`` candidates it ranks first are ranked again by
    the finer one (``_refined``: ``idf_relevance``); ``text.ceiling``, or the bound ``held`` gives,
    passes over a candidate that cannot reach the top unweighed (the ranking is the same).
    """
    supports, harms, weights, power = inputs.supports, inputs.harms, inputs.weights, inputs.power
    heirs, lam, budget, scoring = inputs.heirs, inputs.lam, inputs.budget, inputs.scoring
    # per insight: [s, Σ w^p over Ω⁺ ∩ Q̃ˢ, best w]; a query names an insight at most once
    pos: dict[str, list[float]] = {}
    for q, ids in supports.items():
        w = weights.get(q, 0.0)
        wp = w**power
        for i in ids:
            a = pos.get(i)
            if a is None:
                pos[i] = [1.0, wp, w]
            else:
                a[0] += 1.0
                a[1] += wp
                if w > a[2]:
                    a[2] = w
    neg: dict[str, list[float]] = {}
    for q, ids in harms.items():
        wp = weights.get(q, 0.0) ** power
        for i in ids:
            b = neg.get(i)
            if b is None:
                neg[i] = [1.0, wp]
            else:
                b[0] += 1.0
                b[1] += wp
    if heirs:  # an heir's Ω⁺ ∩ Q̃ˢ is a union of sets: a query supporting it and a source counts once
        sources = {i for heir, inherited in heirs.items() for i in (heir, *inherited)}
        supported_by: dict[str, set[str]] = {}
        for q, ids in supports.items():
            for i in ids:
                if i in sources:
                    supported_by.setdefault(i, set()).add(q)
        for heir, inherited in heirs.items():
            by = set(supported_by.get(heir, ()))
            for source in inherited:
                by |= supported_by.get(source, set())
            if by:
                ws = [weights.get(q, 0.0) for q in by]
                pos[heir] = [float(len(ws)), sum(w**power for w in ws), max(ws)]
    serving = set(inputs.active).union(heirs)
    scored: list[tuple[float, float, float, str, float]] = []
    for i in serving:
        a = pos.get(i)
        if a is None:
            continue
        s, s_w, sim = a
        b = neg.get(i)
        c, c_w = (b[0], b[1]) if b is not None else (0.0, 0.0)
        r = conflict_penalized_score(s_w, c_w, lam) if scoring == "weighted" else s - lam * c
        if r > 0:
            scored.append((-r, -sim, -s, i, c))
    candidates = sum(1 for i in serving if i in pos)
    scored.sort()
    text = inputs.text
    if scoring == "weighted" and text is not None and inputs.relevance_power > 0.0:
        scored = _with_text(scored, text, budget, inputs.relevance_power)
    top = [
        Ranked(i, -neg_r, int(-neg_s), int(c), -neg_sim) for neg_r, neg_sim, neg_s, i, c in scored[:budget]
    ]
    return top, candidates


def _with_text(
    scored: list[tuple[float, float, float, str, float]], text: TextInputs, budget: int, power: float
) -> list[tuple[Any, ...]]:
    """``scored`` (ascending) ranked with the text factor of ``text``, the first B or, when a finer
    relevance is known, the ``refine_depth(budget)`` first ranked again by it."""
    task, words = text.task, text.words
    given = text.relevance
    refine = text.refined is not None or text.squared is not None

    def first(items: Sequence[tuple[Any, ...]]) -> dict[str, float]:
        if given is not None:
            return {item[3]: given.get(item[3], 0.0) for item in items}
        return {item[3]: text_relevance(task, words.get(item[3], ())) for item in items}

    bound = text.ceiling
    if bound is None and text.held is not None and given is None:
        bound = word_ceiling(task, text.held, words)
    raw = {item[3]: -item[0] for item in scored} if refine else {}
    ranked = _by_relevance(
        scored,
        refine_depth(budget) if refine else budget,
        first,
        power,
        batch=max(2 * budget, 8),
        grow=2,
        ceiling=(lambda items: {item[3]: c for item in items if (c := cap.get(item[3])) is not None})
        if (cap := bound) is not None
        else None,
    )
    if not refine:
        return ranked
    ids = [item[3] for item in ranked]
    finer = text.refined
    if finer is None:
        squared = text.squared
        assert squared is not None
        if isinstance(squared, SquaredIdf):  # weighed now, the words of the few refined
            for f in task:
                squared[f]
            for i in ids:
                for f in words.get(i, ()):
                    squared[f]
        task_norm2 = sum(squared.get(f, 0.0) for f in task)
        finer = {i: idf_relevance(task, words.get(i, ()), squared, task_norm2) for i in ids}
    return _refined(ranked, raw, finer, power)


class _SizeBound(Mapping[str, float]):
    """``word_ceiling``: each candidate's bound, computed when asked, from its set's size alone."""

    __slots__ = ("_by_size", "_held", "_size", "_words")

    def __init__(self, size: int, held: int, words: Mapping[str, Collection[int]]) -> None:
        self._size, self._held, self._words = size, held, words
        self._by_size: dict[int, float] = {0: 0.0}

    def __getitem__(self, key: str) -> float:
        b = self.get(key)
        if b is None:
            raise KeyError(key)
        return float(b)

    def get(self, key: str, default: Any = None) -> Any:
        words = self._words.get(key)
        if words is None:
            return default
        m = len(words)
        b = self._by_size.get(m)
        if b is None:
            b = self._by_size[m] = min(self._held, m) / math.sqrt(self._size * m)
        return b

    def __iter__(self) -> Iterator[str]:
        return iter(self._words)

    def __len__(self) -> int:
        return len(self._words)


class SquaredIdf(dict[int, float]):
    """The squared IDF weight of each word (``idf``) from how many of ``total`` texts hold it
    (``counts``; a word it lacks is held by none), computed when first looked up (``squared[f]``)
    and kept: a caller may keep one across rankings while the counts stand. ``get`` answers for
    the words looked up so far."""

    __slots__ = ("counts", "total")

    def __init__(self, total: int, counts: Mapping[int, int]) -> None:
        super().__init__()
        self.total, self.counts = total, counts

    def __missing__(self, key: int) -> float:
        w = self[key] = idf(self.counts.get(key, 0), self.total) ** 2
        return w


def word_ceiling(
    task: Collection[int], held: int, words: Mapping[str, Collection[int]]
) -> Mapping[str, float]:
    """A bound on the cosine of each candidate's word set with the task's (``text_relevance``), from
    the set's size and ``held``, how many of the task's words some insight of the namespace holds:
    min(held, |I|) / √(|T|·|I|) (a candidate whose set is not known has none)."""
    if not task:
        return {}
    return _SizeBound(len(task), held, words)


def support(candidate: Candidate, expanded: Collection[str]) -> int:
    """s = |Ω⁺ ∩ Q̃ˢ| (Eq. 9)."""
    return _overlap(candidate.positive, expanded)


def conflict(candidate: Candidate, expanded: Collection[str]) -> int:
    """c = |Ω⁻ ∩ Q̃ˢ| (Eq. 9)."""
    return _overlap(candidate.negative, expanded)


def conflict_penalized_score(s: float, c: float, lam: float) -> float:
    """r = s − λc (Eq. 8)."""
    return s - lam * c


def rank_insights(
    candidates: Iterable[Candidate],
    expanded: Collection[str],
    lam: float,
    budget: int,
    *,
    weights: Mapping[str, float] | None = None,
    scoring: Scoring = "count",
    power: float = 1.0,
    relevance: Callable[[Candidate], float] | None = None,
    relevance_power: float = 0.0,
    refine: Callable[[Candidate], float] | None = None,
) -> list[ScoredInsight]:
    """Top-B of the active candidates supported in Q̃ˢ (Eq. 7 and 10).

    Only r > 0 is served: an insight whose conflict outweighs its support here is held back, so B
    is a maximum. Ties go to the more similar best supporting query (with ``weights``), then to more
    support, then to the id, so the order is deterministic. ``scoring="weighted"`` needs ``weights``
    and counts each query by its weight raised to ``power`` (above 1, near-identical tasks count for
    more against many loosely similar ones); with ``relevance`` (weighted only), r is multiplied by
    max(relevance(insight), ``RELEVANCE_FLOOR``) to ``relevance_power``; with ``refine`` too, the
    ``refine_depth(budget)`` insights ranked first so are ranked again with it in its place.
    """
    expanded = expanded if isinstance(expanded, set | frozenset) else frozenset(expanded)
    if scoring == "weighted" and weights is None:
        raise ValueError("weighted scoring needs the weight of every query of Q̃ˢ")
    # (-r, -sim, -s, id, arrival) sorts exactly as the stable sort on (-r, -sim, -s, id) would;
    # the served ScoredInsight objects are only built for the top B.
    scored: list[tuple[float, float, int, str, int, int, Candidate]] = []
    for n, cand in enumerate(candidates):
        if not cand.active:
            continue
        if weights is None:
            s = _overlap(cand.positive, expanded)  # support, Eq. 9
            if s == 0:
                continue
            c = _overlap(cand.negative, expanded)  # conflict, Eq. 9
            r = conflict_penalized_score(s, c, lam)  # Eq. 8
            sim = 0.0
        else:
            pos = [weights.get(q, 0.0) for q in cand.positive if q in expanded]
            s = len(pos)
            if s == 0:
                continue
            neg = [weights.get(q, 0.0) for q in cand.negative if q in expanded]
            c = len(neg)
            sim = max(pos)
            if scoring == "weighted":
                r = conflict_penalized_score(sum(w**power for w in pos), sum(w**power for w in neg), lam)
            else:
                r = conflict_penalized_score(s, c, lam)
        if r > 0:
            scored.append((-r, -sim, -s, cand.id, n, c, cand))
    scored.sort()
    if scoring == "weighted" and relevance is not None and relevance_power > 0.0:
        rel_of = relevance
        raw = {item[3]: -item[0] for item in scored}
        depth = refine_depth(budget) if refine is not None else budget
        scored = _by_relevance(
            scored, depth, lambda items: {item[3]: rel_of(item[6]) for item in items}, relevance_power
        )
        if refine is not None:
            finer = refine
            scored = _refined(scored, raw, {item[3]: finer(item[6]) for item in scored}, relevance_power)
    return [
        ScoredInsight(cand.id, cand.text, -neg_r, -neg_s, c, cand.version, -neg_sim)
        for neg_r, neg_sim, neg_s, _, _, c, cand in scored[:budget]
    ]


#: The least text relevance an insight is ranked with: a generic insight is discounted, never dropped.
RELEVANCE_FLOOR = 0.02


def refine_depth(budget: int) -> int:
    """How many of the insights a first relevance ranks first a finer one ranks again."""
    return max(2 * budget, 8)


def _refined(
    scored: Sequence[tuple[Any, ...]], raw: Mapping[str, float], finer: Mapping[str, float], power: float
) -> list[tuple[Any, ...]]:
    """``scored`` (tuples (−r · rel^power, ..., id at [3], ...)) ranked again with ``finer`` in place
    of the first relevance: −raw r · max(finer, floor)^power, ties as before."""
    out = [
        (-raw[item[3]] * max(finer.get(item[3], 0.0), RELEVANCE_FLOOR) ** power, *item[1:]) for item in scored
    ]
    out.sort()
    return out


def _by_relevance(
    scored: Sequence[tuple[Any, ...]],
    budget: int,
    relevance: Callable[[Sequence[tuple[Any, ...]]], Mapping[str, float]],
    power: float,
    *,
    batch: int = 1,
    grow: int = 1,
    ceiling: Callable[[Sequence[tuple[Any, ...]]], Mapping[str, float]] | None = None,
) -> list[tuple[Any, ...]]:
    """The top B after multiplying each score r by max(relevance, floor)^power. ``scored``: tuples
    (−r, ..., id at [3], ...) in ascending order (descending r). The factor is at most 1, so once r
    falls below the B-th best product no later candidate can reach the top B: relevance is asked
    for the few candidates that can still be served, ``batch`` of them at a time (the batch
    multiplied by ``grow`` each time; 1 and 1: one at a time, never one past the stop). With
    ``ceiling`` (an upper bound of each one's relevance, where known), a candidate whose r times its
    bound's factor is below the B-th best product is passed over unasked: the B-th best only grows."""
    out: list[tuple[Any, ...]] = []
    best: list[float] = []  # the B best products so far, a min-heap: best[0] is the B-th
    n = 0
    while n < len(scored):
        chunk = scored[n : n + batch]
        step = len(chunk)
        if len(best) >= budget and -chunk[0][0] < best[0]:
            break
        if ceiling is not None and len(best) >= budget:
            bound, least = ceiling(chunk), best[0]
            chunk = [
                item
                for item in chunk
                if (b := bound.get(item[3])) is None or -item[0] * max(b, RELEVANCE_FLOOR) ** power >= least
            ]
        rel = relevance(chunk) if chunk else {}
        for item in chunk:
            if len(best) >= budget and -item[0] < best[0]:
                n = len(scored)  # nothing after it can reach the top B
                break
            r = -item[0] * max(rel.get(item[3], 0.0), RELEVANCE_FLOOR) ** power
            out.append((-r, *item[1:]))
            if len(best) < budget:
                heapq.heappush(best, r)
            elif r > best[0]:
                heapq.heapreplace(best, r)
        else:
            n += step
            batch *= grow
    out.sort()
    return out[:budget]


def text_relevance(task: set[int] | frozenset[int], insight: Collection[int]) -> float:
    """How much an insight's text is about the task: the cosine of their word 1-2-gram sets
    (``hashing.word_features``), 0 when either has no words. ``insight`` holds distinct features
    (a set, or a compact array of one)."""
    if not task or not insight:
        return 0.0
    return len(task.intersection(insight)) / math.sqrt(len(task) * len(insight))


def idf(count: int, total: int) -> float:
    """A word's weight by how rare it is: ``count`` of ``total`` texts hold it. Qdrant's IDF modifier
    (BM25's), ln((N − n + 0.5) / (n + 0.5) + 1), the weight Eq. 2 gives a task's words under
    ``SIMILARITY=idf``."""
    return math.log((total - count + 0.5) / (count + 0.5) + 1.0)


def idf_relevance(
    task: set[int] | frozenset[int],
    insight: Collection[int],
    squared: Mapping[int, float],
    task_norm2: float | None = None,
    insight_norm2: float | None = None,
) -> float:
    """``text_relevance`` with each word weighed by its rarity: the cosine of the two word sets as
    vectors of IDF weights. ``squared`` holds the squared weight of every feature of both (one left
    out weighs 0); ``task_norm2`` and ``insight_norm2`` each one's sum of them, when known. With
    every weight equal it is ``text_relevance`` exactly; otherwise a word that most insights share
    (``check``, ``first``) counts for little against one that names the task's subject."""
    if not task or not insight:
        return 0.0
    shared = sum(squared.get(f, 0.0) for f in task.intersection(insight))
    if shared <= 0.0:
        return 0.0
    if task_norm2 is None:
        task_norm2 = sum(squared.get(f, 0.0) for f in task)
    if insight_norm2 is None:
        insight_norm2 = sum(squared.get(f, 0.0) for f in insight)
    return min(1.0, shared / math.sqrt(task_norm2 * insight_norm2))


def _overlap(evidence: Collection[str], expanded: Collection[str]) -> int:
    if isinstance(evidence, set | frozenset) and isinstance(expanded, set | frozenset):
        return len(evidence & expanded)  # the same count, in C, walking the smaller set
    if len(evidence) <= len(expanded):
        return sum(1 for q in evidence if q in expanded)
    return sum(1 for q in expanded if q in evidence)


__all__ = [
    "Candidate",
    "Expansion",
    "Ranked",
    "RankingInputs",
    "ScoredInsight",
    "Scoring",
    "ServingInsight",
    "SquaredIdf",
    "TextInputs",
    "candidates_from_queries",
    "conflict",
    "conflict_penalized_score",
    "expand_neighbours",
    "idf",
    "idf_relevance",
    "rank_from_queries",
    "rank_insights",
    "refine_depth",
    "support",
    "with_queries",
    "word_ceiling",
]
