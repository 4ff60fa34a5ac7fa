"""Wire contracts of evomem: the task event, the graph nodes and the controller decision.

Pydantic models only, no I/O. Their JSON Schemas live in ``schemas/json`` for publishers in other
languages; ``python -m schemas`` writes them and a test keeps them in step.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

SCHEMA_VERSION: Literal[1] = 1

#: Bounds that keep one event from swamping the store or a prompt (DESIGN §3: bounded trajectory).
MAX_QUERY_CHARS = 8_000
MAX_TRAJECTORY_STEPS = 500
MAX_TRAJECTORY_BYTES = 256_000
MAX_INSIGHT_CHARS = 2_000
MAX_TEXT_CHARS = 16_000
MAX_RETRIEVED = 100
MAX_TRAJECTORY_DEPTH = 32

Namespace = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
]
NodeId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
InsightText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_INSIGHT_CHARS)
]
TaskStatus = Literal["resolved", "failed"]
InsightState = Literal["active", "archived"]
Operation = Literal["KEEP", "ARCHIVE", "REVISE"]


def _check_nesting(value: Any, limit: int) -> None:
    """Refuse values nested deeper than ``limit`` (iteratively: a deep value must not exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"trajectory is nested more than {limit} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PartialVerdict(_Strict):
    """The insight helped in part but needs rewording: REVISE with this text, stored verbatim."""

    verdict: Literal["partial"]
    revised_text: InsightText


Verdict = Literal["helpful", "harmful"] | PartialVerdict


class TraceContext(_Strict):
    """W3C trace context of the span that reported the event, so the consolidation that applies it
    continues the same trace (optional; what OpenTelemetry's propagator writes)."""

    traceparent: Annotated[
        str, StringConstraints(pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
    ]
    tracestate: Annotated[str, StringConstraints(max_length=512)] | None = None


TrajectoryStep = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] | dict[str, Any]


class TaskEvent(_Strict):
    """What an agent reports after a task: the input of consolidation (DESIGN §8)."""

    event_id: uuid.UUID = Field(
        default_factory=uuid.uuid4, description="Made by the client; a replay keeps it."
    )
    namespace: Namespace
    query: Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS)]
    query_id: NodeId | None = None
    retrieval_id: NodeId | None = None
    retrieved_insight_ids: Annotated[list[NodeId], Field(max_length=MAX_RETRIEVED)] = []
    status: TaskStatus
    trajectory: Annotated[list[TrajectoryStep], Field(max_length=MAX_TRAJECTORY_STEPS)] = []
    final_answer: Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] | None = None
    feedback: Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] | None = None
    # additionalProperties=false: the schema's patternProperties alone would let a key that is not an
    # insight id through, which the model refuses
    insight_feedback: Annotated[
        dict[NodeId, Verdict],
        Field(max_length=MAX_RETRIEVED, json_schema_extra={"additionalProperties": False}),
    ] = {}
    proposed_insight: InsightText | None = None
    agent_id: Annotated[str, StringConstraints(max_length=128)] | None = None
    occurred_at: datetime = Field(default_factory=utcnow)
    schema_version: Literal[1] = SCHEMA_VERSION
    # left out of the document when absent: an event without one is byte for byte what it was
    trace_context: TraceContext | None = Field(None, exclude_if=lambda v: v is None)

    @field_validator("trajectory")
    @classmethod
    def _bounded_trajectory(cls, steps: list[TrajectoryStep]) -> list[TrajectoryStep]:
        _check_nesting(steps, MAX_TRAJECTORY_DEPTH)
        try:
            size = len(json.dumps(steps, default=str, allow_nan=False).encode())
        except ValueError:
            raise ValueError("trajectory holds NaN or Infinity, which JSON does not allow") from None
        if size > MAX_TRAJECTORY_BYTES:
            raise ValueError(f"trajectory is {size} bytes; at most {MAX_TRAJECTORY_BYTES} are accepted")
        return steps

    @field_validator("occurred_at", mode="before")
    @classmethod
    def _date_time_text(cls, value: Any) -> Any:
        # the JSON Schema says an RFC 3339 string; pydantic alone would also take a number as Unix time
        if isinstance(value, int | float):
            raise ValueError("occurred_at must be an RFC 3339 date-time string")
        return value

    @field_validator("retrieved_insight_ids")
    @classmethod
    def _unique_ids(cls, ids: list[str]) -> list[str]:
        return list(dict.fromkeys(ids))

    def named_insight_ids(self) -> list[str]:
        """Every insight the event refers to, retrieved or judged."""
        return list(dict.fromkeys([*self.retrieved_insight_ids, *self.insight_feedback]))


class QueryNode(_Strict):
    """q = (Q, Ψ, G_inter): a past task, its status and its (bounded) trajectory."""

    id: NodeId
    namespace: Namespace
    text: str
    status: TaskStatus
    trajectory: list[TrajectoryStep] = []
    event_id: str
    created_at: datetime


