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


__all__ = [
    "ConfigError",
    "EvomemError",
    "InvalidEventError",
    "NotFoundError",
    "QuotaExceededError",
    "StoreError",
    "StoreLockedError",
    "TransientError",
]
