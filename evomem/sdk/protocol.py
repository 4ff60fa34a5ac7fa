"""What a backend of ``Memory`` answers: the calls that both the local backend (this process talks
to the stores) and the remote one (a client of the retrieval service) offer, with the same results
(``evomem.results``). Neither backend imports the other; ``evomem.sdk.memory`` holds one."""

from __future__ import annotations

from typing import Any, Protocol

from evomem.results import ConsolidationReport, InsightView, LineageStep, Retrieval
from schemas import TaskEvent


class Backend(Protocol):
    #: True for a client of a retrieval service, False for the stores in this process.
    remote: bool

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

    def insight(self, insight_id: str, namespace: str | None = None) -> InsightView: ...

    def lineage(self, insight_id: str) -> list[LineageStep]: ...

    def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]: ...

    def close(self) -> None: ...


__all__ = ["Backend"]
