"""Embedders behind an endpoint: any OpenAI-compatible embeddings API (``EVOMEM_EMBEDDER=openai``).
The default embedder needs no adapter: it is pure feature hashing (``evomem.core.hashing``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

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
        self.dim = settings.embedding_dim

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


__all__ = ["OpenAIEmbedder"]
