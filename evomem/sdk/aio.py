"""``AsyncMemory``: the SDK's calls for async code (LangGraph, pydantic-ai, the OpenAI Agents SDK,
LlamaIndex and ADK are async first), with the same arguments, results and errors as ``Memory``.

Over a retrieval service it runs on httpx's async client (``AsyncRemoteBackend``, the same
``Calls`` as the sync client: one implementation of the rules); with the stores in this process it
runs the local backend's calls in worker threads (``AsyncLocalBackend``), whose clients block — the
event loop goes on meanwhile. Nothing is written twice: both wrap what ``Memory`` already does."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Self

from evomem.results import ConsolidationReport, EventState, InsightView, LineageStep, Retrieval
from evomem.sdk.memory import Memory
from evomem.sdk.protocol import AsyncBackend
from evomem.sdk.remote import AsyncRemoteBackend
from evomem.settings import Settings
from schemas import TaskEvent


class AsyncLocalBackend:
    """The calls of a local ``Memory``, each run in a worker thread (``asyncio.to_thread``)."""

    remote = False

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    async def retrieve(
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval:
        return await asyncio.to_thread(self.memory.retrieve, query, namespace, top_k=top_k, budget=budget)

    async def report(
        self,
        retrieval: Retrieval | TaskEvent | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        return await asyncio.to_thread(
            self.memory.report, retrieval, status=status, namespace=namespace, query=query, **fields
        )

    async def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        return await asyncio.to_thread(self.memory.consolidate, max_events)

    async def insight(self, insight_id: str, namespace: str | None = None) -> InsightView:
        return await asyncio.to_thread(self.memory.insight, insight_id, namespace)

    async def event(self, event_id: str, namespace: str | None = None) -> EventState:
        return await asyncio.to_thread(self.memory.event, event_id, namespace)

    async def lineage(self, insight_id: str) -> list[LineageStep]:
        return await asyncio.to_thread(self.memory.lineage, insight_id)

    async def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        return await asyncio.to_thread(self.memory.backend.query_texts, namespace, ids)

    async def close(self) -> None:
        await asyncio.to_thread(self.memory.close)


class AsyncMemory:
    """``Memory`` for async code: ``await mem.retrieve(...)``, ``await mem.report(...)``, ...

    ``AsyncMemory.open()`` chooses the backend from the settings as ``Memory.open()`` does;
    ``AsyncMemory(memory)`` wraps a local ``Memory`` (whose stores stay reachable as ``.sync``);
    ``AsyncMemory(backend)`` takes an async backend. ``async with`` closes it."""

    def __init__(self, backend: AsyncBackend | Memory) -> None:
        self.sync: Memory | None = None
        if isinstance(backend, Memory):
            if backend.remote:
                raise TypeError(
                    "wrap a local Memory; for a service, AsyncMemory.open() or AsyncRemoteBackend"
                )
            self.sync = backend
            backend = AsyncLocalBackend(backend)
        self.backend: AsyncBackend = backend

    @classmethod
    def open(cls, settings: Settings | None = None, *, index: bool = True) -> AsyncMemory:
        """With ``EVOMEM_URL`` set, a client of that retrieval service on httpx's async client;
        else the stores in this process (opened here, before the first ``await``)."""
        settings = settings or Settings()
        if settings.url is not None:
            return cls(AsyncRemoteBackend.open(settings))
        return cls(Memory.open_local(settings, index=index))

    @property
    def remote(self) -> bool:
        return self.backend.remote

    async def retrieve(
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval:
        """``Memory.retrieve``."""
        return await self.backend.retrieve(query, namespace, top_k=top_k, budget=budget)

    async def report(
        self,
        retrieval: Retrieval | TaskEvent | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        """``Memory.report``."""
        return await self.backend.report(retrieval, status=status, namespace=namespace, query=query, **fields)

    async def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """``Memory.consolidate``."""
        return await self.backend.consolidate(max_events)

    async def insight(self, insight_id: str, namespace: str | None = None) -> InsightView:
        """``Memory.insight``."""
        return await self.backend.insight(insight_id, namespace)

    async def event(self, event_id: str, namespace: str | None = None) -> EventState:
        """``Memory.event``."""
        return await self.backend.event(event_id, namespace)

    async def lineage(self, insight_id: str) -> list[LineageStep]:
        """``Memory.lineage``."""
        return await self.backend.lineage(insight_id)

    async def close(self) -> None:
        await self.backend.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _backends_answer_the_protocol(
    local: AsyncLocalBackend, remote: AsyncRemoteBackend
) -> tuple[AsyncBackend, AsyncBackend]:
    """Never called: mypy checks here that both async backends offer the protocol's calls."""
    return local, remote


__all__ = ["AsyncLocalBackend", "AsyncMemory"]
