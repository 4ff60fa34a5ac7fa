"""The LLM graph controller: an OpenAI-compatible endpoint judging consolidation (paper §3.4).

``controller`` is the port's implementation; ``prompt`` and ``answers`` the contract with the
model; ``client`` the endpoint; ``ratelimit`` and ``usage`` the budget shared through Redis;
``testserver`` a local endpoint for tests and the offline demo.
"""

from __future__ import annotations

from evomem.llm.prompt import PROMPT_VERSION
from evomem.llm.usage import summary

__all__ = ["PROMPT_VERSION", "summary"]
