"""The error tree of evomem.

    EvomemError
     ├── ConfigError          a setting is missing or contradicts another
     ├── InvalidEventError    an event failed validation; ``field`` names what is wrong
     ├── NotFoundError        an id that no node has
     ├── StoreLockedError     the embedded store is held by another process
     └── TransientError       worth retrying: a store or endpoint is briefly unreachable

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


class TransientError(EvomemError):
    """A dependency is briefly unavailable; the same call may succeed later."""


__all__ = [
    "ConfigError",
    "EvomemError",
    "InvalidEventError",
    "NotFoundError",
    "StoreLockedError",
    "TransientError",
]
