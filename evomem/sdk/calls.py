"""The arguments of the SDK's calls, checked alike by the local memory, the remote client and the MCP
tools: ``InvalidEventError`` names the first that is wrong, as the HTTP API does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from evomem.errors import InvalidEventError, reason_of
from evomem.results import Retrieval
from schemas import ControlRequest, TaskEvent
from schemas.models import MAX_QUERY_CHARS, Namespace

MAX_TOP_K = 1000
MAX_BUDGET = 100
_NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)


def check_namespace(namespace: Any) -> str:
    try:
        return _NAMESPACE.validate_python(namespace)
    except ValidationError as exc:
        raise InvalidEventError("namespace", exc.errors()[0]["msg"]) from None


def check_retrieve_args(query: Any, namespace: Any, top_k: Any, budget: Any) -> None:
    """The arguments of ``retrieve``, checked as the HTTP API checks them (``InvalidEventError``
    names the first that is wrong)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidEventError("query", "must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidEventError("query", f"at most {MAX_QUERY_CHARS} characters")
    check_namespace(namespace)
    for name, value, high in (("top_k", top_k, MAX_TOP_K), ("budget", budget, MAX_BUDGET)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high
        ):
            raise InvalidEventError(name, f"must be an integer from 1 to {high}")


def build_event(
    retrieval: Retrieval | str | None,
    status: str | None,
    namespace: str | None,
    query: str | None,
    fields: Mapping[str, Any],
) -> TaskEvent:
    """The task event for ``report``: the retrieval's namespace, query and served ids, plus the
    outcome fields; ``InvalidEventError`` names the first field that is wrong."""
    doc: dict[str, Any] = dict(fields)
    if isinstance(retrieval, str):  # a retrieval id alone: the namespace and query come with it
        doc.setdefault("retrieval_id", retrieval)
        retrieval = None
    elif retrieval is not None and not isinstance(retrieval, Retrieval):
        raise InvalidEventError("retrieval", "must be a Retrieval, a retrieval id, or None")
    if retrieval is not None:
        doc.setdefault("retrieval_id", retrieval.id)
        doc.setdefault("retrieved_insight_ids", [i.id for i in retrieval.insights])
        namespace = retrieval.namespace if namespace is None else namespace
        query = query or retrieval.query
    doc.update({"status": status, "namespace": "default" if namespace is None else namespace, "query": query})
    doc = {k: v for k, v in doc.items() if v is not None}
    try:
        return TaskEvent.model_validate(doc)
    except ValidationError as exc:
        reason, fld = reason_of(exc)
        raise InvalidEventError(fld or "event", reason.split(": ", 1)[-1]) from None


def build_control(action: str, namespace: str, by: str, **fields: Any) -> ControlRequest:
    """The operator's request for ``revert``, ``pin`` and ``unpin``; ``InvalidEventError`` names the
    first field that is wrong."""
    doc = {
        k: v
        for k, v in {"action": action, "namespace": namespace, "by": by, **fields}.items()
        if v is not None
    }
    try:
        return ControlRequest.model_validate(doc)
    except ValidationError as exc:
        reason, fld = reason_of(exc)
        raise InvalidEventError(fld or "request", reason.split(": ", 1)[-1]) from None


__all__ = [
    "MAX_BUDGET",
    "MAX_TOP_K",
    "build_control",
    "build_event",
    "check_namespace",
    "check_retrieve_args",
]
