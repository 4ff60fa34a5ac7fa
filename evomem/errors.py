"""The error tree of evomem.

    EvomemError
     ├── ConfigError          a setting is missing or contradicts another
     ├── InvalidEventError    an event failed validation; ``field`` names what is wrong
     ├── NotFoundError        an id that no node has
     ├── StoreLockedError     the embedded store is held by another process
     ├── StoreError           the store refused a command (a bug or a damaged store, not the input)
     └── TransientError       worth retrying: a store or endpoint is briefly unreachable
          └── QuotaExceededError  a namespace's quota is spent for now; ``retry_after_s`` says when

Adapters translate vendor exceptions into these at the boundary, so callers never name
``redis.ConnectionError`` or a Qdrant error type.
"""

from __future__ import annotations

import json
import re


class EvomemError(Exception):
    """Root of every error evomem raises on purpose."""


class ConfigError(EvomemError):
    """A setting is missing, malformed or contradicts another."""


class InvalidEventError(EvomemError):
    """A task event is malformed; nothing was applied."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFoundError(EvomemError):
    """No node has this id (in this namespace)."""


class StoreLockedError(EvomemError):
    """Another process holds the embedded Qdrant store."""


class StoreError(EvomemError):
    """The store refused a command for a reason other than being unreachable."""


class TransientError(EvomemError):
    """A dependency is briefly unavailable; the same call may succeed later."""


class QuotaExceededError(TransientError):
    """A namespace has spent a quota (HTTP 429); the call may succeed after ``retry_after_s``."""

    def __init__(self, what: str, retry_after_s: float) -> None:
        super().__init__(f"quota exceeded: {what}; retry after {retry_after_s:.0f} s")
        self.what = what
        self.retry_after_s = retry_after_s


def reason_of(exc: Exception) -> tuple[str, str | None]:
    """A one-line reason and the offending field for a validation failure."""
    from pydantic import ValidationError

    if isinstance(exc, InvalidEventError):
        return str(exc), exc.field
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        # A value that matches no member of a union (a verdict, a trajectory step) is reported once per
        # member, under the member's tag. Drop the tags and keep the most specific of those errors, so
        # a bad partial verdict reads "insight_feedback.<id>.revised_text", not "...literal['helpful',...]".
        first = errors[0]["loc"][:1]
        same_field = [e for e in errors if e["loc"][:1] == first]
        err = max(same_field, key=lambda e: len(_field_path(e["loc"])))
        field = ".".join(_field_path(err["loc"])) or "event"
        return f"{field}: {err['msg']}", field
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return f"event: not valid JSON ({exc})", "event"
    return f"{type(exc).__name__}: {exc}", None


_UNION_TAG = re.compile(r"^(?:[a-z-]+\[.*\]|constrained-[a-z]+|str|int|float|bool|dict|list|PartialVerdict)$")


def _field_path(loc: tuple[int | str, ...]) -> list[str]:
    """The location of an error without pydantic's union-member tags (``str``, ``literal[...]``, ...)."""
    return [str(p) for n, p in enumerate(loc) if n == 0 or not (isinstance(p, str) and _UNION_TAG.match(p))]


__all__ = [
    "ConfigError",
    "EvomemError",
    "InvalidEventError",
    "NotFoundError",
    "QuotaExceededError",
    "StoreError",
    "StoreLockedError",
    "TransientError",
    "reason_of",
]
