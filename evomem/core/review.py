"""The review queue: which edits of an event a namespace under review holds for an operator, and
how an approved one is applied (as an event of its own, once, whoever approves it how often).

Held (``held_reason``): a REVISE or ARCHIVE of an insight with at least ``review_support``
supporting queries (|Ω⁺|), and every edit of a decision whose controller reports a confidence below
``review_confidence``. The rest of the event applies at once; a held edit's insight keeps serving
as it was. A held edit keeps the plan it was given (its new node's id included), so approving it
applies what would have been applied, at the time of approval, through the same script: its event
id is derived from the review id, so the same approval twice (or two approvals) applies it once,
and a revert of that event undoes it like any other edit. A review is decided once: approved or
rejected, the first decision stands, and a later contrary one changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evomem.core.editing import ID_NAMESPACE, EditPlan, PlannedEdit
from evomem.results import ReviewItem

#: ``decided_by`` of an explicit verdict carried by the event (``evomem.core.decisions``).
FEEDBACK = "feedback"

ReviewState = Literal["pending", "approved", "rejected"]
Verdict = Literal["approved", "rejected"]


class HeldEdit(BaseModel):
    """One edit held for review, with what applying it needs from the event that made it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    review_id: str
    namespace: str
    event_id: str  # the event whose edit it is
    query_id: str
    status: Literal["resolved", "failed"]
    retrieved: list[str]
    edit: PlannedEdit
    reason: str  # why it was held
    held_at: datetime


class ReviewDecision(BaseModel):
    """The operator's decision on a held edit: the first one stands."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: Verdict
    by: str
    at: datetime
    note: str | None = None


class Review(BaseModel):
    """A held edit as an operator lists it: pending, approved or rejected, by whom."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    held: HeldEdit
    decision: ReviewDecision | None = None

    @property
    def state(self) -> ReviewState:
        return "pending" if self.decision is None else self.decision.state

    @property
    def applied_event_id(self) -> str | None:
        """The event an approval applied it as (what a revert names)."""
        return approval_event_id(self.held.review_id) if self.state == "approved" else None


def review_item(review: Review) -> ReviewItem:
    """A review as the SDK, the CLI, HTTP and MCP show it."""
    h, d = review.held, review.decision
    return ReviewItem(
        review_id=h.review_id,
        namespace=h.namespace,
        state=review.state,
        op=h.edit.op,
        insight_id=h.edit.insight_id,
        new_id=h.edit.new_id,
        text=h.edit.text,
        event_id=h.event_id,
        decided_by_controller=h.edit.decided_by,
        reason=h.reason,
        held_at=h.held_at.isoformat(),
        decided_by=d.by if d else None,
        decided_at=d.at.isoformat() if d else None,
        note=d.note if d else None,
        applied_event_id=review.applied_event_id,
    )


def review_id_for(namespace: str, event_id: str, edit: PlannedEdit) -> str:
    """The same edit of the same event is the same review, however often the event is delivered."""
    target = edit.insight_id or edit.new_id or ""
    return str(uuid.uuid5(ID_NAMESPACE, f"review:{namespace}:{event_id}:{edit.op}:{target}"))


def approval_event_id(review_id: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"approve:{review_id}"))


def held_reason(
    edit: PlannedEdit,
    support: Mapping[str, int],
    confidence: float | None,
    *,
    review_support: int,
    review_confidence: float,
) -> str | None:
    """Why a namespace under review holds this edit, or None when it applies at once."""
    # the controller's confidence is about its own edits, not the verdicts the event carried
    if confidence is not None and confidence < review_confidence and edit.decided_by != FEEDBACK:
        return f"the controller's confidence {confidence:g} is below {review_confidence:g}"
    if edit.op in ("REVISE", "ARCHIVE") and edit.insight_id is not None:
        n = support.get(edit.insight_id, 0)
        if n >= review_support:
            return f"{edit.op} of an insight with {n} supporting queries (from {review_support})"
    return None


def split_plan(
    plan: EditPlan,
    support: Mapping[str, int],
    confidence: float | None,
    held_before: set[str],
    *,
    review_support: int,
    review_confidence: float,
    at: datetime,
) -> tuple[EditPlan, list[HeldEdit]]:
    """The plan without its held edits, and those edits. An edit held at an earlier delivery of the
    event stays held (``held_before``: review ids), whatever the insight's support is now."""
    kept: list[PlannedEdit] = []
    held: list[HeldEdit] = []
    for edit in plan.edits:
        rid = review_id_for(plan.namespace, plan.event_id, edit)
        reason = held_reason(
            edit, support, confidence, review_support=review_support, review_confidence=review_confidence
        )
        if rid in held_before and reason is None:
            reason = "held at an earlier delivery of its event"
        if reason is None:
            kept.append(edit)
            continue
        held.append(
            HeldEdit(
                review_id=rid,
                namespace=plan.namespace,
                event_id=plan.event_id,
                query_id=plan.query_id,
                status=plan.status,
                retrieved=plan.retrieved,
                edit=edit,
                reason=reason,
                held_at=at,
            )
        )
    if not held:
        return plan, []
    return plan.model_copy(update={"edits": kept}), held


def approval_plan(
    held: HeldEdit,
    decision: ReviewDecision,
    *,
    archive_policy: Literal["evidence", "immediate"],
    archive_ratio: float,
    archive_min: int,
    archive_streak: int,
    archived_repeats: Literal["evidence", "restore", "new"],
) -> EditPlan:
    """The held edit as an event of its own, under the namespace's editing settings in force now.
    Its query exists already (the event that held the edit made it), and it counts no serve: the
    task was served once, when it was reported."""
    edit = held.edit.model_copy(update={"decided_by": f"{held.edit.decided_by}, approved by {decision.by}"})
    return EditPlan(
        event_id=approval_event_id(held.review_id),
        namespace=held.namespace,
        query_id=held.query_id,
        query_text="",
        status=held.status,
        trajectory_json="[]",
        similar=[],
        retrieved=held.retrieved,
        served=False,
        edits=[edit],
        archive_policy=archive_policy,
        archive_ratio=archive_ratio,
        archive_min=archive_min,
        archive_streak=archive_streak,
        archived_repeats=archived_repeats,
        at=decision.at,
    )


__all__ = [
    "HeldEdit",
    "Review",
    "ReviewDecision",
    "ReviewState",
    "Verdict",
    "approval_event_id",
    "approval_plan",
    "held_reason",
    "review_id_for",
    "review_item",
    "split_plan",
]
