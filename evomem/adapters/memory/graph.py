"""In-memory graph store: the reference semantics of ``GraphStore.apply`` and the serial model.

It holds the rules of ``evomem.core.editing`` in plain Python. The Redis store implements the same rules
in a Lua script; the contract suite runs the same tests against both, which is what makes this
one a trustworthy model for the delivery tests.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import TypeAdapter

from evomem.core.editing import EditPlan, PlannedEdit, archive_threshold_reached
from evomem.core.hashing import word_features
from evomem.core.lifecycle import AppliedEdit, AppliedEvent, ControlPlan, ControlResult
from evomem.core.ports import (
    RECENT_EVENTS,
    ApplyResult,
    Change,
    EditOutcome,
    EditRecord,
    EventKey,
    InsightHead,
    InsightPoint,
    QualitySignal,
    QueryPoint,
    RetrievalRecord,
    StoredDecision,
)
from evomem.core.review import HeldEdit, Review, ReviewDecision
from evomem.core.rollback import Snapshot
from evomem.core.staleness import ServedCounts
from evomem.errors import InvalidEventError
from schemas import InsightNode, QueryNode

MAX_CHAIN = 32
_AT = TypeAdapter(datetime)


@dataclass
class _Insight:
    id: str
    namespace: str
    text: str
    state: str
    created_by_event: str
    created_at: datetime
    updated_at: datetime
    positive: set[str] = field(default_factory=set)
    negative: set[str] = field(default_factory=set)
    inherits: set[str] = field(default_factory=set)
    judged_positive: int = 0  # what the evidence policy weighs (not what was inferred from outcomes)
    judged_negative: int = 0
    harm_run: int = 0  # judged negatives since the last judged positive
    version: int = 1
    revised_from: str | None = None
    revised_to: str | None = None
    pinned: bool = False
    served: int = 0  # reported tasks it was served to (what staleness reads)
    helped: int = 0  # of those, the ones whose event credited it (KEEP)
    served_at: datetime | None = None

    def freeze(self) -> InsightNode:
        return InsightNode(
            id=self.id,
            namespace=self.namespace,
            text=self.text,
            state=self.state,
            positive=frozenset(self.positive),
            negative=frozenset(self.negative),
            version=self.version,
            revised_from=self.revised_from,
            revised_to=self.revised_to,
            created_by_event=self.created_by_event,
            created_at=self.created_at,
            updated_at=self.updated_at,
            pinned=self.pinned,
        )


@dataclass
class _Query:
    node: QueryNode
    version: int = 0
    supports: set[str] = field(default_factory=set)
    harms: set[str] = field(default_factory=set)
    neighbours: dict[str, float] = field(default_factory=dict)
    unlinked: bool = False
    vector: str | None = None  # the task's vector its retrieval computed (pack_vector)


class _Event:
    """What one plan's application changes, for the change feed."""

    def __init__(self) -> None:
        self.changed: dict[str, int] = {}  # insights whose served fields changed -> version
        self.query_changed = False


