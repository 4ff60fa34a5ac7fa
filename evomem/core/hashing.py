"""The hashing embedder: the default, pure embedder (an OpenAI-compatible endpoint is an adapter,
``evomem.adapters.embedders``).

The hashing embedder maps word 1-2-grams and character 3-5-grams to 32-bit crc32 buckets with
1+log(tf) weights, L2-normalised: a sparse vector whose dot product is the cosine. crc32 is the same
in every process and on every machine, unlike Python's salted ``hash()``.
"""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Literal

SparseVec = dict[int, float]
DenseVec = list[float]

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "to",
        "was",
        "were",
        "will",
        "with",
    ]
)
_CRC_W, _CRC_B, _CRC_C = zlib.crc32(b"w:"), zlib.crc32(b"b:"), zlib.crc32(b"c:")
_TF_CACHED = 64
_TF = tuple(1.0 + math.log(c) if c else 0.0 for c in range(_TF_CACHED))  # the 1 + log(tf) weights


def word_features(text: str) -> set[int]:
    """The word 1- and 2-gram features of a text (the hashing embedder's), as a set."""
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOP]
    crc = zlib.crc32
    out = {crc(w.encode(), _CRC_W) for w in words}
    out.update(crc(f"{a} {b}".encode(), _CRC_B) for a, b in itertools.pairwise(words))
    return out


def word_part(vector: SparseVec, words: set[int]) -> SparseVec:
    """The entries of a hashing embedding that are word 1-2-grams (``words``: its text's
    ``word_features``), without the character n-grams. Searching by it finds what shares the text's
    words, through posting lists far shorter than the n-grams' (every word of a templated task
    shares its n-grams with many others)."""
    return {d: w for d, w in vector.items() if d in words}


class HashingEmbedder:
    """Deterministic sparse feature hashing; no model, no network, tens of microseconds a text."""

    kind: Literal["sparse", "dense"] = "sparse"
    dim = 1 << 32

    def __init__(self, char_ngrams: tuple[int, int] = (3, 5), char_weight: float = 0.5) -> None:
        self.lo, self.hi = char_ngrams
        self.char_weight = char_weight

    def features(self, text: str) -> Counter[int]:
        # Same features, weights and insertion order as the plain loops (word, bigram, char
        # n-grams, each in text order), so the vector is bit-identical; the prefix is folded into
        # crc32's running value (crc32(b"c:" + x) == crc32(x, crc32(b"c:"))), char n-grams of an
        # ASCII word are sliced from its bytes, and Counter.update counts them in C.
        words = [w for w in _WORD.findall(text.lower()) if w not in _STOP]
        crc = zlib.crc32
        counts: Counter[int] = Counter()
        get = counts.get
        for w in words:
            k = crc(w.encode(), _CRC_W)
            counts[k] = get(k, 0) + 2
        for a, b in itertools.pairwise(words):
            k = crc(f"{a} {b}".encode(), _CRC_B)
            counts[k] = get(k, 0) + 2
        sizes = range(self.lo, self.hi + 1)
        grams: list[int] = []
        for w in words:
            padded = f" {w} "
            if padded.isascii():
                raw = padded.encode()
                grams += [crc(raw[i : i + n], _CRC_C) for n in sizes for i in range(len(raw) - n + 1)]
            else:
                grams += [
                    crc(padded[i : i + n].encode(), _CRC_C) for n in sizes for i in range(len(padded) - n + 1)
                ]
        counts.update(grams)
        return counts

    def embed_one(self, text: str) -> SparseVec:
        counts = self.features(text)
        if not counts:
            return {}
        log = math.log
        vec = {k: _TF[c] if c < _TF_CACHED else 1.0 + log(c) for k, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vec.values()))
        return {k: v / norm for k, v in vec.items()}

    def embed(self, texts: Sequence[str]) -> list[SparseVec]:
        return [self.embed_one(t) for t in texts]


__all__ = ["DenseVec", "HashingEmbedder", "SparseVec", "word_features", "word_part"]
