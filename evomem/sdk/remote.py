"""The remote backends of ``Memory`` and ``AsyncMemory``: with ``EVOMEM_URL`` set, they talk to a
retrieval service over HTTP (httpx), with the same calls and results as the local backend. They
import neither Redis nor Qdrant (an import contract and tests/unit/test_sdk_surface.py hold them
to that).

Each call is written once, in ``Calls``, without I/O: a generator that checks its arguments, yields
the ``Request`` to send, receives the answer's document and returns the result. ``RemoteBackend``
drives it with httpx's client, ``AsyncRemoteBackend`` with its async client; ``answer`` maps an
HTTP answer to a document or to the SDK's errors for both. Sync and async share every rule."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Generator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import httpx

from evomem.errors import (
    ConfigError,
    EvomemError,
    InvalidEventError,
    NotFoundError,
    QuotaExceededError,
    TransientError,
)
from evomem.ops import tracing
from evomem.results import (
    ConsolidationReport,
    EditRecord,
    EventState,
    InsightView,
    LineageStep,
    Retrieval,
    RetrievalAudit,
    ReviewItem,
    ScoredInsight,
    ServedRecord,
    SimilarQuery,
)
from evomem.sdk.calls import build_control, build_event, check_retrieve_args
from evomem.settings import Settings
from schemas import InsightNode, TaskEvent

TIMEOUT_S = 10.0
T = TypeVar("T")

#: Set by ``acting_for``: the Authorization header this context's calls carry instead of the
#: client's own token ("" for none at all).
_caller_authorization: ContextVar[str | None] = ContextVar("evomem_caller_authorization", default=None)


@contextlib.contextmanager
def acting_for(authorization: str | None) -> Iterator[None]:
    """Calls made in this block carry the caller's ``Authorization`` header as it came (None: no
    header), never the client's own token: a gateway forwards what each caller proves."""
    reset = _caller_authorization.set(authorization or "")
    try:
        yield
    finally:
        _caller_authorization.reset(reset)


def _authorize(request: httpx.Request) -> httpx.Request:
    """The request with the caller's Authorization header in place of the client's, inside
    ``acting_for``."""
    caller = _caller_authorization.get()
    if caller is not None:
        request.headers.pop("authorization", None)
        if caller:
            request.headers["Authorization"] = caller
    return request


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request of a call: method, path under the service's URL, JSON body."""

    method: str
    path: str
    body: str | bytes | None = None


#: A call without I/O: yields its requests, is sent each answer's document, returns the result.
Call = Generator[Request, dict[str, Any], T]


def _insight_view(body: dict[str, Any]) -> InsightView:
    """The service's insight document as the SDK's ``InsightView`` (it sends no evidence edges)."""
    return InsightView(
        InsightNode.model_validate(body["insight"]),
        tuple(body["lineage"]),
        (),
        tuple(EditRecord(**h) for h in body["history"]),
    )


def _quoted(kind: str, node_id: Any) -> str:
    if not isinstance(node_id, str) or not node_id:
        raise NotFoundError(f"no {kind} {node_id!r}")
    return urllib.parse.quote(node_id, safe="")


