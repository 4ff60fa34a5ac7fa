"""How long to wait after failures in a row: the one doubling every retry loop of the project uses
(the projector, the workers' tasks, the retrieval processes' supervisor, the LLM controller)."""

from __future__ import annotations

#: Doublings past this change nothing under any cap in use, and ``2.0 ** 1024`` overflows.
MAX_DOUBLINGS = 32


def capped_doubling(failures: int, base_s: float, cap_s: float) -> float:
    """``base_s`` after the first failure, doubled for each further one in a row, at most ``cap_s``;
    0 before any failure."""
    if failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2.0 ** min(failures - 1, MAX_DOUBLINGS))


__all__ = ["MAX_DOUBLINGS", "capped_doubling"]
