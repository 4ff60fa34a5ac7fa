"""The SDK: one ``Memory`` class over a local backend (this process talks to the stores) or a
remote one (a client of a retrieval service, with ``EVOMEM_URL``), with the same calls and the same
results (``evomem.results``). The two backends do not know each other; ``memory`` holds either."""

from __future__ import annotations

from evomem.results import InsightView
from evomem.sdk.aio import AsyncLocalBackend, AsyncMemory
from evomem.sdk.memory import Memory, RemoteMemory
from evomem.sdk.protocol import AsyncBackend, Backend
from evomem.sdk.remote import AsyncRemoteBackend, RemoteBackend


def __getattr__(name: str) -> object:
    # LocalBackend on demand: importing it loads the stores' clients, which a remote client never needs
    if name == "LocalBackend":
        from evomem.sdk.local import LocalBackend

        return LocalBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncBackend",
    "AsyncLocalBackend",
    "AsyncMemory",
    "AsyncRemoteBackend",
    "Backend",
    "InsightView",
    "LocalBackend",
    "Memory",
    "RemoteBackend",
    "RemoteMemory",
]
