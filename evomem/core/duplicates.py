"""Near-duplicate insights: finding an active insight that a new text nearly repeats, namespace-wide.

A proposed (or revised) text that nearly repeats an active insight of its namespace must join that
insight rather than become its twin, whichever controller decided and whichever process consolidates
(a Celery worker holds no vector index). So the search runs against the system of record: each
insight's text is registered under a few locality-sensitive buckets (MinHash of its word 1-2-grams,
``BANDS`` bands of ``ROWS`` rows), a new text looks up the insights sharing one of its buckets, and
those candidates are confirmed with the hashing embedder's cosine against a threshold
(``EVOMEM_DUPLICATE_THRESHOLD``). The cost is a handful of set reads per new text, whatever the size
of the memory. Texts sharing a bucket with probability 1 − (1 − J³)¹⁶ for a word Jaccard J: 0.99
at J = 0.7, 0.88 at J = 0.5, under 0.3% at J = 0.05.
"""

from __future__ import annotations

import functools
import itertools
import operator
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evomem.core.hashing import HashingEmbedder, SparseVec, word_features

BANDS = 16
ROWS = 3
_PRIME = (1 << 31) - 1
_rng = np.random.default_rng(0x5EED_D0B1)
_A = _rng.integers(1, _PRIME, size=BANDS * ROWS, dtype=np.int64)
_B = _rng.integers(0, _PRIME, size=BANDS * ROWS, dtype=np.int64)
_embedder = HashingEmbedder()


def bands(text: str) -> list[str]:
    """The near-duplicate buckets of a text ("band:digest"); none for a text without words."""
    features = word_features(text)
    if not features:
        return []
    x = np.fromiter(features, dtype=np.int64) % _PRIME
    signature = ((_A[:, None] * x[None, :] + _B[:, None]) % _PRIME).min(axis=1)
    rows = signature.reshape(BANDS, ROWS)
    return [f"{b}:{zlib.crc32(rows[b].tobytes()):08x}" for b in range(BANDS)]


def similarity(a: SparseVec, b: SparseVec) -> float:
    """Cosine of two hashing-embedder vectors (they are normalised)."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    # in C (``map``): the same products in the same order as a generator, about 2.5x faster
    return float(sum(map(operator.mul, small.values(), map(large.get, small, itertools.repeat(0.0)))))


#: Texts whose vectors are kept (the least recently used go first): consolidation compares the same
#: insight texts with every event that retrieved them, and each vector costs about 0.1 ms to make
#: (~14 KB each, so about 14 MB at most).
VECTORS_CACHED = 1024


@functools.lru_cache(maxsize=VECTORS_CACHED)
def vector(text: str) -> SparseVec:
    """The hashing embedder's vector of a text; shared between callers, so never to be changed."""
    return _embedder.embed_one(text)


@dataclass(frozen=True, slots=True)
class Known:
    """An insight a new text may repeat: its id and its text's vector."""

    id: str
    vector: SparseVec


class Buckets:
    """Insights by the near-duplicate buckets of their texts: the candidates a new text is confirmed
    against are those sharing one of its buckets (``sharing``)."""

    def __init__(self) -> None:
        self._by_band: dict[str, dict[str, Known]] = {}

    def add(
        self, insight_id: str, text: str, text_bands: Sequence[str], vec: SparseVec | None = None
    ) -> None:
        known = Known(insight_id, vector(text) if vec is None else vec)
        for b in text_bands:
            self._by_band.setdefault(b, {})[insight_id] = known

    def sharing(self, text_bands: Sequence[str], but: str | None = None) -> list[Known]:
        """The insights sharing a bucket with ``text_bands`` (each once), but the one named ``but``."""
        found: dict[str, Known] = {}
        for b in text_bands:
            found.update(self._by_band.get(b, {}))
        found.pop(but or "", None)
        return list(found.values())


def nearest(text_vector: SparseVec, known: Sequence[Known], threshold: float) -> str | None:
    """The id of the known insight most similar to the text, if at least ``threshold`` similar."""
    best, best_id = -1.0, ""
    for k in known:
        sim = similarity(text_vector, k.vector)
        if sim >= threshold and (sim > best or (sim == best and k.id < best_id)):
            best, best_id = sim, k.id
    return best_id or None


__all__ = ["BANDS", "ROWS", "Buckets", "Known", "bands", "nearest", "similarity", "vector"]
