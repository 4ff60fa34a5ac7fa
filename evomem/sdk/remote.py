"""The remote backend of ``Memory``: with ``EVOMEM_URL`` set, ``Memory.open()`` talks to a retrieval
service over HTTP (httpx), with the same calls and results as the local backend. It imports neither
Redis nor Qdrant (an import contract and tests/unit/test_sdk_surface.py hold it to that)."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime
from typing import Any

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
    InsightView,
    LineageStep,
    Retrieval,
    RetrievalAudit,
    ScoredInsight,
    ServedRecord,
    SimilarQuery,
)
from evomem.sdk.calls import build_control, build_event, check_retrieve_args
from evomem.settings import Settings
from schemas import InsightNode, TaskEvent

TIMEOUT_S = 10.0

#: Set by ``acting_for``: the Authorization header this thread's calls carry instead of the
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


def _insight_view(body: dict[str, Any]) -> InsightView:
    """The service's insight document as the SDK's ``InsightView`` (it sends no evidence edges)."""
    return InsightView(
        InsightNode.model_validate(body["insight"]),
        tuple(body["lineage"]),
        (),
        tuple(EditRecord(**h) for h in body["history"]),
    )


class RemoteBackend:
    """A client of a retrieval service (``evomem serve``) at ``url``, with a bearer ``token``."""

    remote = True

    def __init__(self, url: str, token: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("EVOMEM_URL must be an http(s) URL")
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # a pool of kept-alive connections shared by the caller's threads; a connection the service
        # closed while idle is replaced, and a refused connect is tried once more
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=TIMEOUT_S,
            transport=httpx.HTTPTransport(retries=1),
        )

    @classmethod
    def open(cls, settings: Settings) -> RemoteBackend:
        if settings.url is None:
            raise ConfigError("a remote memory needs EVOMEM_URL")
        return cls(settings.url, settings.token.get_secret_value() if settings.token else None)

    def _call(self, method: str, path: str, body: str | bytes | None = None) -> Any:
        try:
            request = self._http.build_request(method, path, content=body)
            caller = _caller_authorization.get()
            if caller is not None:
                request.headers.pop("authorization", None)
                if caller:
                    request.headers["Authorization"] = caller
            response = self._http.send(request)
        except httpx.TransportError as exc:
            raise TransientError(f"evomem service unreachable: {type(exc).__name__}") from None
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
        check_retrieve_args(query, namespace, top_k, budget)
        body = {
            "query": query,
            "namespace": namespace,
            "top_k": top_k,
            "budget": budget,
            "as_of": as_of.isoformat() if as_of is not None else None,
        }
        doc = self._call("POST", "/v1/retrieve", json.dumps({k: v for k, v in body.items() if v is not None}))
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

    def report(
        self,
        retrieval: Retrieval | TaskEvent | str | None = None,
        *,
        status: str | None = None,
        namespace: str | None = None,
        query: str | None = None,
        **fields: Any,
    ) -> str:
        event = (
            retrieval
            if isinstance(retrieval, TaskEvent)
            else build_event(retrieval, status, namespace, query, fields)
        )
        with tracing.reporting(event) as traced:  # the service publishes the context with the event
            return str(self._call("POST", "/v1/events", traced.model_dump_json())["event_id"])

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Consolidation runs in the service's workers; nothing to do from a client."""
        return ConsolidationReport()

    def insight(
        self, insight_id: str, namespace: str | None = None, *, as_of: datetime | None = None
    ) -> InsightView:
        if not isinstance(insight_id, str) or not insight_id:
            raise NotFoundError(f"no insight {insight_id!r}")
        path = f"/v1/insights/{urllib.parse.quote(insight_id, safe='')}"
        if as_of is not None:
            path += "?" + urllib.parse.urlencode({"as_of": as_of.isoformat()})
        view = _insight_view(self._call("GET", path))
        if namespace is not None and view.node.namespace != namespace:
            raise NotFoundError(f"no insight {insight_id!r} in namespace {namespace!r}")
        return view

    def lineage(self, insight_id: str) -> list[LineageStep]:
        """The revision chain through an insight, oldest first, each with its text and state."""
        if not isinstance(insight_id, str) or not insight_id:
            raise NotFoundError(f"no insight {insight_id!r}")
        path = f"/v1/insights/{urllib.parse.quote(insight_id, safe='')}/lineage"
        steps = self._call("GET", path)["lineage"]
        return [LineageStep(e["id"], e["text"], e["state"], e["version"]) for e in steps]

    def retrieval(self, retrieval_id: str, namespace: str = "default") -> RetrievalAudit:
        query = urllib.parse.urlencode({"namespace": namespace})
        doc = self._call("GET", f"/v1/retrievals/{urllib.parse.quote(retrieval_id, safe='')}?{query}")
        return RetrievalAudit(
            doc["id"],
            doc["namespace"],
            doc["query"],
            doc["at"],
            tuple(SimilarQuery(**q) for q in doc["similar"]),
            tuple(ServedRecord(**i) for i in doc["insights"]),
        )

    # -- the operator's calls (the service says who asks: the token's name) ----------------------------
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
        doc = self._call("POST", "/v1/revert", json.dumps({k: v for k, v in body.items() if v is not None}))
        return str(doc["request_id"])

    def pin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._pin("pin", insight_id, namespace, reason, request_id)

    def unpin(
        self,
        insight_id: str,
        *,
        namespace: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> str:
        return self._pin("unpin", insight_id, namespace, reason, request_id)

    def _pin(
        self, action: str, insight_id: str, namespace: str | None, reason: str | None, request_id: str | None
    ) -> str:
        if namespace is not None:
            self.insight(insight_id, namespace)  # NotFoundError unless it is an insight of that namespace
        if not isinstance(insight_id, str) or not insight_id:
            raise NotFoundError(f"no insight {insight_id!r}")
        body = {k: v for k, v in {"reason": reason, "request_id": request_id}.items() if v is not None}
        path = f"/v1/insights/{urllib.parse.quote(insight_id, safe='')}/{action}"
        return str(self._call("POST", path, json.dumps(body))["request_id"])

    def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        """The HTTP API shows past queries by id only: no texts."""
        return {}

    def close(self) -> None:
        self._http.close()


__all__ = ["RemoteBackend", "acting_for"]