class InMemoryGraphStore:
    """A ``GraphStore`` in a dict, safe across threads (one lock, like one Redis)."""

    def __init__(self, degree: int = 0) -> None:
        self.degree = degree
        self._lock = threading.Lock()
        self._insights: dict[str, _Insight] = {}
        self._queries: dict[EventKey, _Query] = {}
        self._edges: dict[str, set[tuple[str, str]]] = {}
        self._texts: dict[tuple[str, str], str] = {}
        self._bands: dict[tuple[str, str], set[str]] = {}
        self._words: dict[str, Counter[int]] = {}  # per namespace: feature -> insights holding it
        self._counted: Counter[str] = Counter()  # per namespace: insights counted (all of them)
        self._applied: dict[EventKey, tuple[ApplyResult, str | None]] = {}
        self._decisions: dict[EventKey, StoredDecision] = {}
        self._retrievals: dict[EventKey, RetrievalRecord] = {}
        self._history: list[EditRecord] = []
        self._changes: list[Change] = []
        self._recent: dict[str, list[tuple[int, int, int]]] = {}  # namespace -> newest first
        self._applied_query: dict[EventKey, str] = {}  # the query of each applied event
        self._applied_log: list[tuple[str, str, datetime]] = []  # (namespace, event id, at), in order
        self._controls: dict[EventKey, ControlResult] = {}  # (namespace, request id) -> its result
        self._reverted: set[EventKey] = set()  # (namespace, edit key) of every edit reverted
        self._held: dict[EventKey, HeldEdit] = {}  # (namespace, review id) -> the edit held
        self._swept: float | None = None  # when the last staleness sweep was claimed
        self._review_decisions: dict[EventKey, ReviewDecision] = {}

    # -- writes ------------------------------------------------------------------------------
    def apply(self, plan: EditPlan) -> ApplyResult:
        with self._lock:
            done = self._applied.get((plan.namespace, plan.event_id))
            if done is not None:
                result, digest = done
                if plan.digest is not None and digest is not None and digest != plan.digest:
                    raise InvalidEventError(
                        "event_id", f"event {plan.event_id} was applied before with other content"
                    )
                return ApplyResult(plan.event_id, True, result.outcomes, result.created)
            ev = _Event()
            query = self._put_query(plan, ev)
            outcomes: list[EditOutcome] = []
            created: list[str] = []
            at = _AT.dump_python(plan.at, mode="json")  # the plan's JSON form, as the Redis store records it
            for edit in plan.edits:
                outcome = self._apply_edit(plan, query, edit, ev)
                evidence_of_add = edit.op == "ADD" and outcome.outcome != "added"
                judged = plan.status == "resolved" if evidence_of_add else not edit.inferred
                outcome = dataclasses.replace(outcome, judged=judged)
                outcomes.append(outcome)
                if outcome.outcome in ("revised", "added"):
                    assert outcome.new_id is not None
                    created.append(outcome.new_id)
                self._history.append(
                    EditRecord(
                        plan.event_id,
                        edit.op,
                        outcome.outcome,
                        outcome.insight_id,
                        outcome.new_id or outcome.forwarded_to,
                        plan.query_id,
                        edit.decided_by,
                        at,
                    )
                )
            helped = {o.insight_id for o in outcomes if o.op == "KEEP" and o.outcome != "rejected"}
            for served in plan.retrieved if plan.served else ():  # what staleness reads (apply.lua)
                node = self._node(plan, served)
                if node is not None:
                    node.served += 1
                    node.served_at = plan.at
                    node.helped += served in helped
            if plan.status == "resolved":
                linked = [
                    o.new_id for o in outcomes if o.outcome in ("added", "revised", "merged") and o.new_id
                ]
                for b in linked:
                    for a in plan.retrieved:
                        if a != b and self._node(plan, a) is not None:
                            self._edges.setdefault(b, set()).add((a, plan.query_id))
            harmed = sum(1 for o in outcomes if o.op not in ("ADD", "KEEP") and o.outcome != "rejected")
            retired = sum(1 for o in outcomes if o.outcome in ("archived", "revised", "merged"))
            recent = self._recent.setdefault(plan.namespace, [])
            recent.insert(0, (len(plan.retrieved), harmed, retired))
            del recent[RECENT_EVENTS:]
            if ev.query_changed:
                query.version += 1
                self._feed("query", plan.namespace, plan.query_id, query.version)
            for node_id, version in ev.changed.items():
                self._feed("insight", plan.namespace, node_id, version)
            result = ApplyResult(plan.event_id, False, tuple(outcomes), tuple(created))
            self._applied[(plan.namespace, plan.event_id)] = (result, plan.digest)
            self._applied_query[(plan.namespace, plan.event_id)] = plan.query_id
            if plan.edits:
                self._applied_log.append((plan.namespace, plan.event_id, plan.at))
            return result

    def _feed(self, kind: Literal["insight", "query"], namespace: str, node_id: str, version: int) -> None:
        self._changes.append(Change(str(len(self._changes) + 1), kind, namespace, node_id, version))

    def _put_query(self, plan: EditPlan, ev: _Event) -> _Query:
        ref = (plan.namespace, plan.query_id)
        query = self._queries.get(ref)
        if query is None:
            node = QueryNode(
                id=plan.query_id,
                namespace=plan.namespace,
                text=plan.query_text,
                status=plan.status,
                trajectory=json.loads(plan.trajectory_json),
                event_id=plan.event_id,
                created_at=plan.at,
            )
            query = self._queries[ref] = _Query(node, unlinked=plan.similar is None, vector=plan.query_vector)
            ev.query_changed = True
        scores = plan.similar_scores or [1.0] * len(plan.similar or ())
        for other, w in zip(plan.similar or (), scores, strict=True):
            peer = self._queries.get((plan.namespace, other))
            if other != plan.query_id and peer is not None:
                self._link(query, peer, w)
                self._link(peer, query, w)
        return query

    def _link(self, a: _Query, b: _Query, w: float) -> None:
        nbrs = a.neighbours
        nbrs[b.node.id] = max(w, nbrs.get(b.node.id, float("-inf")))
        if self.degree and len(nbrs) > self.degree:
            # keep the ``degree`` most similar, as ZREMRANGEBYRANK on the ascending (score, member) order
            order = sorted(nbrs.items(), key=lambda kv: (kv[1], kv[0]))
            for member, _ in order[: len(nbrs) - self.degree]:
                del nbrs[member]

    def _node(self, plan: EditPlan, insight_id: str | None) -> _Insight | None:
        node = self._insights.get(insight_id or "")
        return node if node is not None and node.namespace == plan.namespace else None

    def _touch(self, node: _Insight, plan: EditPlan, ev: _Event, visible: bool) -> None:
        node.version += 1
        node.updated_at = plan.at
        if visible or node.id in ev.changed:
            ev.changed[node.id] = node.version

    def _positive(self, node: _Insight, query: _Query, ev: _Event, judged: bool = True) -> None:
        if judged and query.node.id not in node.positive:
            node.judged_positive += 1
            node.harm_run = 0
        node.positive.add(query.node.id)
        query.supports.add(node.id)
        ev.query_changed = True

    def _negative(self, node: _Insight, query: _Query, ev: _Event, judged: bool = True) -> None:
        if judged and query.node.id not in node.negative:
            node.judged_negative += 1
            node.harm_run += 1
        node.negative.add(query.node.id)
        query.harms.add(node.id)
        ev.query_changed = True

    def _inherit(self, to: _Insight, source: _Insight) -> None:
        to.judged_positive += source.judged_positive
        to.positive |= source.positive
        to.inherits |= {source.id} | source.inherits

    def _apply_edit(self, plan: EditPlan, query: _Query, edit: PlannedEdit, ev: _Event) -> EditOutcome:
        if edit.op == "ADD":
            assert edit.new_id and edit.text and edit.text_key
            twin = self._active_twin(plan, edit)
            archived = self._archived_twin(plan, edit) if twin is None else None
            if archived is not None:
                # evidence of the archived insight (and of what replaced it), never a fresh start
                judged = plan.status == "resolved"
                self._positive(archived, query, ev, judged)
                tip = self._active_tip(archived)
                restored = tip is None and self._restores(plan, archived, judged)
                if restored:
                    archived.state = "active"
                self._touch(archived, plan, ev, restored)
                if restored:
                    return EditOutcome("ADD", archived.id, "restored")
                if tip is None:
                    return EditOutcome("ADD", archived.id, "evidence_only")
                self._positive(tip, query, ev, judged)
                self._touch(tip, plan, ev, False)
                return EditOutcome("ADD", archived.id, "forwarded", forwarded_to=tip.id)
            if twin is not None:
                # evidence as a new node's would be (Eq. 16); judged only from a resolved task
                self._positive(twin, query, ev, plan.status == "resolved")
                self._touch(twin, plan, ev, False)
                return EditOutcome("ADD", twin.id, "duplicate")
            new = self._create(plan, edit, None, ev)
            self._positive(new, query, ev)
            self._texts[(plan.namespace, edit.text_key)] = edit.new_id
            return EditOutcome("ADD", None, "added", new_id=edit.new_id)
        node = self._node(plan, edit.insight_id)
        if node is None:
            return EditOutcome(edit.op, edit.insight_id, "rejected")
        judged = not edit.inferred
        if edit.op == "KEEP":
            self._positive(node, query, ev, judged)
            self._touch(node, plan, ev, False)
            if node.state == "active":
                return EditOutcome("KEEP", node.id, "kept")
            tip = self._active_tip(node)
            if tip is not None:
                self._positive(tip, query, ev, judged)
                self._touch(tip, plan, ev, False)
                return EditOutcome("KEEP", node.id, "forwarded", forwarded_to=tip.id)
            return EditOutcome("KEEP", node.id, "evidence_only")
        # ARCHIVE and REVISE both record q as negative evidence.
        self._negative(node, query, ev, judged)
        if node.pinned:  # an operator's pin: the evidence is kept, the insight stays as it is
            self._touch(node, plan, ev, False)
            return EditOutcome(edit.op, node.id, "pinned")
        was_active = node.state == "active"
        twin = self._active_twin(plan, edit) if edit.op == "REVISE" and was_active else None
        if twin is not None and twin is not node:
            node.state = "archived"
            node.revised_to = twin.id
            self._touch(node, plan, ev, True)
            self._inherit(twin, node)
            self._positive(twin, query, ev)
            self._touch(twin, plan, ev, True)
            return EditOutcome("REVISE", node.id, "merged", new_id=twin.id)
        if edit.op == "REVISE" and was_active:
            assert edit.new_id and edit.text
            node.state = "archived"
            node.revised_to = edit.new_id
            self._touch(node, plan, ev, True)
            new = self._create(plan, edit, node.id, ev)
            self._inherit(new, node)
            self._positive(new, query, ev)
            if edit.text_key:
                self._texts[(plan.namespace, edit.text_key)] = edit.new_id
            return EditOutcome("REVISE", node.id, "revised", new_id=edit.new_id)
        if (
            was_active
            and judged
            and (
                plan.archive_policy == "immediate"
                or archive_threshold_reached(
                    node.judged_negative,
                    node.judged_positive,
                    plan.archive_ratio,
                    plan.archive_min,
                    run=node.harm_run,
                    streak=plan.archive_streak,
                )
            )
        ):
            node.state = "archived"
            self._touch(node, plan, ev, True)
            return EditOutcome(edit.op, node.id, "archived")
        self._touch(node, plan, ev, False)
        return EditOutcome(edit.op, node.id, "negative_evidence")

    def _active_twin(self, plan: EditPlan, edit: PlannedEdit) -> _Insight | None:
        """The same normalised text first, else the near twin found before the plan."""
        for candidate in (self._texts.get((plan.namespace, edit.text_key or "")), edit.twin):
            twin = self._node(plan, candidate)
            if twin is not None and twin.state == "active":
                return twin
        return None

    def _archived_twin(self, plan: EditPlan, edit: PlannedEdit) -> _Insight | None:
        """With ``archived_repeats="evidence"``, the archived insight a text repeats when no active
        one does: the last node of the same normalised text, else the near twin found before."""
        if plan.archived_repeats == "new":
            return None
        for candidate in (self._texts.get((plan.namespace, edit.text_key or "")), edit.twin):
            twin = self._node(plan, candidate)
            if twin is not None:
                return twin
        return None

    @staticmethod
    def _restores(plan: EditPlan, node: _Insight, judged: bool) -> bool:
        """``archived_repeats="restore"``: a judged repeat of an insight the evidence policy archived
        (not revised) restores it once its judged negatives no longer reach the threshold."""
        return (
            plan.archived_repeats == "restore"
            and judged
            and plan.archive_policy == "evidence"
            and node.revised_to is None
            and not archive_threshold_reached(
                node.judged_negative, node.judged_positive, plan.archive_ratio, plan.archive_min
            )
        )

    def _active_tip(self, node: _Insight) -> _Insight | None:
        current = node
        for _ in range(MAX_CHAIN):
            if current.revised_to is None:
                break
            nxt = self._insights.get(current.revised_to)
            if nxt is None:
                break
            current = nxt
        return current if current is not node and current.state == "active" else None

    def _create(self, plan: EditPlan, edit: PlannedEdit, parent: str | None, ev: _Event) -> _Insight:
        assert edit.new_id and edit.text
        node = self._insights[edit.new_id] = _Insight(
            id=edit.new_id,
            namespace=plan.namespace,
            text=edit.text,
            state="active",
            created_by_event=plan.event_id,
            created_at=plan.at,
            updated_at=plan.at,
            revised_from=parent,
        )
        for band in edit.bands:
            self._bands.setdefault((plan.namespace, band), set()).add(edit.new_id)
        self._words.setdefault(plan.namespace, Counter()).update(edit.words)
        self._counted[plan.namespace] += 1
        ev.changed[edit.new_id] = 1
        return node

    # -- a namespace as it stood at a time (evomem.core.rollback) -----------------------------------------
    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, degree: int = 0) -> InMemoryGraphStore:
        """A store holding one namespace's snapshot, every node announced on its change feed (a
        projector then builds the read model of that time from it)."""
        store = cls(degree)
        ns = snapshot.namespace
        for q, node in snapshot.queries.items():
            query = _Query(node, version=1, supports=set(snapshot.supports[q]), harms=set(snapshot.harms[q]))
            query.neighbours = dict(snapshot.neighbours.get(q, {}))
            store._queries[(ns, q)] = query
            store._feed("query", ns, q, 1)
        words: Counter[int] = Counter()
        for i, n in snapshot.insights.items():
            store._insights[i] = _Insight(
                id=i,
                namespace=ns,
                text=n.text,
                state=n.state,
                created_by_event=n.created_by_event,
                created_at=n.created_at,
                updated_at=n.updated_at,
                positive=set(n.positive),
                negative=set(n.negative),
                inherits=set(snapshot.inherits.get(i, ())),
                version=1,
                revised_from=n.revised_from,
                revised_to=n.revised_to,
                pinned=n.pinned,
            )
            words.update(word_features(n.text))
            store._feed("insight", ns, i, 1)
        store._words[ns] = words
        store._counted[ns] = len(snapshot.insights)
        return store

    # -- control requests (evomem.core.lifecycle) ---------------------------------------------------
    def applied_events(self, namespace: str, event_ids: Collection[str]) -> dict[str, AppliedEvent]:
        with self._lock:
            out: dict[str, AppliedEvent] = {}
            for e in event_ids:
                done = self._applied.get((namespace, e))
                if done is None:
                    continue
                edits = tuple(
                    AppliedEdit(o.op, o.outcome, o.insight_id, o.new_id, o.forwarded_to, o.judged)
                    for o in done[0].outcomes
                )
                out[e] = AppliedEvent(e, self._applied_query[(namespace, e)], edits)
            return out

    def events_since(self, namespace: str, since: datetime) -> list[str]:
        with self._lock:
            found = [e for ns, e, at in self._applied_log if ns == namespace and at >= since]
            return list(dict.fromkeys(found))

    def apply_control(self, plan: ControlPlan) -> ControlResult:
        with self._lock:
            ns = plan.namespace
            done = self._controls.get((ns, plan.request_id))
            if done is not None:
                return dataclasses.replace(done, replayed=True)
            at = _AT.dump_python(plan.at, mode="json")
            changed: dict[str, int] = {}
            queries: set[str] = set()
            reverted = skipped = 0
            pin_changed = False
            for step in plan.steps:
                if (ns, step.key) in self._reverted:
                    skipped += 1
                    continue
                self._reverted.add((ns, step.key))
                reverted += 1
                for action in step.actions:
                    node = self._insights.get(action.insight_id)
                    if node is None or node.namespace != ns:
                        continue
                    visible = False
                    if action.kind in ("-pos", "-neg"):
                        self._withdraw(node, step.query_id, action.kind == "-neg", step.judged, queries)
                    elif action.kind == "activate" and node.state != "active":
                        node.state, visible = "active", True
                        if step.outcome == "stale":  # its serves counted afresh, as control.lua does
                            node.served, node.served_at = 0, plan.at
                    elif action.kind == "archive" and node.state == "active":
                        node.state, visible = "archived", True
                    node.version += 1
                    node.updated_at = plan.at
                    if visible or node.id in changed:
                        changed[node.id] = node.version
                self._history.append(
                    EditRecord(
                        plan.request_id,
                        "REVERT",
                        "reverted",
                        step.insight_id,
                        step.new_id,
                        step.query_id,
                        plan.by,
                        at,
                        step.note,
                        step.outcome,
                    )
                )
            if plan.action in ("pin", "unpin"):
                node = self._insights.get(plan.insight_id or "")
                want = plan.action == "pin"
                if node is not None and node.namespace == ns and node.pinned != want:
                    node.pinned = want
                    node.version += 1
                    node.updated_at = plan.at
                    pin_changed = True
                    outcome = "pinned" if want else "unpinned"
                    self._history.append(
                        EditRecord(
                            plan.request_id,
                            plan.action.upper(),
                            outcome,
                            node.id,
                            None,
                            "",
                            plan.by,
                            at,
                            plan.note,
                        )
                    )
            if plan.action == "retire":
                pin_changed = self._retire(plan, at, changed)
            for q in sorted(queries):
                query = self._queries[(ns, q)]
                query.version += 1
                self._feed("query", ns, q, query.version)
            for node_id, version in changed.items():
                self._feed("insight", ns, node_id, version)
            result = ControlResult(plan.request_id, False, reverted, skipped, pin_changed)
            self._controls[(ns, plan.request_id)] = result
            return result

    def _retire(self, plan: ControlPlan, at: str, changed: dict[str, int]) -> bool:
        """The staleness sweep's archive (control.lua's ``retire``), an edit of its own."""
        node = self._insights.get(plan.insight_id or "")
        if (
            node is None
            or node.namespace != plan.namespace
            or node.state != "active"
            or node.pinned
            or (plan.expected_version is not None and node.version != plan.expected_version)
        ):
            return False
        node.state = "archived"
        node.version += 1
        node.updated_at = plan.at
        changed[node.id] = node.version
        self._history.append(
            EditRecord(plan.request_id, "ARCHIVE", "stale", node.id, None, "", plan.by, at, plan.note)
        )
        outcome = EditOutcome("ARCHIVE", node.id, "stale", judged=False)
        key = (plan.namespace, plan.request_id)
        self._applied[key] = (ApplyResult(plan.request_id, False, (outcome,), ()), None)
        self._applied_query[key] = ""
        self._applied_log.append((plan.namespace, plan.request_id, plan.at))
        return True

    # -- the review queue and staleness ----------------------------------------------------------
    def hold(self, held: Sequence[HeldEdit]) -> None:
        with self._lock:
            for h in held:
                self._held.setdefault((h.namespace, h.review_id), h)

    def held_ids(self, namespace: str, review_ids: Collection[str]) -> set[str]:
        with self._lock:
            return {i for i in review_ids if (namespace, i) in self._held}

    def reviews(self, namespace: str) -> list[Review]:
        with self._lock:
            out = [
                Review(held=h, decision=self._review_decisions.get(key))
                for key, h in self._held.items()
                if key[0] == namespace
            ]
        return sorted(out, key=lambda r: (r.held.held_at, r.held.review_id))

    def decide_review(self, namespace: str, review_id: str, decision: ReviewDecision) -> Review | None:
        with self._lock:
            held = self._held.get((namespace, review_id))
            if held is None:
                return None
            stands = self._review_decisions.setdefault((namespace, review_id), decision)
            return Review(held=held, decision=stands)

    def served_records(self, namespace: str) -> list[ServedCounts]:
        with self._lock:
            return [
                ServedCounts(
                    n.id,
                    n.state,
                    n.pinned,
                    n.version,
                    n.served,
                    n.helped,
                    n.served_at or n.created_at,
                )
                for n in self._insights.values()
                if n.namespace == namespace and n.state == "active"
            ]

    def claim_sweep(self, every_s: float) -> bool:
        with self._lock:
            now = time.monotonic()
            if every_s > 0 and self._swept is not None and now - self._swept < every_s:
                return False
            self._swept = now
            return True

    def _withdraw(
        self, node: _Insight, query_id: str, negative: bool, judged: bool, queries: set[str]
    ) -> None:
        evidence = node.negative if negative else node.positive
        if query_id in evidence:
            evidence.discard(query_id)
            if judged and negative:
                node.judged_negative = max(0, node.judged_negative - 1)
                node.harm_run = max(0, node.harm_run - 1)
            elif judged:
                node.judged_positive = max(0, node.judged_positive - 1)
        query = self._queries.get((node.namespace, query_id))
        if query is not None:
            (query.harms if negative else query.supports).discard(node.id)
            queries.add(query_id)

    def apply_many(self, plans: Collection[EditPlan]) -> list[ApplyResult | Exception]:
        out: list[ApplyResult | Exception] = []
        for plan in plans:
            try:
                out.append(self.apply(plan))
            except InvalidEventError as exc:
                out.append(exc)
        return out

    def save_decisions(self, decisions: Mapping[EventKey, StoredDecision]) -> dict[EventKey, StoredDecision]:
        with self._lock:
            return {ref: self._decisions.setdefault(ref, d) for ref, d in decisions.items()}

    def load_decisions(self, events: Collection[EventKey]) -> dict[EventKey, StoredDecision]:
        with self._lock:
            return {ref: self._decisions[ref] for ref in events if ref in self._decisions}

    def load_retrievals(self, retrievals: Collection[EventKey]) -> dict[EventKey, RetrievalRecord]:
        with self._lock:
            return {ref: self._retrievals[ref] for ref in retrievals if ref in self._retrievals}

    def link_queries(self, namespace: str, query_id: str, similar: Mapping[str, float]) -> None:
        with self._lock:
            query = self._queries.get((namespace, query_id))
            if query is None:
                return
            for other, w in similar.items():
                peer = self._queries.get((namespace, other))
                if other != query_id and peer is not None:
                    self._link(query, peer, float(w))
                    self._link(peer, query, float(w))
            query.unlinked = False

    def unlinked(self, namespace: str, query_ids: Collection[str]) -> set[str]:
        with self._lock:
            return {
                q
                for q in query_ids
                if (found := self._queries.get((namespace, q))) is not None and found.unlinked
            }

    def save_retrieval(self, record: RetrievalRecord, ttl_s: int) -> None:
        with self._lock:
            self._retrievals[(record.namespace, record.id)] = record

    # -- reads for consolidation and retrieval ---------------------------------------------------
    def heads(self, namespace: str, ids: Collection[str]) -> dict[str, InsightHead]:
        with self._lock:
            out = {}
            for i in ids:
                n = self._insights.get(i)
                if n is not None and n.namespace == namespace:
                    out[i] = InsightHead(
                        n.id,
                        n.namespace,
                        n.text,
                        n.state,
                        n.version,
                        len(n.positive),
                        len(n.negative),
                        n.judged_positive,
                        n.judged_negative,
                    )
            return out

    def word_counts(self, namespace: str, features: Collection[int]) -> tuple[int, dict[int, int]] | None:
        with self._lock:
            words = self._words.get(namespace)
            if words is None:  # as on Redis: no insight counted yet
                return None
            return self._counted[namespace], {f: words[f] for f in features if words[f]}

    def word_table(self, namespace: str, limit: int) -> tuple[int, dict[int, int]] | None:
        with self._lock:
            words = self._words.get(namespace)
            held = {f: n for f, n in words.items() if n} if words is not None else {}
            if words is None or len(held) > limit:
                return None
            return self._counted[namespace], held

    def count_words(self, namespace: str) -> bool:
        with self._lock:
            nodes = [n for n in self._insights.values() if n.namespace == namespace]
            self._words[namespace] = Counter(f for n in nodes for f in word_features(n.text))
            self._counted[namespace] = len(nodes)
        return True

    def duplicate_candidates(self, namespace: str, bands: Collection[str]) -> set[str]:
        with self._lock:
            return {i for b in bands for i in self._bands.get((namespace, b), ())}

    def neighbours(self, namespace: str, query_ids: Collection[str]) -> dict[str, dict[str, float]]:
        with self._lock:
            out = {}
            for q in query_ids:
                found = self._queries.get((namespace, q))
                out[q] = dict(found.neighbours) if found is not None else {}
            return out

    def load_retrieval(self, namespace: str, retrieval_id: str) -> RetrievalRecord | None:
        with self._lock:
            return self._retrievals.get((namespace, retrieval_id))

    def is_applied(self, namespace: str, event_id: str) -> bool:
        with self._lock:
            return (namespace, event_id) in self._applied

    def applied_result(self, namespace: str, event_id: str) -> ApplyResult | None:
        with self._lock:
            found = self._applied.get((namespace, event_id))
        return None if found is None else found[0]

    def recent_quality(self, namespace: str) -> QualitySignal:
        with self._lock:
            rows = self._recent.get(namespace, [])
            return QualitySignal(len(rows), *(sum(r[i] for r in rows) for i in range(3)))

    # -- projection ------------------------------------------------------------------------------
    def changes(self, after: str, count: int) -> list[Change]:
        with self._lock:
            start = 0 if after in ("", "0-0") else int(after)  # "0-0": a projector's first cursor
            return self._changes[start : start + count]

    def query_points(self, refs: Collection[EventKey]) -> dict[EventKey, QueryPoint]:
        with self._lock:
            out = {}
            for ref in refs:
                q = self._queries.get(ref)
                if q is not None:
                    out[ref] = QueryPoint(
                        q.node.id,
                        q.node.namespace,
                        q.node.text,
                        q.node.status,
                        q.version,
                        tuple(sorted(q.supports)),
                        tuple(sorted(q.harms)),
                        q.vector,
                    )
            return out

    def insight_points(self, refs: Collection[EventKey]) -> dict[EventKey, InsightPoint]:
        with self._lock:
            out = {}
            for ns, i in refs:
                n = self._insights.get(i)
                if n is not None and n.namespace == ns:
                    out[(ns, i)] = InsightPoint(
                        n.id, ns, n.text, n.state, n.version, tuple(sorted(n.inherits))
                    )
            return out

    # -- inspection --------------------------------------------------------------------------------
    def insights(self, ids: Collection[str]) -> dict[str, InsightNode]:
        with self._lock:
            return {i: self._insights[i].freeze() for i in ids if i in self._insights}

    def queries(self, namespace: str, ids: Collection[str]) -> dict[str, QueryNode]:
        with self._lock:
            return {i: q.node for i in ids if (q := self._queries.get((namespace, i))) is not None}

    def states(self, ids: Collection[str]) -> dict[str, str]:
        with self._lock:
            return {i: self._insights[i].state for i in ids if i in self._insights}

    def namespace_of(self, ids: Collection[str]) -> dict[str, str]:
        with self._lock:
            return {i: self._insights[i].namespace for i in ids if i in self._insights}

    def history(self, insight_id: str) -> list[EditRecord]:
        with self._lock:
            # a rejected edit named a node it could not touch: it stays out of that node's history
            return [
                h for h in self._history if insight_id in (h.insight_id, h.new_id) and h.outcome != "rejected"
            ]

    def lineage(self, insight_id: str) -> list[str]:
        with self._lock:
            node = self._insights.get(insight_id)
            if node is None:
                return []
            chain = [node.id]
            back = node
            while back.revised_from and len(chain) < MAX_CHAIN and back.revised_from in self._insights:
                back = self._insights[back.revised_from]
                chain.insert(0, back.id)
            fwd = node
            while fwd.revised_to and len(chain) < 2 * MAX_CHAIN and fwd.revised_to in self._insights:
                fwd = self._insights[fwd.revised_to]
                chain.append(fwd.id)
            return chain

    def edges_into(self, insight_id: str) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._edges.get(insight_id, ()))

    def namespaces(self) -> set[str]:
        with self._lock:
            return {n.namespace for n in self._insights.values()} | {ns for ns, _ in self._queries}

    def insight_ids(self, namespace: str) -> set[str]:
        with self._lock:
            return {i for i, n in self._insights.items() if n.namespace == namespace}

    def query_ids(self, namespace: str) -> set[str]:
        with self._lock:
            return {q for ns, q in self._queries if ns == namespace}

    def close(self) -> None:
        return None


__all__ = ["InMemoryGraphStore"]
