"""Request and response bodies of the HTTP API, and the OpenAPI document built from them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from evomem.results import EditRecord, EventState, LineageStep
from schemas import InsightNode, TaskEvent
from schemas.models import MAX_INSIGHT_CHARS, Namespace, NodeId


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):  # JSON true is no count, though Python takes it for 1
        raise ValueError("Input should be a valid integer")
    return value


def _a_time_text(value: Any) -> Any:
    if isinstance(value, int | float):  # the schema says an RFC 3339 string; pydantic would take Unix time
        raise ValueError("an RFC 3339 date-time string")
    return value


TimeText = Annotated[datetime, BeforeValidator(_a_time_text)]


class RetrieveRequest(_Body):
    query: str = Field(min_length=1, max_length=8000)
    namespace: Namespace = "default"
    top_k: Annotated[int, Field(ge=1, le=1000), BeforeValidator(_not_a_bool)] | None = None
    budget: Annotated[int, Field(ge=1, le=100), BeforeValidator(_not_a_bool)] | None = None
    as_of: TimeText | None = Field(
        None, description="what the memory as it stood then would have served (RFC 3339 with a zone; audit)"
    )


class ServedInsight(_Body):
    id: str
    text: str
    score: float = Field(description="what ranked: s − λc, weighted by similarity under SCORING=weighted")
    support: int = Field(description="s: supporting queries among the similar ones and their neighbours")
    conflict: int = Field(description="c: conflicting queries among them")
    similarity: float = Field(0.0, description="similarity of the most similar supporting query")


class Staleness(_Body):
    projector_lag_s: float = Field(
        description="age of the oldest change not yet in the index; 0 when in step"
    )
    stale: bool = Field(
        False,
        description="the index is further behind than EVOMEM_STALE_AFTER_S: the answer is of the last "
        "state this process has",
    )


class RetrieveResponse(_Body):
    retrieval_id: str
    namespace: str
    insights: list[ServedInsight]
    similar_queries: list[str]
    stale: Staleness
    degraded: str | None = Field(None, description="set when the answer came from Qdrant alone")


class EventAccepted(_Body):
    event_id: str
    entry_id: str


class InsightResponse(_Body):
    insight: InsightNode
    lineage: list[str]
    history: list[EditRecord]


class LineageResponse(_Body):
    id: str
    lineage: list[LineageStep]


class RevertRequest(_Body):
    """Undo an event's edits (with ``insight_id``: only its edits of that insight), or every edit of
    the namespace applied since a time. Nothing is deleted: the inverse edits are applied."""

    namespace: Namespace = "default"
    event_id: NodeId | None = None
    insight_id: NodeId | None = None
    since: TimeText | None = Field(None, description="RFC 3339 with a time zone")
    reason: Annotated[str, Field(max_length=MAX_INSIGHT_CHARS)] | None = None
    request_id: uuid.UUID | None = Field(
        None, description="made by the client: the same id twice is one request"
    )


class PinRequest(_Body):
    reason: Annotated[str, Field(max_length=MAX_INSIGHT_CHARS)] | None = None
    request_id: uuid.UUID | None = Field(
        None, description="made by the client: the same id twice is one request"
    )


class ReviewDecisionRequest(_Body):
    """Approve or reject an edit held for review in ``namespace``; the first decision stands."""

    namespace: Namespace = "default"
    reason: Annotated[str, Field(max_length=MAX_INSIGHT_CHARS)] | None = None
    request_id: uuid.UUID | None = Field(
        None, description="made by the client: the same id twice is one request"
    )


class ReviewItemBody(_Body):
    review_id: str
    namespace: str
    state: str = Field(description="pending | approved | rejected")
    op: str
    insight_id: str | None
    new_id: str | None
    text: str | None
    event_id: str
    decided_by_controller: str
    reason: str = Field(description="why the edit was held")
    held_at: str
    decided_by: str | None = None
    decided_at: str | None = None
    note: str | None = None
    applied_event_id: str | None = Field(None, description="approved: the event it was applied as")


class ReviewsResponse(_Body):
    reviews: list[ReviewItemBody]


class ControlAccepted(_Body):
    request_id: str
    entry_id: str = Field(
        description="the request's entry on the event stream, applied in order with the events"
    )


class SimilarQueryBody(_Body):
    id: str
    text: str | None
    similarity: float


class ServedRecordBody(_Body):
    id: str
    text: str | None
    score: float | None
    support: int | None
    conflict: int | None
    similarity: float | None


class RetrievalAuditResponse(_Body):
    id: str
    namespace: str
    query: str
    at: str | None
    similar: list[SimilarQueryBody]
    insights: list[ServedRecordBody]


class ErrorBody(_Body):
    error: str
    field: str | None = None


class ProjectorHealth(BaseModel):
    status: str = Field(description="following | failing | stopped | dead | not following")
    error: str | None = None
    failures: int = 0


class HealthResponse(BaseModel):
    redis: str = Field(description="ok | unreachable")
    index: str = Field(description="ok, or why the index is not kept in step")
    projector: ProjectorHealth
    projector_lag_s: float


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route of the API: the service's routing and its OpenAPI document are both built from these."""

    method: str
    path: str
    name: str  # the route label of the metrics
    summary: str
    status: int = 200
    request: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    secured: bool = True
    errors: tuple[int, ...] = ()
    media_type: str = "application/json"


