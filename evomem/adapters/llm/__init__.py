"""The LLM graph controller: an OpenAI-compatible endpoint judging consolidation (paper §3.4).

``controller`` is the port's implementation; ``prompt`` and ``answers`` the contract with the
model; ``client`` the endpoint; ``ratelimit`` and ``usage`` the budget shared through Redis.
A local endpoint for tests and the offline demo is in ``evomem.testing.llm_server``.
"""

from __future__ import annotations

from evomem.adapters.llm.prompt import PROMPT_VERSION
from evomem.adapters.llm.usage import summary

__all__ = ["PROMPT_VERSION", "summary"]
