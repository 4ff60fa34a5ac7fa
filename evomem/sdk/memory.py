"""``Memory``, the SDK's one client class: the same calls and results over a local backend (the
stores in this process) or a remote one (a retrieval service at ``EVOMEM_URL``), as one client
class of qdrant-client serves an embedded or a remote Qdrant. The local backend's modules (Redis,
Qdrant) are imported only when a local memory is made, so a remote client never loads them."""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from evomem.errors import ConfigError
from evomem.results import (
    ConsolidationReport,
    EventState,
    InsightView,
    LineageStep,
    Retrieval,
    RetrievalAudit,
    ReviewItem,
)
from evomem.sdk.protocol import Backend
from evomem.sdk.remote import RemoteBackend
from evomem.settings import Settings
from schemas import InsightNode, TaskEvent

if TYPE_CHECKING:
    from evomem.core.ports import VectorIndex
    from evomem.pipeline.consolidate import Consolidator
    from evomem.pipeline.project import FollowerState, Projector
    from evomem.pipeline.retrieve import Retriever
    from evomem.runtime import Runtime
    from evomem.sdk.local import LocalBackend


class Memory:
    """A memory for agents: ``retrieve`` before a task, ``report`` after it, ``consolidate`` and
    ``insight`` to apply and look at the edits.

    ``Memory.open()`` chooses the backend from the settings; ``Memory(backend)`` takes one (or the
    ``Runtime`` of the stores in this process). The parts of the stores (``graph``, ``stream``,
    ``runtime``, ``stats()``, ...) are there only on the local backend."""

    def __init__(self, backend: Backend | Runtime) -> None:
        self._stores: LocalBackend | None = None
        self.backend: Backend
        if isinstance(backend, RemoteBackend):
            self.backend = backend
            return
        # the stores' clients are imported here, for a memory that is not a remote one only
        from evomem import runtime
        from evomem.sdk.local import LocalBackend

        if isinstance(backend, runtime.Runtime):
            backend = LocalBackend(backend)
        if isinstance(backend, LocalBackend):
            self._stores = backend
        self.backend = backend

    @classmethod
    def open(cls, settings: Settings | None = None, *, index: bool = True) -> Memory:
        """Open with ``settings``, or with the ``EVOMEM_*`` environment as it is now. With
        ``EVOMEM_URL`` set, the memory is a client of that retrieval service (same calls, same results).

        ``index=False`` opens the system of record alone (report, consolidate, inspect, stats): for
        processes beside the one that holds the embedded Qdrant store."""
        settings = settings or Settings()
        if settings.url is not None:
            return RemoteMemory.from_settings(settings)
        return cls.open_local(settings, index=index)

    @classmethod
    def open_local(cls, settings: Settings | None = None, *, index: bool = True) -> Memory:
        """The stores in this process whatever ``EVOMEM_URL`` says (operators' commands, tests)."""
        from evomem.sdk.local import LocalBackend

        return cls(LocalBackend.open(settings, index=index))

    @property
    def remote(self) -> bool:
        """True when a retrieval service answers, False when the stores are in this process."""
        return self.backend.remote

    # -- the agent's calls (DESIGN §8) -----------------------------------------------------------
    def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval:
        """Insights for a task, ranked by support minus the conflict penalty (paper Eq. 2-10). With
        ``as_of``, what the memory as it stood then would have served (an audit read)."""
        return self.backend.retrieve(query, namespace, top_k=top_k, budget=budget, as_of=as_of)

    def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        """Publish the outcome of a task and return its event id at once; consolidation happens later.

        Takes the ``Retrieval`` the task used plus the outcome fields of the task event, or a whole
        ``TaskEvent``. Raises ``InvalidEventError`` naming the field when the event is malformed.
        """
        return self.backend.report(retrieval, status=status, namespace=namespace, query=query, **fields)

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Apply pending events now, in this process, then bring the index up to date (locally;
        a retrieval service's workers consolidate on their own, so a remote memory reports nothing)."""
        return self.backend.consolidate(max_events)

    def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        """An insight with its evidence, state, version, revision lineage and edit history; with
        ``as_of``, as it stood then."""
        return self.backend.insight(insight_id, namespace, as_of=as_of)

    def lineage(self, insight_id: str) -> list[LineageStep]:
        """The revision chain through an insight, oldest first, each with its text and state."""
        return self.backend.lineage(insight_id)

    # -- undo, look back, protect (docs/guides/lifecycle.md) ------------------------------------------
    def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        """What a retrieval served and why (its scores, the similar queries it used), by its id,
        while its record is kept (``EVOMEM_RETRIEVAL_TTL_S``)."""
        return self.backend.retrieval(retrieval_id, namespace)

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
    ) -> str:
        """Undo an event's edits (with ``insight_id``: only its edits of that insight), or every edit
        of the namespace since a time, as new edits; returns the request id at once, applied with the
        events. The same request id twice is one revert."""
        return self.backend.revert(
            event_id,
            namespace=namespace,
            insight_id=insight_id,
            since=since,
            by=by,
            reason=reason,
            request_id=request_id,
        )

    def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Keep an insight as it is: no verdict archives or revises it (they still record evidence)."""
        return self.backend.pin(insight_id, namespace=namespace, by=by, reason=reason, request_id=request_id)

    def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Let verdicts archive or revise a pinned insight again."""
        return self.backend.unpin(
            insight_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    # -- the review queue (a namespace with the setting ``review``) ------------------------------------
    def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]:
        """The edits held for review in a namespace, oldest first (``state``: pending, approved,
        rejected; None: all)."""
        return self.backend.reviews(namespace, state)

    def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Apply a held edit, once; returns the request id at once, applied with the events."""
        return self.backend.approve(
            review_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Drop a held edit: its insight stays as it is."""
        return self.backend.reject(
            review_id, namespace=namespace, by=by, reason=reason, request_id=request_id
        )

    def event(self, event_id: str, namespace: str | None = None) -> EventState:
        """The state of a reported event: ``queued``, ``applied`` (with its edits) or
        ``dead-lettered`` (with the reason); ``NotFoundError`` when no event has this id (in
        ``namespace``, when given)."""
        return self.backend.event(event_id, namespace)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the parts of the stores in this process, for operators and tests --------------------------
    @property
    def local(self) -> LocalBackend:
        """The local backend; ``ConfigError`` on a client of a retrieval service."""
        if self._stores is None:
            raise ConfigError("this memory is a client of a retrieval service: its stores are not here")
        return self._stores

    @property
    def runtime(self) -> Runtime:
        return self.local.runtime

    @property
    def settings(self) -> Settings:
        return self.local.settings

    @property
    def redis(self) -> Any:
        return self.local.redis

    @property
    def graph(self) -> Any:
        return self.local.graph

    @property
    def stream(self) -> Any:
        return self.local.stream

    @property
    def quotas(self) -> Any:
        return self.local.quotas

    @property
    def namespace_settings(self) -> Any:
        return self.local.namespace_settings

    @property
    def index(self) -> VectorIndex | None:
        return self.local.index

    @property
    def projector(self) -> Projector | None:
        return self.local.projector

    @property
    def consolidator(self) -> Consolidator:
        return self.local.consolidator

    @property
    def retriever(self) -> Retriever:
        return self.local.retriever

    def follow(self) -> None:
        """Keep the index in step in a background thread, as the retrieval side does (see
        ``LocalBackend.follow``)."""
        self.local.follow()

    def follower(self) -> FollowerState | None:
        """The projector thread's state, or None when this memory does not follow."""
        return self.local.follower()

    def insights(self, namespace: str, state: str | None = None) -> list[InsightNode]:
        """Every insight of a namespace (for inspection and export; not for the hot path)."""
        return self.local.insights(namespace, state)

    def stats(self) -> dict[str, Any]:
        return self.local.stats()

    def projector_lags(self, cap: int = 100_000) -> dict[str, int]:
        return self.local.projector_lags(cap)


class RemoteMemory(Memory):
    """``Memory`` over a retrieval service: ``RemoteMemory(url, token)`` is
    ``Memory(RemoteBackend(url, token))``, and what ``Memory.open()`` gives with ``EVOMEM_URL`` set."""

    def __init__(self, url: str, token: str | None = None) -> None:
        super().__init__(RemoteBackend(url, token))

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteMemory:
        """The service at ``EVOMEM_URL``, with the bearer token ``EVOMEM_TOKEN``."""
        if settings.url is None:
            raise ConfigError("a remote memory needs EVOMEM_URL")
        return cls(settings.url, settings.token.get_secret_value() if settings.token else None)


def _backends_answer_the_protocol(local: LocalBackend, remote: RemoteBackend) -> tuple[Backend, Backend]:
    """Never called: mypy checks here that both backends offer the protocol's calls."""
    return local, remote


__all__ = ["Memory", "RemoteMemory"]
