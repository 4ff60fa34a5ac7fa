"""In-memory graph store: the reference semantics of ``GraphStore.apply`` and the serial model.

It holds the rules of ``evomem.editing`` in plain Python. The Redis store implements the same rules
in a Lua script; the contract suite runs the same tests against both, which is what makes this
one a trustworthy model for the delivery tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import TypeAdapter

from evomem.editing import EditPlan, PlannedEdit, archive_threshold_reached
from evomem.errors import InvalidEventError
from evomem.ports import ApplyResult, Change, EditOutcome, EditRecord, RetrievalRecord
from schemas import ControllerDecision, InsightNode, QueryNode

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
    version: int = 1
    revised_from: str | None = None
    revised_to: str | None = None

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
        )


class InMemoryGraphStore:
    """A ``GraphStore`` in a dict, safe across threads (one lock, like one Redis)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._insights: dict[str, _Insight] = {}
        self._queries: dict[str, QueryNode] = {}
        self._neighbours: dict[str, set[str]] = {}
        self._edges: dict[str, set[tuple[str, str]]] = {}
        self._texts: dict[tuple[str, str], str] = {}
        self._applied: dict[str, ApplyResult] = {}
        self._decisions: dict[str, ControllerDecision] = {}
        self._retrievals: dict[str, RetrievalRecord] = {}
        self._history: list[EditRecord] = []
        self._changes: list[Change] = []
        self._unlinked: set[str] = set()

    # -- writes ------------------------------------------------------------------------------
    def apply(self, plan: EditPlan) -> ApplyResult:
        with self._lock:
            done = self._applied.get(plan.event_id)
            if done is not None:
                return ApplyResult(plan.event_id, True, done.outcomes, done.created)
            peer = self._queries.get(plan.query_id)
            if peer is not None and peer.namespace != plan.namespace:
                # namespace is immutable on a node: an event may not reuse another namespace's query id
                raise InvalidEventError("query_id", f"query {plan.query_id} belongs to another namespace")
            changed: dict[str, int] = {}
            self._put_query(plan)
            outcomes: list[EditOutcome] = []
            created: list[str] = []
            at = _AT.dump_python(plan.at, mode="json")  # the plan's JSON form, as the Redis store records it
            for edit in plan.edits:
                outcome = self._apply_edit(plan, edit, changed)
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
            if plan.status == "resolved":
                linked = [
                    o.new_id for o in outcomes if o.outcome in ("added", "revised", "merged") and o.new_id
                ]
                for b in linked:
                    for a in plan.retrieved:
                        if a != b and a in self._insights and self._insights[a].namespace == plan.namespace:
                            self._edges.setdefault(b, set()).add((a, plan.query_id))
            for node_id, version in changed.items():
                self._changes.append(Change(str(len(self._changes) + 1), "insight", node_id, version))
            result = ApplyResult(plan.event_id, False, tuple(outcomes), tuple(created))
            self._applied[plan.event_id] = result
            return result

    def _put_query(self, plan: EditPlan) -> None:
        if plan.query_id not in self._queries:
            self._queries[plan.query_id] = QueryNode(
                id=plan.query_id,
                namespace=plan.namespace,
                text=plan.query_text,
                status=plan.status,
                trajectory=json.loads(plan.trajectory_json),
                event_id=plan.event_id,
                created_at=plan.at,
            )
            self._changes.append(Change(str(len(self._changes) + 1), "query", plan.query_id, 1))
            if plan.similar is None:
                self._unlinked.add(plan.query_id)
        for other in plan.similar or ():
            peer = self._queries.get(other)
            if peer is None or peer.namespace != plan.namespace:
                continue
            self._neighbours.setdefault(plan.query_id, set()).add(other)
            self._neighbours.setdefault(other, set()).add(plan.query_id)

    def _node(self, plan: EditPlan, insight_id: str | None) -> _Insight | None:
        node = self._insights.get(insight_id or "")
        return node if node is not None and node.namespace == plan.namespace else None

    def _touch(self, node: _Insight, plan: EditPlan, changed: dict[str, int]) -> None:
        node.version += 1
        node.updated_at = plan.at
        changed[node.id] = node.version

    def _apply_edit(self, plan: EditPlan, edit: PlannedEdit, changed: dict[str, int]) -> EditOutcome:
        q = plan.query_id
        if edit.op == "ADD":
            assert edit.new_id and edit.text and edit.text_key
            twin = self._active_twin(plan, edit.text_key)
            if twin is not None:
                if plan.status == "resolved":
                    twin.positive.add(q)
                    self._touch(twin, plan, changed)
                return EditOutcome("ADD", twin.id, "duplicate")
            self._create(plan, edit.new_id, edit.text, {q}, None, changed)
            self._texts[(plan.namespace, edit.text_key)] = edit.new_id
            return EditOutcome("ADD", None, "added", new_id=edit.new_id)
        node = self._node(plan, edit.insight_id)
        if node is None:
            return EditOutcome(edit.op, edit.insight_id, "rejected")
        if edit.op == "KEEP":
            node.positive.add(q)
            self._touch(node, plan, changed)
            if node.state == "active":
                return EditOutcome("KEEP", node.id, "kept")
            tip = self._active_tip(node)
            if tip is not None:
                tip.positive.add(q)
                self._touch(tip, plan, changed)
                return EditOutcome("KEEP", node.id, "forwarded", forwarded_to=tip.id)
            return EditOutcome("KEEP", node.id, "evidence_only")
        # ARCHIVE and REVISE both record q as negative evidence.
        node.negative.add(q)
        was_active = node.state == "active"
        twin = self._active_twin(plan, edit.text_key) if edit.op == "REVISE" and was_active else None
        if twin is not None and twin is not node:
            node.state = "archived"
            node.revised_to = twin.id
            self._touch(node, plan, changed)
            twin.positive |= node.positive | {q}
            self._touch(twin, plan, changed)
            return EditOutcome("REVISE", node.id, "merged", new_id=twin.id)
        if edit.op == "REVISE" and was_active:
            assert edit.new_id and edit.text
            node.state = "archived"
            node.revised_to = edit.new_id
            self._touch(node, plan, changed)
            self._create(plan, edit.new_id, edit.text, node.positive | {q}, node.id, changed)
            if edit.text_key:
                self._texts[(plan.namespace, edit.text_key)] = edit.new_id
            return EditOutcome("REVISE", node.id, "revised", new_id=edit.new_id)
        if was_active and (
            plan.archive_policy == "immediate"
            or archive_threshold_reached(len(node.negative), len(node.positive), plan.archive_ratio)
        ):
            node.state = "archived"
            self._touch(node, plan, changed)
            return EditOutcome(edit.op, node.id, "archived")
        self._touch(node, plan, changed)
        return EditOutcome(edit.op, node.id, "negative_evidence")

    def _active_twin(self, plan: EditPlan, key: str | None) -> _Insight | None:
        twin = self._node(plan, self._texts.get((plan.namespace, key or "")))
        return twin if twin is not None and twin.state == "active" else None

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

    def _create(
        self,
        plan: EditPlan,
        new_id: str,
        text: str,
        positive: set[str],
        parent: str | None,
        changed: dict[str, int],
    ) -> None:
        self._insights[new_id] = _Insight(
            id=new_id,
            namespace=plan.namespace,
            text=text,
            state="active",
            created_by_event=plan.event_id,
            created_at=plan.at,
            updated_at=plan.at,
            positive=set(positive),
            revised_from=parent,
        )
        changed[new_id] = 1

    def apply_many(self, plans: Collection[EditPlan]) -> list[ApplyResult | Exception]:
        out: list[ApplyResult | Exception] = []
        for plan in plans:
            try:
                out.append(self.apply(plan))
            except InvalidEventError as exc:
                out.append(exc)
        return out

    def save_decisions(self, decisions: Mapping[str, ControllerDecision]) -> dict[str, ControllerDecision]:
        return {i: self.save_decision(i, d) for i, d in decisions.items()}

    def load_decisions(self, event_ids: Collection[str]) -> dict[str, ControllerDecision]:
        with self._lock:
            return {i: self._decisions[i] for i in event_ids if i in self._decisions}

    def load_retrievals(self, retrieval_ids: Collection[str]) -> dict[str, RetrievalRecord]:
        with self._lock:
            return {i: self._retrievals[i] for i in retrieval_ids if i in self._retrievals}

    def link_queries(self, query_id: str, similar: Collection[str]) -> None:
        with self._lock:
            node = self._queries.get(query_id)
            if node is None:
                return
            for other in similar:
                peer = self._queries.get(other)
                if other != query_id and peer is not None and peer.namespace == node.namespace:
                    self._neighbours.setdefault(query_id, set()).add(other)
                    self._neighbours.setdefault(other, set()).add(query_id)
            self._unlinked.discard(query_id)

    def unlinked(self, query_ids: Collection[str]) -> set[str]:
        with self._lock:
            return {q for q in query_ids if q in self._unlinked}

    def save_decision(self, event_id: str, decision: ControllerDecision) -> ControllerDecision:
        with self._lock:
            return self._decisions.setdefault(event_id, decision)

    def save_retrieval(self, record: RetrievalRecord, ttl_s: int) -> None:
        with self._lock:
            self._retrievals[record.id] = record

    # -- reads -------------------------------------------------------------------------------
    def insights(self, ids: Collection[str]) -> dict[str, InsightNode]:
        with self._lock:
            return {i: self._insights[i].freeze() for i in ids if i in self._insights}

    def queries(self, ids: Collection[str]) -> dict[str, QueryNode]:
        with self._lock:
            return {i: self._queries[i] for i in ids if i in self._queries}

    def neighbours(self, query_ids: Collection[str]) -> dict[str, set[str]]:
        with self._lock:
            return {q: set(self._neighbours.get(q, ())) for q in query_ids}

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

    def load_decision(self, event_id: str) -> ControllerDecision | None:
        with self._lock:
            return self._decisions.get(event_id)

    def is_applied(self, event_id: str) -> bool:
        with self._lock:
            return event_id in self._applied

    def load_retrieval(self, retrieval_id: str) -> RetrievalRecord | None:
        with self._lock:
            return self._retrievals.get(retrieval_id)

    def changes(self, after: str, count: int) -> list[Change]:
        with self._lock:
            start = int(after or 0)
            return self._changes[start : start + count]

    def namespaces(self) -> set[str]:
        with self._lock:
            return {n.namespace for n in self._insights.values()} | {
                q.namespace for q in self._queries.values()
            }

    def insight_ids(self, namespace: str) -> set[str]:
        with self._lock:
            return {i for i, n in self._insights.items() if n.namespace == namespace}

    def query_ids(self, namespace: str) -> set[str]:
        with self._lock:
            return {i for i, q in self._queries.items() if q.namespace == namespace}

    def close(self) -> None:
        return None


__all__ = ["InMemoryGraphStore"]
