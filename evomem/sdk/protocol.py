"""What both SDK clients offer, so that code written against one runs against the other: the local
``Memory`` (this process talks to the stores) and ``RemoteMemory`` (a client of the retrieval
service). Neither imports the other; ``evomem.sdk.Memory.open`` picks one."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol, Self

from evomem.pipeline.consolidate import ConsolidationReport
from evomem.pipeline.event_state import EventState
from evomem.pipeline.retrieve import Retrieval
from schemas import InsightNode, TaskEvent


class InsightLike(Protocol):
    """An insight as ``insight()`` shows it: the node, its lineage (oldest first), its history."""

    @property
    def node(self) -> InsightNode: ...

    @property
    def lineage(self) -> tuple[str, ...]: ...


class MemoryClient(Protocol):
    def retrieve(
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval: ...

    def report(
        self,
        retrieval: Retrieval | TaskEvent | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str: ...

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport: ...

    def insight(self, insight_id: str, namespace: str | None = None) -> InsightLike: ...

    def event(self, event_id: str, namespace: str | None = None) -> EventState: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


__all__ = ["InsightLike", "MemoryClient"]
