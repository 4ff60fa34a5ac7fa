"""``AsyncMemory``: the SDK's calls for async code (LangGraph, pydantic-ai, the OpenAI Agents SDK,
LlamaIndex and ADK are async first), with the same arguments, results and errors as ``Memory``.

Over a retrieval service it runs on httpx's async client (``AsyncRemoteBackend``, the same
``Calls`` as the sync client: one implementation of the rules); with the stores in this process it
runs the local backend's calls in worker threads (``AsyncLocalBackend``), whose clients block — the
event loop goes on meanwhile. Nothing is written twice: both wrap what ``Memory`` already does."""

from __future__ import annotations

import asyncio
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from evomem.results import (
    ConsolidationReport,
    EventState,
    InsightView,
    LineageStep,
    Retrieval,
    RetrievalAudit,
    ReviewItem,
)
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
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval:
        return await asyncio.to_thread(
            self.memory.retrieve, query, namespace, top_k=top_k, budget=budget, as_of=as_of
        )

    async def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
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

    async def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        return await asyncio.to_thread(self.memory.insight, insight_id, namespace, as_of=as_of)

    async def event(self, event_id: str, namespace: str | None = None) -> EventState:
        return await asyncio.to_thread(self.memory.event, event_id, namespace)

    async def lineage(self, insight_id: str) -> list[LineageStep]:
        return await asyncio.to_thread(self.memory.lineage, insight_id)

    async def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        return await asyncio.to_thread(self.memory.backend.query_texts, namespace, ids)

    async def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        return await asyncio.to_thread(self.memory.retrieval, retrieval_id, namespace)

    async def revert(
        self,
        event_id: str | None = None,
        *,
        namespace: str = "default",
        insight_id: str | None = None,
        since: datetime | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            self.memory.revert,
            event_id,
            namespace=namespace,
            insight_id=insight_id,
            since=since,
            by=by,
            reason=reason,
            request_id=request_id,
        )

    async def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            self.memory.pin, insight_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    async def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            self.memory.unpin, insight_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    async def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]:
        return await asyncio.to_thread(self.memory.reviews, namespace, state)

    async def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            self.memory.approve, review_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    async def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            self.memory.reject, review_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

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
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval:
        """``Memory.retrieve``."""
        return await self.backend.retrieve(query, namespace, top_k=top_k, budget=budget, as_of=as_of)

    async def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
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

    async def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        """``Memory.insight``."""
        return await self.backend.insight(insight_id, namespace, as_of=as_of)

    async def event(self, event_id: str, namespace: str | None = None) -> EventState:
        """``Memory.event``."""
        return await self.backend.event(event_id, namespace)

    async def lineage(self, insight_id: str) -> list[LineageStep]:
        """``Memory.lineage``."""
        return await self.backend.lineage(insight_id)

    # -- undo, look back, protect; the review queue (docs/guides/lifecycle.md) -------------------------
    async def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        """``Memory.retrieval``."""
        return await self.backend.retrieval(retrieval_id, namespace)

    async def revert(
        self,
        event_id: str | None = None,
        *,
        namespace: str = "default",
        insight_id: str | None = None,
        since: datetime | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """``Memory.revert``."""
        return await self.backend.revert(
            event_id,
            namespace=namespace,
            insight_id=insight_id,
            since=since,
            by=by,
            reason=reason,
            request_id=request_id,
        )

    async def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """``Memory.pin``."""
        return await self.backend.pin(
            insight_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    async def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """``Memory.unpin``."""
        return await self.backend.unpin(
            insight_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    async def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]:
        """``Memory.reviews``."""
        return await self.backend.reviews(namespace, state)

    async def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """``Memory.approve``."""
        return await self.backend.approve(
            review_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    async def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """``Memory.reject``."""
        return await self.backend.reject(
            review_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

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
