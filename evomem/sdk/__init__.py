"""The SDK: ``Memory.open()`` gives the memory in this process (``local``) or, with ``EVOMEM_URL``
set, a client of a retrieval service (``remote``), with the same calls (``protocol.MemoryClient``).
The two clients do not know each other; this module is where one is chosen."""

from __future__ import annotations

from evomem.sdk.local import InsightView, LocalMemory
from evomem.sdk.protocol import MemoryClient
from evomem.sdk.remote import RemoteInsight, RemoteMemory
from evomem.settings import Settings


class Memory(LocalMemory):
    """The memory in this process (see ``LocalMemory``), and the SDK's one entry point."""

    @classmethod
    def open(cls, settings: Settings | None = None, *, index: bool = True) -> Memory | RemoteMemory:
        """Open with ``settings``, or with the ``EVOMEM_*`` environment as it is now. With
        ``EVOMEM_URL`` set, the memory is a client of that retrieval service (same methods).

        ``index=False`` opens the system of record alone (report, consolidate, inspect, stats): for
        processes beside the one that holds the embedded Qdrant store."""
        settings = settings or Settings()
        if settings.url is not None:
            return RemoteMemory.open(settings)
        return cls.open_local(settings, index=index)


def _both_are_clients(local: LocalMemory, remote: RemoteMemory) -> tuple[MemoryClient, MemoryClient]:
    """Never called: mypy checks here that both clients offer the protocol's calls."""
    return local, remote


__all__ = ["InsightView", "LocalMemory", "Memory", "MemoryClient", "RemoteInsight", "RemoteMemory"]
