"""What a backend of ``Memory`` answers: the calls that both the local backend (this process talks
to the stores) and the remote one (a client of the retrieval service) offer, with the same results
(``evomem.results``). Neither backend imports the other; ``evomem.sdk.memory`` holds one."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from evomem.results import (
    ConsolidationReport,
    EventState,
    InsightView,
    LineageStep,
    Retrieval,
    RetrievalAudit,
    ReviewItem,
)
from schemas import TaskEvent


class Backend(Protocol):
    #: True for a client of a retrieval service, False for the stores in this process.
    remote: bool

    def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval: ...

    def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str: ...

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport: ...

    def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView: ...

    def lineage(self, insight_id: str) -> list[LineageStep]: ...

    def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]: ...

    def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit: ...

    def revert(
        self,
        event_id: str | None = None,
        *,
        namespace: str = "default",
        insight_id: str | None = None,
        since: datetime | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]: ...

    def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    def event(self, event_id: str, namespace: str | None = None) -> EventState: ...

    def close(self) -> None: ...


class AsyncBackend(Protocol):
    """``Backend``'s calls, awaited (``AsyncMemory``'s backends)."""

    remote: bool

    async def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval: ...

    async def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str: ...

    async def consolidate(self, max_events: int | None = None) -> ConsolidationReport: ...

    async def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView: ...

    async def lineage(self, insight_id: str) -> list[LineageStep]: ...

    async def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]: ...

    async def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit: ...

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
    ) -> str: ...

    async def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    async def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    async def reviews(
        self, namespace: str = "default", state: str | None = "pending"
    ) -> list[ReviewItem]: ...

    async def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    async def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str: ...

    async def event(self, event_id: str, namespace: str | None = None) -> EventState: ...

    async def close(self) -> None: ...


__all__ = ["AsyncBackend", "Backend"]
