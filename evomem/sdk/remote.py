"""The remote backend of ``Memory``: with ``EVOMEM_URL`` set, ``Memory.open()`` talks to a retrieval
service over HTTP (httpx), with the same calls and results as the local backend. It imports neither
Redis nor Qdrant (an import contract and tests/unit/test_sdk_surface.py hold it to that)."""

from __future__ import annotations

import json
import urllib.parse
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
    ScoredInsight,
)
from evomem.sdk.calls import build_event, check_retrieve_args
from evomem.settings import Settings
from schemas import InsightNode, TaskEvent

TIMEOUT_S = 10.0


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
            response = self._http.request(method, path, content=body)
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
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval:
        check_retrieve_args(query, namespace, top_k, budget)
        body = {"query": query, "namespace": namespace, "top_k": top_k, "budget": budget}
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
        retrieval: Retrieval | TaskEvent | None = None,
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

    def insight(self, insight_id: str, namespace: str | None = None) -> InsightView:
        if not isinstance(insight_id, str) or not insight_id:
            raise NotFoundError(f"no insight {insight_id!r}")
        view = _insight_view(self._call("GET", f"/v1/insights/{urllib.parse.quote(insight_id, safe='')}"))
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

    def query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        """The HTTP API shows past queries by id only: no texts."""
        return {}

    def close(self) -> None:
        self._http.close()


__all__ = ["RemoteBackend"]
