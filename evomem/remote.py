"""The SDK's remote mode: ``Memory.open()`` with ``EVOMEM_URL`` talks to a retrieval service over
HTTP, with the same methods as the embedded memory."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from types import TracebackType
from typing import Any

from evomem.consolidation import ConsolidationReport
from evomem.errors import ConfigError, EvomemError, InvalidEventError, NotFoundError, TransientError
from evomem.retrieval import ScoredInsight
from evomem.retriever import Retrieval
from evomem.settings import Settings
from schemas import InsightNode, TaskEvent

TIMEOUT_S = 10.0


class RemoteInsight:
    """An insight as the service shows it: ``.node``, ``.lineage``, ``.history`` and the node's fields."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.node = InsightNode.model_validate(body["insight"])
        self.lineage = tuple(body["lineage"])
        self.history = tuple(body["history"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.node, name)


class RemoteMemory:
    def __init__(self, url: str, token: str | None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("EVOMEM_URL must be an http(s) URL")
        self._parts = parts
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()  # one kept-alive connection per thread

    @classmethod
    def open(cls, settings: Settings) -> RemoteMemory:
        assert settings.url is not None
        return cls(settings.url, settings.token.get_secret_value() if settings.token else None)

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
            conn = cls(self._parts.hostname or "", self._parts.port, timeout=TIMEOUT_S)
            self._local.conn = conn
        return conn

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        for attempt in (1, 2):  # one reconnect: the server may have closed an idle connection
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=self._headers)
                response = conn.getresponse()
                payload = response.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise TransientError(f"evomem service unreachable: {type(exc).__name__}") from None
        doc = json.loads(payload) if payload else {}
        if response.status < 300:
            return doc
        message = doc.get("error", response.reason)
        if response.status == 422:
            raise InvalidEventError(doc.get("field") or "body", message)
        if response.status == 404:
            raise NotFoundError(message)
        if response.status == 503:
            raise TransientError(message)
        raise EvomemError(f"HTTP {response.status}: {message}")

    # -- the same calls as Memory ----------------------------------------------------------------
    def retrieve(
        self, query: str, namespace: str = "default", *, top_k: int | None = None, budget: int | None = None
    ) -> Retrieval:
        body = {"query": query, "namespace": namespace, "top_k": top_k, "budget": budget}
        doc = self._call("POST", "/v1/retrieve", {k: v for k, v in body.items() if v is not None})
        insights = tuple(
            ScoredInsight(i["id"], i["text"], i["score"], i["support"], i["conflict"])
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
        from evomem.memory import build_event

        event = (
            retrieval
            if isinstance(retrieval, TaskEvent)
            else build_event(retrieval, status, namespace, query, fields)
        )
        return str(self._call("POST", "/v1/events", event.model_dump_json())["event_id"])

    def consolidate(self, max_events: int | None = None) -> ConsolidationReport:
        """Consolidation runs in the service's workers; nothing to do from a client."""
        return ConsolidationReport()

    def insight(self, insight_id: str, namespace: str | None = None) -> RemoteInsight:
        view = RemoteInsight(self._call("GET", f"/v1/insights/{urllib.parse.quote(insight_id)}"))
        if namespace is not None and view.node.namespace != namespace:
            raise NotFoundError(f"no insight {insight_id!r} in namespace {namespace!r}")
        return view

    def lineage(self, insight_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/v1/insights/{urllib.parse.quote(insight_id)}/lineage")["lineage"])

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["RemoteInsight", "RemoteMemory"]
