"""Request and response bodies of the HTTP API, and the OpenAPI document built from them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from schemas import InsightNode, TaskEvent
from schemas.models import Namespace


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrieveRequest(_Body):
    query: str = Field(min_length=1, max_length=8000)
    namespace: Namespace = "default"
    top_k: int | None = Field(None, ge=1, le=1000)
    budget: int | None = Field(None, ge=1, le=100)


class ServedInsight(_Body):
    id: str
    text: str
    score: float
    support: int
    conflict: int


class Staleness(_Body):
    projector_lag_s: float = Field(
        description="age of the oldest change not yet in the index; 0 when in step"
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


class EditRecordBody(_Body):
    event_id: str
    op: str
    outcome: str
    insight_id: str | None
    new_id: str | None
    query_id: str
    decided_by: str
    at: str


class InsightResponse(_Body):
    insight: InsightNode
    lineage: list[str]
    history: list[EditRecordBody]


class LineageEntry(_Body):
    id: str
    text: str
    state: str
    version: int


class LineageResponse(_Body):
    id: str
    lineage: list[LineageEntry]


class ErrorBody(_Body):
    error: str
    field: str | None = None


def openapi() -> dict[str, Any]:
    models: list[type[BaseModel]] = [
        RetrieveRequest,
        RetrieveResponse,
        TaskEvent,
        EventAccepted,
        InsightResponse,
        LineageResponse,
        ErrorBody,
    ]
    _, schema = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    ref = "#/components/schemas/{}".format

    def body(name: str) -> dict[str, Any]:
        return {"content": {"application/json": {"schema": {"$ref": ref(name)}}}}

    errors = {
        str(code): {"description": text, **body("ErrorBody")}
        for code, text in (
            (401, "no or unknown token"),
            (403, "the token may not use this namespace"),
            (422, "invalid body; `field` names what is wrong"),
            (503, "a store is briefly unreachable"),
        )
    }
    secured: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "evomem retrieval service", "version": "1"},
        "components": {
            "schemas": schema.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/v1/retrieve": {
                "post": {
                    "summary": "insights for a task, ranked by support minus conflict",
                    "security": secured,
                    "requestBody": body("RetrieveRequest"),
                    "responses": {
                        "200": {"description": "ranked insights", **body("RetrieveResponse")},
                        **errors,
                    },
                }
            },
            "/v1/events": {
                "post": {
                    "summary": "report a task's outcome; consolidated later",
                    "security": secured,
                    "requestBody": body("TaskEvent"),
                    "responses": {"202": {"description": "accepted", **body("EventAccepted")}, **errors},
                }
            },
            "/v1/insights/{id}": {
                "get": {
                    "summary": "an insight with its evidence and history",
                    "security": secured,
                    "parameters": [_id_param()],
                    "responses": {
                        "200": {"description": "the insight", **body("InsightResponse")},
                        "404": {"description": "no such insight"},
                        **errors,
                    },
                }
            },
            "/v1/insights/{id}/lineage": {
                "get": {
                    "summary": "the revision chain through an insight",
                    "security": secured,
                    "parameters": [_id_param()],
                    "responses": {
                        "200": {"description": "oldest first", **body("LineageResponse")},
                        "404": {"description": "no such insight"},
                        **errors,
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "liveness and the state of the stores",
                    "responses": {"200": {"description": "healthy"}, "503": {"description": "degraded"}},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {"200": {"description": "text exposition format"}},
                }
            },
        },
    }


def _id_param() -> dict[str, Any]:
    return {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}


__all__ = [
    "ErrorBody",
    "EventAccepted",
    "InsightResponse",
    "LineageResponse",
    "RetrieveRequest",
    "RetrieveResponse",
    "ServedInsight",
    "openapi",
]
