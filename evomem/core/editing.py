"""Graph editing, paper §3.4 (Eq. 13-18): from a controller decision to an edit plan.

The plan is the complete, deterministic description of what one event does to the graph. Stores
apply it atomically and idempotently (``GraphStore.apply``); the rules that depend on the state at
apply time — the evidence policy and edits on superseded nodes — are written down here and
implemented identically by every store (the contract suite checks that):

* KEEP    q → Ω⁺ (Eq. 17). On an archived node the evidence is recorded and the node stays
          archived; if the node was revised, q is also forwarded to the active tip of its revision
          chain, so the insight that replaced it gets the credit.
* ARCHIVE q → Ω⁻. ``immediate`` (the paper, Eq. 13) deactivates at once; ``evidence`` deactivates
          only once the judged negatives reach max(m, ρ·judged positives) (m = ``archive_min``), so
          an active node can carry conflict and λ acts on it, and one wrong verdict does not retire a
          good insight — or once its last judgements in a row were harmful, s of them
          (s = ``archive_streak``) plus one per power of ten of its judged support
          (``streak_needed``): what helped before and harms now (drift) goes after a few harms
          instead of ρ·|judged Ω⁺|. Judged: decided by a verdict or the LLM, or the creating
          event; an edit ``inferred`` from the outcome alone (the rule controller's) adds its evidence — which
          ranks — but counts for neither side of that threshold, and an inferred ARCHIVE never
          deactivates: an irreversible edit needs a judge.
* REVISE  old: q → Ω⁻, z=0 (Eq. 14); new node κ′ with Ω⁺ ∪ {q}, ∅, z=1 (Eq. 15). A node that is
          already archived is not revised again (that would fork its lineage): q → Ω⁻ only. If the
          revised text is already (or nearly) an active insight of the namespace, the old node is
          revised into it (its Ω⁺ and q join that insight's Ω⁺) instead of making a twin.
          A revised or absorbing node records what it took Ω⁺ over from (``inherits``), so
          retrieval, which reads evidence from the query side, finds it through those queries.
* ADD     (κ̂, {q}, ∅, 1) (Eq. 16). If an active insight of the namespace has the same normalised
          text, or nearly the same (``twin``, found before the plan is applied: see
          ``evomem.core.duplicates``), no twin is made; q → Ω⁺ of that insight instead, judged if the
          task was resolved and inferred if it failed (the query that taught a lesson finds it again).
          With ``archived_repeats="evidence"`` (the default setting) a text that nearly repeats an
          *archived* insight and no active one makes no node either: q → Ω⁺ of the archived insight,
          judged or inferred as above, which stays archived, and, if it was revised, of the active
          tip of its revision chain too. A lesson the memory retired for the harm it did does not
          come back with a clean slate each time an agent proposes it again. With ``"restore"``
          the same, and a judged repeat that leaves the insight's judged negatives below
          max(m, ρ·judged positives) makes it active again (``restored``): archived by the evidence
          policy, not revised, it comes back only on the record that retired it, outweighed.
* Edges   when Ψ = resolved, (ι_a, ι_b, q) for every retrieved ι_a and every new or revised ι_b (Eq. 18).
* Queries a query with a retrieval record is linked both ways to the similar queries it retrieved,
          each edge weighted by their cosine; one reported without (``similar`` None) is linked by
          the projector once it is indexed. Each query keeps its ``degree`` most similar
          neighbours (0: all), so the expansion of Eq. 3 stays bounded however popular a query is.
* Events  an event id is applied once per namespace; the same id with other content (``digest``)
          is refused, never merged with the first.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evomem.core.hashing import word_features
from schemas import ControllerDecision, TaskEvent

#: Fixed namespace for every id evomem derives, so the same event gives the same ids everywhere.
ID_NAMESPACE = uuid.UUID("6f1d3c52-8a3e-4f4e-9a57-2d0c1e7b9a11")

PlanOp = Literal["KEEP", "ARCHIVE", "REVISE", "ADD"]


class PlannedEdit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    op: PlanOp
    insight_id: str | None = None  # the existing node (KEEP/ARCHIVE/REVISE)
    new_id: str | None = None  # the node created (REVISE/ADD)
    text: str | None = None  # κ′ or κ̂
    text_key: str | None = None  # digest of the normalised text, for ADD de-duplication
    inferred: bool = False  # from the outcome alone: evidence that ranks, never grounds to archive
    twin: str | None = None  # an active insight whose text nearly repeats ``text``, found before apply
    bands: list[str] = []  # near-duplicate buckets of ``text``, registered when a node is created
    words: list[int] = []  # its word 1-2-gram features, counted when a node is created (text relevance)
    decided_by: str


class EditPlan(BaseModel):
    """Everything one event does to the graph, resolved to ids before it reaches a store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    namespace: str
    query_id: str
    query_text: str
    status: Literal["resolved", "failed"]
    trajectory_json: str
    similar: list[str] | None  # Qˢ of this query, linked both ways; None: unknown, the projector links it
    similar_scores: list[float] | None = None  # the cosine of each similar query (edge weights)
    query_vector: str | None = None  # the task's dense vector its retrieval computed (pack_vector)
    degree: int = 0  # neighbours a query keeps (the most similar); 0: all
    digest: str | None = None  # of the event's content: the same event id with other content is refused
    retrieved: list[str]  # I_t^ret, for the edge update
    served: bool = True  # count a serve of each retrieved insight (staleness); an approval's: False
    edits: list[PlannedEdit]
    archive_policy: Literal["evidence", "immediate"]
    archive_ratio: float
    archive_min: int = 1  # judged negatives needed at least before the evidence policy archives
    archive_streak: int = 0  # judged negatives in a row that archive whatever the support (0: never)
    # an ADD whose twin is archived: evidence there (restore: and active again once outweighed)
    archived_repeats: Literal["evidence", "restore", "new"] = "new"
    at: datetime

    def to_json(self) -> str:
        return self.model_dump_json()


