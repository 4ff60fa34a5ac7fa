"""Retrieval reads evidence from the query side and stays exactly the paper's Eq. 7-10.

Each query knows the insights it supports and harms, and a revised or absorbing insight knows what
it inherits; from those (through the projector and the read model) retrieval must find the same
candidates, with the same s and c, as Eq. 7-9 computed over the insights' whole evidence sets —
whatever sequence of KEEP, ARCHIVE, REVISE (into a new node or into an existing one), ADD and late
edits on superseded nodes built the graph.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from evomem.adapters.memory.graph import InMemoryGraphStore
from evomem.adapters.memory.index import InMemoryIndex
from evomem.core.editing import plan_edits
from evomem.core.hashing import HashingEmbedder
from evomem.core.retrieval import (
    Candidate,
    RankingInputs,
    candidates_from_queries,
    rank_from_queries,
    rank_insights,
)
from evomem.pipeline.project import Projector
from evomem.settings import ALLOWED_OPERATIONS
from schemas import AddDecision, ControllerDecision, InsightEdit, TaskEvent

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NS = "ns"
TEXTS = ["Check the class.", "Read the date twice.", "Prefer the primary source.", "Ask for the unit."]


def _full_sets(store: InMemoryGraphStore) -> list[Candidate]:
    """Every insight with its whole Ω⁺ and Ω⁻: what Eq. 7-9 are written over."""
    nodes = store.insights(store.insight_ids(NS)).values()
    return [Candidate(n.id, n.text, n.positive, n.negative, n.version, n.active) for n in nodes]


def _from_read_model(index: InMemoryIndex, expanded: frozenset[str]) -> list[Candidate]:
    """The evidence of Q̃ˢ, then the active insights it names, as candidates."""
    supports, harms, active, heirs = _read_model(index, expanded)
    serving = index.read_insights(NS, active | set(heirs)).values()
    return candidates_from_queries(supports, harms, serving)


def _read_model(index: InMemoryIndex, expanded: frozenset[str]) -> tuple[Any, Any, set[str], Any]:
    """What the retriever reads: the evidence of Q̃ˢ, then which insights it names are active and
    which active insights inherit from them."""
    evidence = index.query_evidence(NS, expanded)
    supports = {q: h.supports for q, h in evidence.items()}
    active, heirs = index.serving_ids(NS, {i for ids in supports.values() for i in ids})
    return supports, {q: h.harms for q, h in evidence.items()}, active, heirs


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_query_side_gives_the_candidates_and_scores_of_the_whole_evidence_sets(data: Any) -> None:
    store = InMemoryGraphStore()
    index = InMemoryIndex()
    projector = Projector(store, index, HashingEmbedder(), None)
    created: list[str] = []
    queries: list[str] = []
    for step in range(data.draw(st.integers(2, 16), label="steps")):
        targets = (
            data.draw(st.lists(st.sampled_from(created), max_size=3, unique=True), label="t")
            if created
            else []
        )
        edits = [
            InsightEdit(
                insight_id=t,
                operation=op,
                revised_insight_text=data.draw(st.sampled_from([*TEXTS, f"revised {t} {step}"]), label="rt")
                if op == "REVISE"
                else None,
            )
            for t in targets
            for op in [data.draw(st.sampled_from(["KEEP", "KEEP", "ARCHIVE", "REVISE"]), label="op")]
        ]
        add = data.draw(st.none() | st.sampled_from(TEXTS), label="add")
        event = TaskEvent(
            event_id=uuid.UUID(int=step + 1),
            namespace=NS,
            query=f"task {step}",
            status=data.draw(st.sampled_from(["resolved", "failed"]), label="status"),
            query_id=data.draw(st.none() | st.sampled_from(queries), label="qid") if queries else None,
        )
        plan = plan_edits(
            event,
            ControllerDecision(
                insight_edits=edits,
                add_new_insight=AddDecision(decision=add is not None, new_insight_text=add),
            ),
            retrieved=targets,
            similar=[],
            allowed_operations=ALLOWED_OPERATIONS["all"],
            archive_policy=data.draw(st.sampled_from(["evidence", "immediate"]), label="policy"),
            archive_ratio=0.5,
            at=T0 + timedelta(seconds=step),
        )
        result = store.apply(plan)
        created += [i for i in result.created if i not in created]
        if plan.query_id not in queries:
            queries.append(plan.query_id)
    projector.run_once()
    for _ in range(4):
        expanded = frozenset(data.draw(st.lists(st.sampled_from(queries), unique=True), label="Q~"))
        lam = data.draw(st.sampled_from([0.0, 0.5, 1.0]), label="lambda")
        exact = rank_insights(_full_sets(store), expanded, lam, 10)
        served = rank_insights(_from_read_model(index, expanded), expanded, lam, 10)
        assert served == exact
        # and what the retriever ranks with: the query-side sums, without a candidate per insight
        inputs = RankingInputs(*_read_model(index, expanded), dict.fromkeys(expanded, 1.0), lam, 10)
        top, _ = rank_from_queries(inputs)
        assert [(r.id, r.score, r.support, r.conflict) for r in top] == [
            (i.id, i.score, i.support, i.conflict) for i in exact
        ]


def test_a_revision_is_served_through_the_queries_that_supported_the_insight_it_replaced() -> None:
    """Ω⁺ of a revision includes the old node's: a query that only ever supported the old node
    still supports the revision (Eq. 15), and the revision is found through it."""
    store, index = InMemoryGraphStore(), InMemoryIndex()
    projector = Projector(store, index, HashingEmbedder(), None)

    def apply(step: int, decision: ControllerDecision, retrieved: list[str], status: str = "resolved") -> Any:
        event = TaskEvent(event_id=uuid.UUID(int=step), namespace=NS, query=f"task {step}", status=status)
        return store.apply(
            plan_edits(
                event,
                decision,
                retrieved=retrieved,
                similar=[],
                allowed_operations=ALLOWED_OPERATIONS["all"],
                archive_policy="evidence",
                archive_ratio=0.5,
                at=T0,
            )
        )

    (old,) = apply(
        1, ControllerDecision(add_new_insight=AddDecision(decision=True, new_insight_text="Old.")), []
    ).created
    first_query = store.insights([old])[old].positive
    revise = InsightEdit(insight_id=old, operation="REVISE", revised_insight_text="Narrower.")
    (new,) = apply(2, ControllerDecision(insight_edits=[revise]), [old], "failed").created
    projector.run_once()
    candidates = _from_read_model(index, frozenset(first_query))
    assert [(c.id, set(c.positive)) for c in candidates] == [(new, set(first_query))]
