"""Utility-aware retrieval, paper §3.1 and §3.3, as pure functions.

Eq. 2 (top-k similar queries) is the index's job; this module holds what follows it:
Eq. 3-4 neighbour expansion, Eq. 7 candidate rule, Eq. 8-9 support and conflict, Eq. 10 top-B.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Candidate:
    """An insight as the index returns it: enough to score it, no more."""

    id: str
    text: str
    positive: Collection[str]
    negative: Collection[str]
    version: int = 0
    active: bool = True


@dataclass(frozen=True, slots=True)
class ScoredInsight:
    """A served insight with the terms of its score r = s − λc."""

    id: str
    text: str
    score: float
    support: int
    conflict: int
    version: int = 0


@dataclass(frozen=True, slots=True)
class Expansion:
    """Q̃ˢ: the similar queries and the neighbours the query graph adds to them."""

    similar: tuple[str, ...]
    expanded: frozenset[str] = field(default_factory=frozenset)


def expand_neighbours(
    similar: Sequence[str],
    neighbours_of: Callable[[Collection[str]], Mapping[str, Iterable[str]]],
    hops: int = 1,
) -> Expansion:
    """Q̃ˢ = Qˢ ∪ ΔQ (Eq. 3-4), repeated ``hops`` times; ``hops=0`` keeps Qˢ alone.

    ``neighbours_of`` fetches the 1-hop neighbours of a set of query ids in one round trip.
    """
    expanded = set(similar)
    frontier: set[str] = set(similar)
    for _ in range(hops):
        if not frontier:
            break
        found = neighbours_of(frontier)
        frontier = {q for ids in found.values() for q in ids} - expanded
        expanded |= frontier
    return Expansion(similar=tuple(similar), expanded=frozenset(expanded))


def support(candidate: Candidate, expanded: Collection[str]) -> int:
    """s = |Ω⁺ ∩ Q̃ˢ| (Eq. 9)."""
    return _overlap(candidate.positive, expanded)


def conflict(candidate: Candidate, expanded: Collection[str]) -> int:
    """c = |Ω⁻ ∩ Q̃ˢ| (Eq. 9)."""
    return _overlap(candidate.negative, expanded)


def conflict_penalized_score(s: int, c: int, lam: float) -> float:
    """r = s − λc (Eq. 8)."""
    return s - lam * c


def rank_insights(
    candidates: Iterable[Candidate], expanded: Collection[str], lam: float, budget: int
) -> list[ScoredInsight]:
    """Top-B of the active candidates supported in Q̃ˢ (Eq. 7 and 10).

    Only r > 0 is served: an insight whose conflict outweighs its support here is held back, so B
    is a maximum. Ties go to more support, then to the id, so the order is deterministic.
    """
    expanded = expanded if isinstance(expanded, set | frozenset) else frozenset(expanded)
    # (-r, -s, id, arrival) sorts exactly as the stable sort on (-r, -s, id) would; the served
    # ScoredInsight objects are only built for the top B.
    scored: list[tuple[float, int, str, int, int, Candidate]] = []
    for n, cand in enumerate(candidates):
        if not cand.active:
            continue
        s = _overlap(cand.positive, expanded)  # support, Eq. 9
        if s == 0:
            continue
        c = _overlap(cand.negative, expanded)  # conflict, Eq. 9
        r = conflict_penalized_score(s, c, lam)  # Eq. 8
        if r > 0:
            scored.append((-r, -s, cand.id, n, c, cand))
    scored.sort()
    return [
        ScoredInsight(cand.id, cand.text, -neg_r, -neg_s, c, cand.version)
        for neg_r, neg_s, _, _, c, cand in scored[:budget]
    ]


def _overlap(evidence: Collection[str], expanded: Collection[str]) -> int:
    if isinstance(evidence, set | frozenset) and isinstance(expanded, set | frozenset):
        return len(evidence & expanded)  # the same count, in C, walking the smaller set
    if len(evidence) <= len(expanded):
        return sum(1 for q in evidence if q in expanded)
    return sum(1 for q in expanded if q in evidence)


__all__ = [
    "Candidate",
    "Expansion",
    "ScoredInsight",
    "conflict",
    "conflict_penalized_score",
    "expand_neighbours",
    "rank_insights",
    "support",
]