def query_id_for(event: TaskEvent) -> str:
    """The event's query id, or one derived from the event (query ids are scoped to a namespace)."""
    return event.query_id or str(uuid.uuid5(ID_NAMESPACE, f"query:{event.event_id}"))


def added_insight_id(namespace: str, event_id: str) -> str:
    """Insight ids are unique across namespaces: two tenants may pick the same event id."""
    return str(uuid.uuid5(ID_NAMESPACE, f"add:{namespace}:{event_id}"))


def revised_insight_id(namespace: str, event_id: str, old_id: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"revise:{namespace}:{event_id}:{old_id}"))


def event_digest(event: TaskEvent) -> str:
    """What makes an event the event it is: everything but the time it was stamped with and the trace
    it was reported in, so a client that retries with a fresh ``occurred_at`` (or in a new span) still
    reports the same event."""
    doc = event.model_dump(mode="json", exclude={"occurred_at", "trace_context"})
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(raw.encode(), digest_size=16).hexdigest()


def text_key(text: str) -> str:
    """Digest of an insight's text with case, punctuation and spacing ignored."""
    normalised = " ".join(re.findall(r"\w+", text.lower()))
    return hashlib.blake2b(normalised.encode(), digest_size=16).hexdigest()


def plan_edits(
    event: TaskEvent,
    decision: ControllerDecision,
    *,
    retrieved: list[str],
    similar: list[str] | None,
    allowed_operations: Collection[str],
    archive_policy: Literal["evidence", "immediate"],
    archive_ratio: float,
    at: datetime,
    archive_min: int = 1,
    archive_streak: int = 0,
    archived_repeats: Literal["evidence", "restore", "new"] = "new",
    similar_scores: list[float] | None = None,
    query_vector: str | None = None,
    degree: int = 0,
    twins: Mapping[str, str] | None = None,
    bands: Mapping[str, list[str]] | None = None,
) -> EditPlan:
    """Turn a decision into a plan. Edits naming an insight outside ``retrieved`` are dropped, as
    are edits whose operation is disabled (the ablations of paper Figure 3): the insight is left as
    it is and nothing is recorded. The first edit for an insight wins. ``twins`` and ``bands``, by
    text key: the near-duplicate found for a new text, and the buckets its node is registered in."""
    event_id = str(event.event_id)
    ns = event.namespace
    twins = twins or {}
    bands = bands or {}
    retrieved_set = set(retrieved)
    edits: list[PlannedEdit] = []
    seen: set[str] = set()
    for edit in decision.insight_edits:
        if edit.insight_id not in retrieved_set or edit.insight_id in seen:
            continue
        seen.add(edit.insight_id)
        if edit.operation not in allowed_operations:
            continue
        if edit.operation == "REVISE":
            key = text_key(edit.revised_insight_text or "")
            edits.append(
                PlannedEdit(
                    op="REVISE",
                    insight_id=edit.insight_id,
                    new_id=revised_insight_id(ns, event_id, edit.insight_id),
                    text=edit.revised_insight_text,
                    text_key=key,
                    twin=twins.get(key),
                    bands=bands.get(key, []),
                    words=sorted(word_features(edit.revised_insight_text or "")),
                    decided_by=edit.decided_by,
                )
            )
        else:
            edits.append(
                PlannedEdit(
                    op=edit.operation,
                    insight_id=edit.insight_id,
                    inferred=edit.inferred,
                    decided_by=edit.decided_by,
                )
            )
    add = decision.add_new_insight
    if add.decision and add.new_insight_text:
        key = text_key(add.new_insight_text)
        edits.append(
            PlannedEdit(
                op="ADD",
                new_id=added_insight_id(ns, event_id),
                text=add.new_insight_text,
                text_key=key,
                twin=twins.get(key),
                bands=bands.get(key, []),
                words=sorted(word_features(add.new_insight_text)),
                decided_by=add.decided_by,
            )
        )
    query_id = query_id_for(event)
    links: dict[str, float] | None = None
    if similar is not None:
        scores = similar_scores if similar_scores is not None else [1.0] * len(similar)
        links = {}
        for q, w in zip(similar, scores, strict=True):
            if q != query_id:
                links[q] = max(float(w), links.get(q, 0.0))
    return EditPlan(
        event_id=event_id,
        namespace=ns,
        query_id=query_id,
        query_text=event.query,
        status=event.status,
        trajectory_json=json.dumps(event.trajectory, default=str),
        similar=None if links is None else list(links),
        similar_scores=None if links is None else list(links.values()),
        query_vector=query_vector,
        degree=degree,
        digest=event_digest(event),
        retrieved=list(dict.fromkeys(retrieved)),
        edits=edits,
        archive_policy=archive_policy,
        archive_ratio=archive_ratio,
        archive_min=archive_min,
        archive_streak=archive_streak,
        archived_repeats=archived_repeats,
        at=at,
    )


