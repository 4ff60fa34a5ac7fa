"""What the MCP tools do, apart from MCP: retrieve, report and inspect for one principal, against the
local stores or a retrieval service (either backend of ``Memory``). No MCP import here, so the
tools' behaviour is plain, typed code."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from evomem.errors import EvomemError, InvalidEventError, NotFoundError
from evomem.results import EditRecord, EventState, LineageStep, Retrieval
from evomem.sdk import Memory
from evomem.sdk.calls import check_namespace
from evomem.service.auth import Forbidden, Principal
from schemas.models import MAX_INSIGHT_CHARS

#: Retrievals this process served, remembered so a report may name only the retrieval id.
SERVED_MEMORY = 10_000
EVIDENCE_SHOWN = 20


class ServedInsightOut(BaseModel):
    id: str
    text: str
    score: float = Field(description="support minus the weighted conflict penalty")
    support: int
    conflict: int


class RetrieveOut(BaseModel):
    retrieval_id: str = Field(description="pass it to report_outcome")
    namespace: str
    prompt: str = Field(description="the insights rendered for a prompt, each with its id")
    insights: list[ServedInsightOut]


class VerdictIn(BaseModel):
    """One served insight judged by the agent."""

    insight_id: str = Field(min_length=1, max_length=128)
    verdict: Literal["helpful", "harmful", "partial"] = Field(
        description="helpful: keep it; harmful: it misled the task; partial: right in part, reword it"
    )
    revised_text: str | None = Field(
        None, max_length=MAX_INSIGHT_CHARS, description="the reworded insight; required with partial"
    )


class ReportOut(BaseModel):
    event_id: str
    namespace: str
    status: str = Field(description="accepted: it is consolidated in the background")


class InsightOut(BaseModel):
    id: str
    namespace: str
    text: str
    state: str
    version: int
    helped: int = Field(description="|Ω⁺|: past queries it helped")
    harmed: int = Field(description="|Ω⁻|: past queries it harmed")
    helped_queries: list[str] = Field(description="some of them (their text where known)")
    harmed_queries: list[str]
    lineage: list[LineageStep] = Field(description="the revision chain, oldest first")
    history: list[EditRecord] = Field(description="the edits applied to it, oldest first")


class ControlOut(BaseModel):
    request_id: str
    namespace: str
    action: str
    status: str = Field(description="accepted: the workers apply it in order with the reported events")


class ReviewsOut(BaseModel):
    namespace: str
    reviews: list[dict[str, Any]] = Field(
        description="each held edit: review_id, state, op, insight_id, text, reason, event_id, ..."
    )


@dataclass(frozen=True, slots=True)
class _Served:
    namespace: str
    query: str
    insight_ids: tuple[str, ...]


class ToolBackend:
    """The three tools' work for a principal. Thread-safe: MCP runs synchronous tools in threads."""

    def __init__(self, memory: Memory, default_namespace: str = "default") -> None:
        self.memory = memory
        self.default_namespace = default_namespace
        self._served: OrderedDict[str, _Served] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def remote(self) -> bool:
        return self.memory.remote

    def namespace_for(self, principal: Principal, namespace: str | None) -> str:
        """The namespace a call acts on: the one named, else the principal's only one, else the default."""
        if namespace is None:
            only = sorted(principal.namespaces)
            namespace = only[0] if len(only) == 1 and not principal.admin else self.default_namespace
        namespace = check_namespace(namespace)
        principal.check(namespace)
        return namespace

    # -- the tools -------------------------------------------------------------------------------
    def retrieve(
        self, principal: Principal, query: str, namespace: str | None = None, budget: int | None = None
    ) -> RetrieveOut:
        ns = self.namespace_for(principal, namespace)
        r = self.memory.retrieve(query, ns, budget=budget)
        self._remember(r)
        return RetrieveOut(
            retrieval_id=r.id,
            namespace=r.namespace,
            prompt=render(r),
            insights=[
                ServedInsightOut(id=i.id, text=i.text, score=i.score, support=i.support, conflict=i.conflict)
                for i in r.insights
            ],
        )

    def report(
        self,
        principal: Principal,
        status: str,
        *,
        retrieval_id: str | None = None,
        query: str | None = None,
        namespace: str | None = None,
        verdicts: list[VerdictIn] | None = None,
        proposed_insight: str | None = None,
        final_answer: str | None = None,
        feedback: str | None = None,
        trajectory: list[str] | None = None,
    ) -> ReportOut:
        served = self._recall(retrieval_id) if retrieval_id else None
        if served is not None and namespace is None:
            namespace = served.namespace
        ns = self.namespace_for(principal, namespace)
        if served is not None and served.namespace != ns:
            served = None  # a retrieval of another namespace: never lend its query or its ids
        query = query or (served.query if served else None)
        if not query:
            raise InvalidEventError("query", "required unless retrieval_id names a retrieval of this server")
        fields: dict[str, Any] = {
            "retrieval_id": retrieval_id,
            "retrieved_insight_ids": list(served.insight_ids) if served else None,
            "insight_feedback": feedback_of(verdicts or []) or None,
            "proposed_insight": proposed_insight,
            "final_answer": final_answer,
            "feedback": feedback,
            "trajectory": trajectory or None,
            "agent_id": f"mcp:{principal.name}"[:128],  # who reported, for the audit trail
        }
        event_id = self.memory.report(None, status=status, namespace=ns, query=query, **fields)
        return ReportOut(event_id=event_id, namespace=ns, status="accepted")

    def inspect(self, principal: Principal, insight_id: str) -> InsightOut:
        missing = NotFoundError(f"no insight {insight_id!r}")
        try:
            view = self.memory.insight(insight_id)
        except NotFoundError:
            raise missing from None
        node = view.node
        if not principal.may(node.namespace):  # another tenant's insight does not exist for this caller
            raise missing
        helped, harmed = sorted(node.positive), sorted(node.negative)
        texts = self._query_texts(node.namespace, [*helped[:EVIDENCE_SHOWN], *harmed[:EVIDENCE_SHOWN]])
        return InsightOut(
            id=node.id,
            namespace=node.namespace,
            text=node.text,
            state=node.state,
            version=node.version,
            helped=len(helped),
            harmed=len(harmed),
            helped_queries=[texts.get(q, q) for q in helped[:EVIDENCE_SHOWN]],
            harmed_queries=[texts.get(q, q) for q in harmed[:EVIDENCE_SHOWN]],
            lineage=self.memory.lineage(insight_id),
            history=list(view.history),
        )

    def revert(
        self,
        principal: Principal,
        *,
        event_id: str | None = None,
        since: str | None = None,
        insight_id: str | None = None,
        namespace: str | None = None,
        reason: str | None = None,
    ) -> ControlOut:
        ns = self.namespace_for(principal, namespace)
        when = None
        if since is not None:
            try:
                when = datetime.fromisoformat(since)
            except ValueError:
                raise InvalidEventError("since", "an ISO 8601 time with its zone") from None
        request_id = self.memory.revert(
            event_id,
            namespace=ns,
            insight_id=insight_id,
            since=when,
            by=f"mcp:{principal.name}"[:128],
            reason=reason,
        )
        self.on_report()
        return ControlOut(request_id=request_id, namespace=ns, action="revert", status="accepted")

    def pin(
        self, principal: Principal, insight_id: str, pinned: bool, reason: str | None = None
    ) -> ControlOut:
        missing = NotFoundError(f"no insight {insight_id!r}")
        try:
            node = self.memory.insight(insight_id).node
        except NotFoundError:
            raise missing from None
        if not principal.may(node.namespace):  # another tenant's insight does not exist for this caller
            raise missing
        call = self.memory.pin if pinned else self.memory.unpin
        request_id = call(
            insight_id, namespace=node.namespace, by=f"mcp:{principal.name}"[:128], reason=reason
        )
        self.on_report()
        action = "pin" if pinned else "unpin"
        return ControlOut(request_id=request_id, namespace=node.namespace, action=action, status="accepted")

    def reviews(self, principal: Principal, namespace: str | None, state: str | None) -> ReviewsOut:
        ns = self.namespace_for(principal, namespace)
        items = self.memory.reviews(ns, state=state)
        return ReviewsOut(namespace=ns, reviews=[i.as_dict() for i in items])

    def review(
        self,
        principal: Principal,
        review_id: str,
        approve: bool,
        namespace: str | None = None,
        reason: str | None = None,
    ) -> ControlOut:
        ns = self.namespace_for(principal, namespace)
        call = self.memory.approve if approve else self.memory.reject
        request_id = call(review_id, namespace=ns, by=f"mcp:{principal.name}"[:128], reason=reason)
        self.on_report()
        action = "approve" if approve else "reject"
        return ControlOut(request_id=request_id, namespace=ns, action=action, status="accepted")

    def event(self, principal: Principal, event_id: str) -> EventState:
        """The state of a reported event; another tenant's event does not exist for this caller."""
        try:
            state = self.memory.event(event_id)
        except NotFoundError:
            raise NotFoundError(f"no event {event_id!r}") from None
        if not principal.may(state.namespace):
            raise NotFoundError(f"no event {event_id!r}")
        return state

    # -- helpers ---------------------------------------------------------------------------------
    def _query_texts(self, namespace: str, ids: list[str]) -> dict[str, str]:
        return self.memory.backend.query_texts(namespace, ids)  # a remote memory: none, ids only

    def _remember(self, r: Retrieval) -> None:
        with self._lock:
            self._served[r.id] = _Served(r.namespace, r.query, tuple(i.id for i in r.insights))
            while len(self._served) > SERVED_MEMORY:
                self._served.popitem(last=False)

    def _recall(self, retrieval_id: str) -> _Served | None:
        with self._lock:
            return self._served.get(retrieval_id)

    def on_report(self) -> None:
        """Called after each report; a local backend consolidates then (``LocalToolBackend``)."""

    def close(self) -> None:
        self.memory.close()