class Calls:
    """The calls of the SDK as the HTTP API answers them, each a ``Call`` (see the module)."""

    @staticmethod
    def retrieve(
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Call[Retrieval]:
        check_retrieve_args(query, namespace, top_k, budget)
        body = {
            "query": query,
            "namespace": namespace,
            "top_k": top_k,
            "budget": budget,
            "as_of": as_of.isoformat() if as_of is not None else None,
        }
        doc = yield Request(
            "POST", "/v1/retrieve", json.dumps({k: v for k, v in body.items() if v is not None})
        )
        insights = tuple(
            ScoredInsight(
                i["id"],
                i["text"],
                i["score"],
                i["support"],
                i["conflict"],
                similarity=i.get("similarity", 0.0),
            )
            for i in doc["insights"]
        )
        return Retrieval(
            doc["retrieval_id"], doc["namespace"], query, insights, tuple(doc["similar_queries"]), 0
        )

    @staticmethod
    def report(
        retrieval: Retrieval | TaskEvent | str | None,
        status: str | None,
        namespace: str | None,
        query: str | None,
        fields: dict[str, Any],
    ) -> Call[str]:
        event = (
            retrieval
            if isinstance(retrieval, TaskEvent)
            else build_event(retrieval, status, namespace, query, fields)
        )
        with tracing.reporting(event) as traced:  # the service publishes the context with the event
            doc = yield Request("POST", "/v1/events", traced.model_dump_json())
        return str(doc["event_id"])

    @staticmethod
    def insight(
        insight_id: str, namespace: str | None = None, as_of: datetime | None = None
    ) -> Call[InsightView]:
        path = f"/v1/insights/{_quoted('insight', insight_id)}"
        if as_of is not None:
            path += "?" + urllib.parse.urlencode({"as_of": as_of.isoformat()})
        view = _insight_view((yield Request("GET", path)))
        if namespace is not None and view.node.namespace != namespace:
            raise NotFoundError(f"no insight {insight_id!r} in namespace {namespace!r}")
        return view

    @staticmethod
    def event(event_id: str, namespace: str | None = None) -> Call[EventState]:
        state = EventState.model_validate((yield Request("GET", f"/v1/events/{_quoted('event', event_id)}")))
        if namespace is not None and state.namespace != namespace:
            raise NotFoundError(f"no event {event_id!r} in namespace {namespace!r}")
        return state

    @staticmethod
    def lineage(insight_id: str) -> Call[list[LineageStep]]:
        doc = yield Request("GET", f"/v1/insights/{_quoted('insight', insight_id)}/lineage")
        return [LineageStep(e["id"], e["text"], e["state"], e["version"]) for e in doc["lineage"]]

    @staticmethod
    def retrieval(retrieval_id: str, namespace: str = "default") -> Call[RetrievalAudit]:
        query = urllib.parse.urlencode({"namespace": namespace})
        doc = yield Request("GET", f"/v1/retrievals/{_quoted('retrieval', retrieval_id)}?{query}")
        return RetrievalAudit(
            doc["id"],
            doc["namespace"],
            doc["query"],
            doc["at"],
            tuple(SimilarQuery(**q) for q in doc["similar"]),
            tuple(ServedRecord(**i) for i in doc["insights"]),
        )

    # -- the operator's calls (the service says who asks: the token's name) --------------------------
    @staticmethod
    def revert(
        event_id: str | None,
        namespace: str,
        insight_id: str | None,
        since: datetime | None,
        by: str | None,
        reason: str | None,
        request_id: str | None,
    ) -> Call[str]:
        build_control(  # the same refusals as the local memory, before the round trip
            "revert",
            namespace,
            by or "remote",
            event_id=event_id,
            insight_id=insight_id,
            since=since,
            reason=reason,
            request_id=request_id,
        )
        body = {
            "namespace": namespace,
            "event_id": event_id,
            "insight_id": insight_id,
            "since": since.isoformat() if since is not None else None,
            "reason": reason,
            "request_id": request_id,
        }
        doc = yield Request(
            "POST", "/v1/revert", json.dumps({k: v for k, v in body.items() if v is not None})
        )
        return str(doc["request_id"])

    @staticmethod
    def pin(
        action: str, insight_id: str, namespace: str | None, reason: str | None, request_id: str | None
    ) -> Call[str]:
        path = f"/v1/insights/{_quoted('insight', insight_id)}"
        if namespace is not None:  # NotFoundError unless it is an insight of that namespace
            node = InsightNode.model_validate((yield Request("GET", path))["insight"])
            if node.namespace != namespace:
                raise NotFoundError(f"no insight {insight_id!r} in namespace {namespace!r}")
        body = {k: v for k, v in {"reason": reason, "request_id": request_id}.items() if v is not None}
        return str((yield Request("POST", f"{path}/{action}", json.dumps(body)))["request_id"])

    @staticmethod
    def reviews(namespace: str, state: str | None) -> Call[list[ReviewItem]]:
        query = urllib.parse.urlencode({"namespace": namespace, "state": state or "all"})
        doc = yield Request("GET", f"/v1/reviews?{query}")
        return [ReviewItem(**r) for r in doc["reviews"]]

    @staticmethod
    def review(
        action: str, review_id: str, namespace: str, reason: str | None, request_id: str | None
    ) -> Call[str]:
        build_control(action, namespace, "remote", review_id=review_id, reason=reason, request_id=request_id)
        body = {"namespace": namespace, "reason": reason, "request_id": request_id}
        path = f"/v1/reviews/{_quoted('review', review_id)}/{action}"
        doc = yield Request("POST", path, json.dumps({k: v for k, v in body.items() if v is not None}))
        return str(doc["request_id"])


def answer(response: httpx.Response) -> dict[str, Any]:
    """The document of a 2xx answer; the SDK's error for any other."""
    try:
        doc = response.json() if response.content else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    if response.status_code < 300:
        return doc
    message = str(doc.get("error") or response.reason_phrase)
    status = response.status_code
    if status == 422:
        raise InvalidEventError(doc.get("field") or "body", message)
    if status == 404:
        raise NotFoundError(message)
    if status == 429:
        raise QuotaExceededError(message, float(response.headers.get("Retry-After") or 60))
    if status in (502, 503, 504):
        raise TransientError(message)
    raise EvomemError(f"HTTP {status}: {message}")


def unreachable(exc: httpx.TransportError) -> TransientError:
    return TransientError(f"evomem service unreachable: {type(exc).__name__}")


def client_options(url: str, token: str | None) -> dict[str, Any]:
    """What both httpx clients are made with: base URL, headers, timeout."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("EVOMEM_URL must be an http(s) URL")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return {"base_url": url.rstrip("/"), "headers": headers, "timeout": TIMEOUT_S}


def _settings_args(settings: Settings) -> tuple[str, str | None]:
    if settings.url is None:
        raise ConfigError("a remote memory needs EVOMEM_URL")
    return settings.url, settings.token.get_secret_value() if settings.token else None


class RemoteBackend:
    """A client of a retrieval service (``evomem serve``) at ``url``, with a bearer ``token``."""

    remote = True

    def __init__(self, url: str, token: str | None = None) -> None:
        # a pool of kept-alive connections shared by the caller's threads; a connection the service
        # closed while idle is replaced, and a refused connect is tried once more
        self._http = httpx.Client(**client_options(url, token), transport=httpx.HTTPTransport(retries=1))

    @classmethod
    def open(cls, settings: Settings) -> RemoteBackend:
        return cls(*_settings_args(settings))

    def _run(self, call: Call[T]) -> T:
        request = next(call)  # the arguments are checked before anything is sent
        while True:
            try:
                try:
                    response = self._http.send(
                        _authorize(
                            self._http.build_request(request.method, request.path, content=request.body)
                        )
                    )
                except httpx.TransportError as exc:
                    raise unreachable(exc) from None
                doc = answer(response)
            except EvomemError as exc:
                call.throw(exc)  # raised again by the call, whose spans end with it
                raise
            try:
                request = call.send(doc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    # -- the same calls as the local backend -----------------------------------------------------
    def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval:
        return self._run(Calls.retrieve(query, namespace, top_k=top_k, budget=budget, as_of=as_of))

    def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        return self._run(Calls.report(retrieval, status, namespace, query, fields))

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Consolidation runs in the service's workers; nothing to do from a client."""
        return ConsolidationReport()

    def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        return self._run(Calls.insight(insight_id, namespace, as_of))

    def event(self, event_id: str, namespace: str | None = None) -> EventState:
        """The state of a reported event (``Memory.event``), as the service tells it."""
        return self._run(Calls.event(event_id, namespace))

    def lineage(self, insight_id: str) -> list[LineageStep]:
        """The revision chain through an insight, oldest first, each with its text and state."""
        return self._run(Calls.lineage(insight_id))

    def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        """What a retrieval served and why, while its record is kept."""
        return self._run(Calls.retrieval(retrieval_id, namespace))

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
        return self._run(Calls.revert(event_id, namespace, insight_id, since, by, reason, request_id))

    def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._run(Calls.pin("pin", insight_id, namespace, reason, request_id))

    def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._run(Calls.pin("unpin", insight_id, namespace, reason, request_id))

    def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]:
        return self._run(Calls.reviews(namespace, state))

    def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._run(Calls.review("approve", review_id, namespace, reason, request_id))

    def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._run(Calls.review("reject", review_id, namespace, reason, request_id))

    def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        """The HTTP API shows past queries by id only: no texts."""
        return {}

    def close(self) -> None:
        self._http.close()