def archive_threshold_reached(
    negatives: int, positives: int, ratio: float, minimum: int = 1, *, run: int = 0, streak: int = 0
) -> bool:
    """The evidence policy over judged evidence: archive once negatives ≥ max(m, ρ·positives), or
    once a run of judged negatives (``run``: since the last judged positive) reaches
    ``streak_needed`` (``streak`` 0: never)."""
    if negatives >= max(float(minimum), ratio * positives):
        return True
    return streak > 0 and run >= streak_needed(streak, positives)


def streak_needed(streak: int, positives: int) -> int:
    """The run of judged harms that archives an insight with this many judged positives: ``streak``,
    plus one for each power of ten of its support (10 positives: s + 1, 100: s + 2). A judge wrong
    one time in ten gives an insight judged n times about n·10⁻ˢ runs of s wrong verdicts, so the
    run must grow with the record for the most used insights not to be lost to that noise, as a
    fixed s would lose them sooner or later."""
    return streak + len(str(max(positives, 1))) - 1


__all__ = [
    "ID_NAMESPACE",
    "EditPlan",
    "PlannedEdit",
    "added_insight_id",
    "archive_threshold_reached",
    "event_digest",
    "plan_edits",
    "query_id_for",
    "revised_insight_id",
    "streak_needed",
    "text_key",
]
