"""Counting and cutting prompt text in tokens, with tiktoken when its encoding is at hand.

tiktoken downloads an encoding the first time it is used and caches it (``TIKTOKEN_CACHE_DIR``).
Offline, or when the download fails, the conservative estimate stands in: one token per three UTF-8
bytes, which over-counts ordinary English (about four characters a token) so a budget is never
overrun. Budgets and the rate limiter only need an upper bound; billed usage comes from the endpoint.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Protocol

from evomem.errors import ConfigError
from evomem.logs import get_logger

log = get_logger("evomem.llm")

#: How long the first use of a tiktoken encoding may take (a download on a network that hangs).
TIKTOKEN_LOAD_TIMEOUT_S = 10.0
BYTES_PER_TOKEN = 3


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def head(self, text: str, tokens: int) -> str:
        """The longest start of ``text`` within ``tokens``."""
        ...

    def tail(self, text: str, tokens: int) -> str:
        """The longest end of ``text`` within ``tokens``."""
        ...


class EstimatedTokens:
    """The conservative estimate: ceil(UTF-8 bytes / 3). No model, no download."""

    name = "estimate"

    def count(self, text: str) -> int:
        return math.ceil(len(text.encode()) / BYTES_PER_TOKEN)

    def head(self, text: str, tokens: int) -> str:
        return text.encode()[: tokens * BYTES_PER_TOKEN].decode(errors="ignore")

    def tail(self, text: str, tokens: int) -> str:
        raw = text.encode()
        return raw[max(0, len(raw) - tokens * BYTES_PER_TOKEN) :].decode(errors="ignore")


class TiktokenTokens:
    """Exact counts with a tiktoken encoding (or anything with ``encode`` and ``decode``)."""

    def __init__(self, encoding: Any, name: str | None = None) -> None:
        self.encoding = encoding
        self.name = name or f"tiktoken:{encoding.name}"

    def count(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def head(self, text: str, tokens: int) -> str:
        return str(self.encoding.decode(self.encoding.encode(text, disallowed_special=())[:tokens]))

    def tail(self, text: str, tokens: int) -> str:
        ids = self.encoding.encode(text, disallowed_special=())
        return str(self.encoding.decode(ids[max(0, len(ids) - tokens) :])) if tokens > 0 else ""


def cut(counter: TokenCounter, text: str, budget: int) -> str:
    """``text`` within ``budget`` tokens: its start and its end (where a trajectory usually reaches
    its answer) are kept, and the cut is marked so the model knows something is missing."""
    if counter.count(text) <= budget:
        return text
    room = max(0, budget - 16)  # the marker's own tokens
    start, end = counter.head(text, room // 3), counter.tail(text, room - room // 3)
    removed = counter.count(text) - counter.count(start) - counter.count(end)
    return f"{start} [… about {removed} tokens cut …] {end}"


_cache: dict[str, TokenCounter] = {}
_lock = threading.Lock()


def token_counter(setting: str, model: str) -> TokenCounter:
    """The counter ``EVOMEM_LLM_TOKENIZER`` asks for: ``estimate``; a tiktoken encoding name; or
    ``auto``, the model's tiktoken encoding (o200k_base for models tiktoken does not know) falling
    back to the estimate when it cannot be loaded. Loaded once per process."""
    key = f"{setting}|{model}"
    with _lock:
        if key not in _cache:
            _cache[key] = _load(setting, model)
        return _cache[key]


def _load(setting: str, model: str) -> TokenCounter:
    if setting == "estimate":
        return EstimatedTokens()
    import tiktoken

    if setting == "auto":
        try:
            name = tiktoken.encoding_name_for_model(model)
        except KeyError:
            name = "o200k_base"
    else:
        name = setting
    found: list[Any] = []

    def load() -> None:
        try:
            found.append(tiktoken.get_encoding(name))
        except Exception as exc:  # a failed download is an OSError, an unknown name a ValueError
            found.append(exc)

    loader = threading.Thread(target=load, name="evomem-tiktoken", daemon=True)
    loader.start()
    loader.join(TIKTOKEN_LOAD_TIMEOUT_S)
    result = found[0] if found else TimeoutError(f"loading took over {TIKTOKEN_LOAD_TIMEOUT_S:.0f} s")
    if isinstance(result, ValueError) and setting != "auto":
        raise ConfigError(f"EVOMEM_LLM_TOKENIZER={setting}: tiktoken has no such encoding") from None
    if isinstance(result, Exception):
        log.warning(
            "llm.tokenizer_estimate",
            encoding=name,
            error=type(result).__name__,
            hint="tokens are estimated; pre-seed TIKTOKEN_CACHE_DIR for exact counts",
        )
        return EstimatedTokens()
    return TiktokenTokens(result)


__all__ = ["EstimatedTokens", "TiktokenTokens", "TokenCounter", "cut", "token_counter"]