def render(r: Retrieval) -> str:
    """The prompt block of a retrieval, each insight with the id a verdict names it by."""
    if not r.insights:
        return "No insight from similar past tasks yet."
    lines = ["Insights from similar past tasks (most reliable first):"]
    lines += [f"{n}. [{i.id}] {i.text}" for n, i in enumerate(r.insights, 1)]
    lines.append(f"(retrieval {r.id}: report the outcome with it, judging the insights by their ids)")
    return "\n".join(lines)


def feedback_of(verdicts: list[VerdictIn]) -> dict[str, Any]:
    """The event's ``insight_feedback`` from the tool's verdict list."""
    out: dict[str, Any] = {}
    for v in verdicts:
        if v.verdict == "partial":
            if not v.revised_text or not v.revised_text.strip():
                raise InvalidEventError("verdicts", f"a partial verdict on {v.insight_id} needs revised_text")
            out[v.insight_id] = {"verdict": "partial", "revised_text": v.revised_text}
        else:
            out[v.insight_id] = v.verdict
    return out


def describe(exc: BaseException) -> str:
    """What a tool's caller is told about an error: the SDK's message for ours, nothing internal else."""
    if isinstance(exc, InvalidEventError):
        return f"invalid {exc.field}: {exc.message}"
    if isinstance(exc, Forbidden | EvomemError):
        return str(exc)
    return "internal error"


__all__ = [
    "ControlOut",
    "InsightOut",
    "ReportOut",
    "RetrieveOut",
    "ToolBackend",
    "VerdictIn",
    "describe",
    "feedback_of",
    "render",
]
