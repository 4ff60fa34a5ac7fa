"""Wire contracts shared by the SDK, the workers and publishers in other languages."""

from schemas.models import (
    SCHEMA_VERSION,
    AddDecision,
    ControllerDecision,
    ControlRequest,
    InsightEdit,
    InsightNode,
    InsightState,
    Operation,
    PartialVerdict,
    QueryNode,
    TaskEvent,
    TaskStatus,
    Verdict,
)

__all__ = [
    "SCHEMA_VERSION",
    "AddDecision",
    "ControlRequest",
    "ControllerDecision",
    "InsightEdit",
    "InsightNode",
    "InsightState",
    "Operation",
    "PartialVerdict",
    "QueryNode",
    "TaskEvent",
    "TaskStatus",
    "Verdict",
]