#: What each error status means, for the OpenAPI document.
ERROR_TEXT: dict[int, str] = {
    401: "no or unknown token",
    403: "the token may not use this namespace; or, without tokens, a request from another origin or host",
    404: "no such insight or event (or one of another tenant's namespaces); for a revert, no applied event "
    "of that id",
    408: "the body came too slowly",
    413: "the body is larger than EVOMEM_HTTP_MAX_BODY_BYTES",
    415: "the body is not JSON",
    422: "invalid body; `field` names what is wrong",
    429: "the namespace's quota is spent; `Retry-After` says when to try again",
    503: "a store is briefly unreachable",
}

ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec(
        "POST",
        "/v1/retrieve",
        "retrieve",
        "insights for a task, ranked by support minus conflict",
        request=RetrieveRequest,
        response=RetrieveResponse,
        errors=(401, 403, 408, 413, 415, 422, 429, 503),
    ),
    RouteSpec(
        "POST",
        "/v1/events",
        "events",
        "report a task's outcome; consolidated later",
        status=202,
        request=TaskEvent,
        response=EventAccepted,
        errors=(401, 403, 408, 413, 415, 422, 429, 503),
    ),
    RouteSpec(
        "GET",
        "/v1/events/{id}",
        "event",
        "the state of a reported event: queued, applied (its edits) or dead-lettered (the reason)",
        response=EventState,
        errors=(401, 404, 503),
    ),
    RouteSpec(
        "GET",
        "/v1/insights/{id}",
        "insight",
        "an insight with its evidence and history (?as_of=: as it stood then)",
        response=InsightResponse,
        errors=(401, 403, 404, 422, 503),
    ),
    RouteSpec(
        "GET",
        "/v1/insights/{id}/lineage",
        "lineage",
        "the revision chain through an insight",
        response=LineageResponse,
        errors=(401, 403, 404, 503),
    ),
    RouteSpec(
        "GET",
        "/v1/retrievals/{id}",
        "retrieval",
        "what a retrieval served and why (?namespace=, default 'default'), while its record is kept",
        response=RetrievalAuditResponse,
        errors=(401, 403, 404, 422, 503),
    ),
    RouteSpec(
        "POST",
        "/v1/revert",
        "revert",
        "undo an event's edits, or every edit of a namespace since a time, as new edits",
        status=202,
        request=RevertRequest,
        response=ControlAccepted,
        errors=(401, 403, 404, 408, 413, 415, 422, 503),
    ),
    RouteSpec(
        "POST",
        "/v1/insights/{id}/pin",
        "pin",
        "keep an insight as it is: no verdict archives or revises it",
        status=202,
        request=PinRequest,
        response=ControlAccepted,
        errors=(401, 403, 404, 408, 413, 415, 422, 503),
    ),
    RouteSpec(
        "POST",
        "/v1/insights/{id}/unpin",
        "unpin",
        "let verdicts archive or revise a pinned insight again",
        status=202,
        request=PinRequest,
        response=ControlAccepted,
        errors=(401, 403, 404, 408, 413, 415, 422, 503),
    ),
    RouteSpec(
        "GET",
        "/v1/reviews",
        "reviews",
        "the edits held for review in a namespace (?namespace=, ?state=pending|approved|rejected|all)",
        response=ReviewsResponse,
        errors=(401, 403, 422, 503),
    ),
    RouteSpec(
        "POST",
        "/v1/reviews/{id}/approve",
        "approve",
        "apply an edit held for review, once",
        status=202,
        request=ReviewDecisionRequest,
        response=ControlAccepted,
        errors=(401, 403, 404, 408, 413, 415, 422, 503),
    ),
    RouteSpec(
        "POST",
        "/v1/reviews/{id}/reject",
        "reject",
        "drop an edit held for review: its insight stays as it is",
        status=202,
        request=ReviewDecisionRequest,
        response=ControlAccepted,
        errors=(401, 403, 404, 408, 413, 415, 422, 503),
    ),
    RouteSpec(
        "GET",
        "/healthz",
        "healthz",
        "liveness, the state of the stores and of the projector (503 while one is not well)",
        response=HealthResponse,
        secured=False,
        errors=(503,),
    ),
    RouteSpec("GET", "/metrics", "metrics", "Prometheus metrics", secured=False, media_type="text/plain"),
    RouteSpec("GET", "/openapi.json", "openapi", "this document", secured=False),
)


def openapi(routes: tuple[RouteSpec, ...] = ROUTES) -> dict[str, Any]:
    """The OpenAPI document, from the routes and the models they read and answer with."""
    used: list[type[BaseModel]] = [m for r in routes for m in (r.request, r.response) if m is not None]
    models: list[type[BaseModel]] = [*dict.fromkeys(used), ErrorBody]
    _, schema = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )

    def body(model: type[BaseModel]) -> dict[str, Any]:
        return {
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
        }

    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        ok: dict[str, Any] = {"description": r.summary}
        if r.response is not None:
            ok.update(body(r.response))
        elif r.media_type != "application/json":
            ok["content"] = {r.media_type: {"schema": {"type": "string"}}}
        op: dict[str, Any] = {
            "summary": r.summary,
            "operationId": r.name,
            "responses": {
                str(r.status): ok,
                **{str(code): {"description": ERROR_TEXT[code], **body(ErrorBody)} for code in r.errors},
            },
        }
        if r.secured:
            op["security"] = [{"bearer": []}]
        if r.request is not None:
            op["requestBody"] = {"required": True, **body(r.request)}
        if "{id}" in r.path:
            op["parameters"] = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "evomem retrieval service", "version": "1"},
        "components": {
            "schemas": schema.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }


__all__ = [
    "ROUTES",
    "ControlAccepted",
    "ErrorBody",
    "EventAccepted",
    "HealthResponse",
    "InsightResponse",
    "LineageResponse",
    "PinRequest",
    "RetrievalAuditResponse",
    "RetrieveRequest",
    "RetrieveResponse",
    "RevertRequest",
    "RouteSpec",
    "ServedInsight",
    "openapi",
]