class AsyncRemoteBackend:
    """``RemoteBackend`` on httpx's async client: the same ``Calls``, awaited."""

    remote = True

    def __init__(self, url: str, token: str | None = None) -> None:
        self._http = httpx.AsyncClient(
            **client_options(url, token), transport=httpx.AsyncHTTPTransport(retries=1)
        )

    @classmethod
    def open(cls, settings: Settings) -> AsyncRemoteBackend:
        return cls(*_settings_args(settings))

    async def _run(self, call: Call[T]) -> T:
        request = next(call)
        while True:
            try:
                try:
                    response = await self._http.send(
                        _authorize(
                            self._http.build_request(request.method, request.path, content=request.body)
                        )
                    )
                except httpx.TransportError as exc:
                    raise unreachable(exc) from None
                doc = answer(response)
            except EvomemError as exc:
                call.throw(exc)
                raise
            try:
                request = call.send(doc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        top_k: int | None = None,
        budget: int | None = None,
        as_of: datetime | None = None,
    ) -> Retrieval:
        return await self._run(Calls.retrieve(query, namespace, top_k=top_k, budget=budget, as_of=as_of))

    async def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        return await self._run(Calls.report(retrieval, status, namespace, query, fields))

    async def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Consolidation runs in the service's workers; nothing to do from a client."""
        return ConsolidationReport()

    async def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        return await self._run(Calls.insight(insight_id, namespace, as_of))

    async def event(self, event_id: str, namespace: str | None = None) -> EventState:
        return await self._run(Calls.event(event_id, namespace))

    async def lineage(self, insight_id: str) -> list[LineageStep]:
        return await self._run(Calls.lineage(insight_id))

    async def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        """What a retrieval served and why, while its record is kept."""
        return await self._run(Calls.retrieval(retrieval_id, namespace))

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
        return await self._run(Calls.revert(event_id, namespace, insight_id, since, by, reason, request_id))

    async def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await self._run(Calls.pin("pin", insight_id, namespace, reason, request_id))

    async def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await self._run(Calls.pin("unpin", insight_id, namespace, reason, request_id))

    async def reviews(self, namespace: str = "default", state: str | None = "pending") -> list[ReviewItem]:
        return await self._run(Calls.reviews(namespace, state))

    async def approve(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await self._run(Calls.review("approve", review_id, namespace, reason, request_id))

    async def reject(
        self,
        review_id: str,
        *,
        namespace: str = "default",
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return await self._run(Calls.review("reject", review_id, namespace, reason, request_id))

    async def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        return {}

    async def close(self) -> None:
        await self._http.aclose()


__all__ = ["AsyncRemoteBackend", "Call", "Calls", "RemoteBackend", "Request", "acting_for", "answer"]