class InsightNode(_Strict):
    """ι = (κ, Ω⁺, Ω⁻, z) with its version and lineage (paper Eq. 6)."""

    id: NodeId
    namespace: Namespace
    text: str
    state: InsightState
    positive: frozenset[str] = frozenset()
    negative: frozenset[str] = frozenset()
    version: int = 1
    revised_from: str | None = None
    revised_to: str | None = None
    created_by_event: str
    created_at: datetime
    updated_at: datetime
    pinned: bool = Field(False, description="an operator pinned it: no controller archives or revises it")

    @property
    def active(self) -> bool:
        return self.state == "active"


class InsightEdit(_Strict):
    """One verdict on a retrieved insight (paper Eq. 11)."""

    insight_id: NodeId
    operation: Operation
    revised_insight_text: InsightText | None = None
    decided_by: str = "controller"
    inferred: bool = Field(
        False,
        description="inferred from the task's outcome alone, not judged: the evidence is recorded and "
        "ranks, but never counts towards archiving, and an inferred ARCHIVE never archives",
    )

    @model_validator(mode="after")
    def _revise_needs_text(self) -> InsightEdit:
        if self.operation == "REVISE" and not self.revised_insight_text:
            raise ValueError("REVISE needs revised_insight_text")
        return self


class AddDecision(_Strict):
    """The separate ADD decision a ∈ {0, 1} with its text κ̂ (paper Eq. 12)."""

    decision: bool = False
    new_insight_text: InsightText | None = None
    decided_by: str = "controller"

    @model_validator(mode="after")
    def _add_needs_text(self) -> AddDecision:
        if self.decision and not self.new_insight_text:
            raise ValueError("an ADD decision needs new_insight_text")
        return self


class ControllerDecision(_Strict):
    """The controller's whole answer for one event; stored before it is applied."""

    insight_edits: list[InsightEdit] = []
    add_new_insight: AddDecision = AddDecision()
    confidence: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="how sure the controller is of this decision, when it says; a namespace under "
        "review holds every edit of a decision below its review_confidence",
    )

    def edit_for(self, insight_id: str) -> InsightEdit | None:
        return next((e for e in self.insight_edits if e.insight_id == insight_id), None)


ControlAction = Literal["revert", "pin", "unpin", "retire", "approve", "reject"]
ReviewId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


class ControlRequest(_Strict):
    """An operator's request, applied by the workers in order with the task events: revert edits
    (one event's, one edit of it, or every edit of the namespace since a time), pin or unpin an
    insight, retire a stale insight (the staleness sweep's request), approve or reject an edit held
    for review. Nothing is deleted; each request is recorded in the history with who made it."""

    request_id: uuid.UUID = Field(
        default_factory=uuid.uuid4, description="Made by the client; the same request twice is one."
    )
    namespace: Namespace
    action: ControlAction
    by: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="who asks (over HTTP: the token's name)"
    )
    reason: Annotated[str, StringConstraints(max_length=MAX_INSIGHT_CHARS)] | None = None
    event_id: NodeId | None = Field(None, description="revert: the event whose edits are undone")
    insight_id: NodeId | None = Field(
        None, description="pin/unpin: the insight; revert with event_id: only that event's edits of it"
    )
    since: datetime | None = Field(
        None, description="revert: every edit of the namespace applied at or after this time"
    )
    review_id: ReviewId | None = Field(None, description="approve/reject: the held edit")
    expected_version: int | None = Field(
        None, ge=0, description="retire: the insight's version when it was found stale (edited since: no-op)"
    )
    occurred_at: datetime = Field(default_factory=utcnow)
    schema_version: Literal[1] = SCHEMA_VERSION

    @field_validator("since", "occurred_at", mode="before")
    @classmethod
    def _date_time_text(cls, value: Any) -> Any:
        if isinstance(value, int | float):  # the JSON Schema says an RFC 3339 string, not Unix time
            raise ValueError("must be an RFC 3339 date-time string")
        return value

    @model_validator(mode="after")
    def _targets(self) -> ControlRequest:
        if self.action == "revert":
            if (self.event_id is None) == (self.since is None):
                raise ValueError("a revert names either event_id or since")
            if self.since is not None and self.insight_id is not None:
                raise ValueError("a revert since a time takes no insight_id")
            if self.since is not None and self.since.tzinfo is None:
                raise ValueError("since must carry a time zone")
        elif self.action in ("approve", "reject"):
            if self.review_id is None or self.insight_id is not None or self.event_id is not None:
                raise ValueError(f"{self.action} names a review_id and nothing else")
            if self.since is not None:
                raise ValueError(f"{self.action} names a review_id and nothing else")
        elif self.insight_id is None or self.event_id is not None or self.since is not None:
            raise ValueError(f"{self.action} names an insight_id and nothing else")
        if self.action not in ("approve", "reject") and self.review_id is not None:
            raise ValueError("only approve and reject name a review_id")
        if self.action != "retire" and self.expected_version is not None:
            raise ValueError("only retire names an expected_version")
        return self


__all__ = [
    "MAX_TRAJECTORY_BYTES",
    "SCHEMA_VERSION",
    "AddDecision",
    "ControlAction",
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
    "TraceContext",
    "Verdict",
    "utcnow",
]
