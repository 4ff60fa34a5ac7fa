"""What every embedder shares beyond ``embed``: the calibration of its cosine, the role of a text
(a task or an insight), and a bounded cache of the vectors it computed, by text.

A dense embedder's cosine does not start at 0 for unrelated texts: multilingual-e5-small gives
two unrelated tasks about 0.8 and two wordings of one task about 0.95, where the hashing embedder
gives about 0 and 0.5. Every bar and power tuned on the hashing cosine (``SIMILARITY_POWER``, the
rule controller's "same task again" bar, the query graph's edge weights) reads the cosine through
``calibrated``: the embedder's ``floor`` is mapped to 0 and 1 stays 1, linearly, then raised to the
embedder's ``power``. The floor alone leaves the dense scale flatter than the lexical one above it:
two look-alike tasks of sibling topics read 0.37 where the hashing embedder reads 0.17, so Eq. 2
weighs them nearly as much as the task itself. The power (1 for hashing, 1.3 for e5) is the one that
maps e5's cosines of STS-B's sentence pairs onto the hashing embedder's quantiles
(``python -m bench.calibrate --stsb``).
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

import numpy as np

from evomem.core.hashing import DenseVec, SparseVec

Role = Literal["query", "passage"]


def calibrated(score: float, floor: float, power: float = 1.0) -> float:
    """A cosine on the embedder's scale read on the hashing embedder's: ``floor`` and below 0, 1 stays
    1, linearly between, then to ``power``. ``floor`` 0 and ``power`` 1 (hashing) leave it as it is."""
    if floor <= 0.0 and power == 1.0:
        return score
    linear = max(0.0, (score - floor) / (1.0 - floor)) if floor > 0.0 else max(0.0, score)
    return linear if power == 1.0 else float(linear**power)


def embedder_floor(embedder: object) -> float:
    """The cosine an embedder gives unrelated texts (0 for one that says nothing)."""
    return float(getattr(embedder, "floor", 0.0))


def embedder_power(embedder: object) -> float:
    """The power a task-to-task cosine is raised to once its floor is removed (1: none)."""
    return float(getattr(embedder, "power", 1.0))


def embedder_relevance_floor(embedder: object) -> float:
    """The cosine below which a task and an insight (a passage) are not about each other, for text
    relevance: the embedder's own where it has one, else its ``floor``."""
    return float(getattr(embedder, "relevance_floor", embedder_floor(embedder)))


def embedder_name(embedder: object) -> str:
    """The name an index records of the embedder that built it (with the vectors' dimension)."""
    name = getattr(embedder, "name", type(embedder).__name__.removesuffix("Embedder").lower())
    return f"{name}:{getattr(embedder, 'dim', 0)}"


def embed_passages(embedder: object, texts: Sequence[str]) -> list[SparseVec] | list[DenseVec]:
    """Embed insight texts: as passages where the embedder tells the two apart (e5's ``passage: ``
    prefix), else as any text."""
    passages = getattr(embedder, "embed_passages", None)
    if passages is not None:
        out: list[SparseVec] | list[DenseVec] = passages(texts)
        return out
    embed = embedder.embed  # type: ignore[attr-defined]
    result: list[SparseVec] | list[DenseVec] = embed(texts)
    return result


def pack_vector(vector: Sequence[float], tag: str) -> str:
    """A dense vector as text for a record in Redis: the tag of the embedder that computed it
    (``embedder_name``), then its float16 bytes in base64: 2 bytes a dimension, 1,024 characters
    for e5's 384. float16 moves a cosine by about 1e-5, far below anything ranking tells apart."""
    raw = np.asarray(vector, dtype="<f2").tobytes()
    return f"{tag}|{base64.b64encode(raw).decode('ascii')}"


def unpack_vector(packed: str | bytes | None, tag: str) -> DenseVec | None:
    """The vector ``pack_vector`` wrote, when it was computed by the embedder ``tag`` names (same
    name, same dimension); None otherwise, or when it does not decode: the text is embedded then."""
    if not packed:
        return None
    if isinstance(packed, bytes):
        packed = packed.decode("ascii", "replace")
    got, _, data = packed.rpartition("|")
    if got != tag:
        return None
    try:
        v = np.frombuffer(base64.b64decode(data, validate=True), dtype="<f2")
    except (ValueError, binascii.Error):
        return None
    dim = tag.rpartition(":")[2]
    if not dim.isdigit() or len(v) != int(dim):
        return None
    out: DenseVec = v.astype(np.float32).tolist()
    return out


class CachedEmbedder:
    """A dense embedder with its vectors kept by (role, text), the least recently used dropped
    first past ``capacity``. A task asked again is not embedded again, and the task a retrieval
    embedded is not embedded again when its query reaches the index. Thread-safe: the retrieval
    service and the projector's thread share one."""

    def __init__(self, inner: object, capacity: int) -> None:
        self.inner = inner
        self.kind: Literal["sparse", "dense"] = inner.kind  # type: ignore[attr-defined]
        self.dim: int = inner.dim  # type: ignore[attr-defined]
        self.name: str = getattr(inner, "name", "dense")
        self.floor: float = embedder_floor(inner)
        self.relevance_floor: float = embedder_relevance_floor(inner)
        self.power: float = embedder_power(inner)
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._cache: OrderedDict[tuple[Role, str], DenseVec] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[DenseVec]:
        return self._embed(texts, "query")

    def embed_passages(self, texts: Sequence[str]) -> list[DenseVec]:
        return self._embed(texts, "passage")

    def _embed(self, texts: Sequence[str], role: Role) -> list[DenseVec]:
        found: dict[int, DenseVec] = {}
        with self._lock:
            for n, t in enumerate(texts):
                v = self._cache.get((role, t))
                if v is not None:
                    self._cache.move_to_end((role, t))
                    found[n] = v
            self.hits += len(found)
            self.misses += len(texts) - len(found)
        missing = [n for n in range(len(texts)) if n not in found]
        if missing:
            unique = list(dict.fromkeys(texts[n] for n in missing))
            embed = self.inner.embed  # type: ignore[attr-defined]
            fn = embed if role == "query" else getattr(self.inner, "embed_passages", embed)
            computed: list[DenseVec] = fn(unique)  # one batch for the texts not kept
            by_text = dict(zip(unique, computed, strict=True))
            for n in missing:
                found[n] = by_text[texts[n]]
            if self.capacity > 0:
                with self._lock:
                    for t, v in by_text.items():
                        self._cache[(role, t)] = v
                        self._cache.move_to_end((role, t))
                    while len(self._cache) > self.capacity:
                        self._cache.popitem(last=False)
        return [found[n] for n in range(len(texts))]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "kept": len(self._cache)}


__all__ = [
    "CachedEmbedder",
    "Role",
    "calibrated",
    "embed_passages",
    "embedder_floor",
    "embedder_name",
    "embedder_power",
    "embedder_relevance_floor",
    "pack_vector",
    "unpack_vector",
]
