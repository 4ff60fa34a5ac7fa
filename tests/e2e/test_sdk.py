"""The public SDK end to end (DESIGN §8), on a real Redis and an embedded Qdrant: what an agent fleet sees.

retrieve → report (one XADD) → consolidate (verdicts, rules, the evidence policy) → retrieve again;
idempotent redelivery; namespace isolation as a property; malformed events refused or dead-lettered
with the field that is wrong, changing nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, assume
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from evomem import InvalidEventError, Memory, NotFoundError, Retrieval, Settings, TaskEvent
from evomem.adapters.redis.connection import connect
from evomem.core.decisions import Controller, DecisionInput
from evomem.core.editing import added_insight_id, event_digest, query_id_for
from evomem.core.hashing import word_features
from evomem.core.ports import StoredDecision
from evomem.core.retrieval import RELEVANCE_FLOOR, text_relevance
from schemas import AddDecision, ControllerDecision

NS = "fever"
TASK = "Verify: Mohra is a truck"


# -- helpers -----------------------------------------------------------------------------------------


def state(mem: Memory, namespaces: Sequence[str], *, times: bool = True) -> dict[str, Any]:
    """What the system of record holds for these namespaces, plus the change feed."""
    g = mem.graph
    drop = set() if times else {"created_at", "updated_at"}
    out: dict[str, Any] = {}
    for ns in namespaces:
        ins = sorted(g.insight_ids(ns))
        qs = sorted(g.query_ids(ns))
        out[ns] = {
            "insights": {i: n.model_dump(exclude=drop) for i, n in g.insights(ins).items()},
            "queries": {q: n.model_dump(exclude=drop) for q, n in g.queries(ns, qs).items()},
            "neighbours": {q: sorted(v.items()) for q, v in g.neighbours(ns, qs).items()},
            "edges": {i: g.edges_into(i) for i in ins},
            "history": {
                i: [h if times else dataclasses.replace(h, at="") for h in g.history(i)] for i in ins
            },
        }
    out["changes"] = [(c.kind, c.namespace, c.id, c.version) for c in g.changes("", 1_000_000)]
    return out


def add_insight(mem: Memory, text: str, namespace: str = NS, query: str = TASK) -> str:
    """Report a resolved task that proposes ``text``; consolidate; return the new insight's id."""
    event_id = mem.report(status="resolved", namespace=namespace, query=query, proposed_insight=text)
    mem.consolidate()
    insight_id = added_insight_id(namespace, event_id)
    assert mem.insight(insight_id).text == text
    return insight_id


class SpyController:
    """Counts how often the controller is asked, then answers as the wrapped one would."""

    def __init__(self, inner: Controller) -> None:
        self.inner = inner
        self.name = inner.name
        self.judges_additions = inner.judges_additions
        self.asked: list[str] = []

    def decide(self, inputs: Sequence[DecisionInput]) -> list[ControllerDecision]:
        self.asked += [str(i.event.event_id) for i in inputs]
        return self.inner.decide(inputs)


def spy_on(mem: Memory) -> SpyController:
    spy = SpyController(mem.consolidator.controller)
    mem.consolidator.controller = spy
    return spy


@pytest.fixture
def open_memory(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[Any]:
    """Opens memories with extra settings on the session's (flushed) Redis; closes them after the test."""
    opened: list[Memory] = []
    names = itertools.count()

    def _open(**overrides: Any) -> Memory:
        mem = Memory.open(Settings(data_dir=tmp_path / f"mem{next(names)}", redis_url=redis_url, **overrides))
        opened.append(mem)
        return mem

    yield _open
    for mem in opened:
        mem.close()


# -- the agent's loop ------------------------------------------------------------------------------


def test_an_empty_memory_serves_nothing(memory: Memory) -> None:
    r = memory.retrieve(TASK, namespace=NS)
    assert r.insights == ()
    assert r.render() == ""
    assert r.namespace == NS and r.query == TASK
    uuid.UUID(r.id)


def test_report_returns_an_event_id_at_once_and_changes_nothing_until_consolidation(memory: Memory) -> None:
    event_id = memory.report(status="resolved", namespace=NS, query=TASK, proposed_insight="Check the class.")
    uuid.UUID(event_id)
    assert memory.insights(NS) == []
    assert memory.stream.info()["length"] == 1
    report = memory.consolidate()
    assert (report.events, report.applied, dict(report.operations)) == (1, 1, {"ADD": 1})
    [node] = memory.insights(NS)
    assert node.text == "Check the class."
    assert node.state == "active"
    assert set(node.positive) == memory.graph.query_ids(NS)
    assert memory.consolidate().events == 0


def test_verdicts_keep_revise_and_the_revised_text_is_stored_verbatim(memory: Memory) -> None:
    a = add_insight(memory, "Trucks have four wheels.")
    r = memory.retrieve(TASK, namespace=NS)
    # the same text again: weighted by a similarity of 1, the score is the count of Eq. 8 times how
    # much the insight's text is about the task, to RELEVANCE_POWER
    about = (
        max(text_relevance(word_features(TASK), word_features("Trucks have four wheels.")), RELEVANCE_FLOOR)
        ** Settings().relevance_power
    )
    assert [(i.id, i.support, i.conflict, i.score) for i in r.insights] == [
        (a, 1, 0, pytest.approx(about, abs=1e-4))
    ]
    assert "Trucks have four wheels." in r.render()
    memory.report(r, status="resolved", insight_feedback={a: "helpful"})
    assert dict(memory.consolidate().outcomes) == {"kept": 1}
    kept = memory.insight(a)
    assert (kept.state, len(kept.positive), kept.version) == ("active", 2, 2)

    revised_text = 'Only a "truck" per the registry — not per the press release (2019+); check the class!'
    r = memory.retrieve(TASK, namespace=NS)
    memory.report(
        r, status="failed", insight_feedback={a: {"verdict": "partial", "revised_text": revised_text}}
    )
    assert dict(memory.consolidate().operations) == {"REVISE": 1}
    old = memory.insight(a)
    assert old.state == "archived"
    assert old.lineage[0] == a and len(old.lineage) == 2
    new = memory.insight(old.lineage[1])
    assert new.text == revised_text
    assert new.state == "active"
    assert new.revised_from == a and old.revised_to == new.id
    assert set(new.positive) == set(old.positive) | set(old.negative)
    assert new.negative == frozenset()
    assert new.lineage == (a, new.id)
    assert [(h.op, h.outcome, h.decided_by) for h in new.history] == [("REVISE", "revised", "feedback")]
    assert [i.id for i in memory.retrieve(TASK, namespace=NS).insights] == [new.id]


def test_a_harmful_verdict_leaves_a_live_conflict_that_lambda_acts_on(open_memory: Any) -> None:
    """Evidence policy: a well-supported insight found harmful twice stays active and carries Ω⁻;
    retrieval then ranks it by s − λc, so λ = 1 serves the other insight first, λ = 0 does not."""
    mem = open_memory(top_k=20, budget=3, lambda_=1.0, relevance_power=0.0)  # s − λc alone
    a = add_insight(mem, "A: check the vehicle class.")
    b = add_insight(mem, "B: check the manufacturer.")
    for _ in range(3):
        mem.report(status="resolved", namespace=NS, query=TASK, insight_feedback={a: "helpful", b: "helpful"})
    mem.report(status="resolved", namespace=NS, query=TASK, insight_feedback={a: "helpful"})
    for _ in range(2):
        mem.report(status="failed", namespace=NS, query=TASK, insight_feedback={a: "harmful"})
    report = mem.consolidate()
    assert dict(report.outcomes) == {"kept": 7, "negative_evidence": 2}
    node = mem.insight(a)
    assert (node.state, len(node.positive), len(node.negative)) == ("active", 5, 2)

    penalised = mem.retrieve(TASK, namespace=NS)
    assert [(i.id, i.support, i.conflict, i.score) for i in penalised.insights] == [
        (b, 4, 0, pytest.approx(4.0, abs=1e-4)),
        (a, 5, 2, pytest.approx(3.0, abs=1e-4)),
    ]
    unpenalised = open_memory(top_k=20, budget=3, lambda_=0.0, relevance_power=0.0).retrieve(
        TASK, namespace=NS
    )
    assert [(i.id, i.score) for i in unpenalised.insights] == [
        (a, pytest.approx(5.0, abs=1e-4)),
        (b, pytest.approx(4.0, abs=1e-4)),
    ]


def test_under_the_immediate_policy_a_harmful_verdict_archives_and_the_insight_is_not_served(
    open_memory: Any,
) -> None:
    mem = open_memory(archive_policy="immediate")
    a = add_insight(mem, "A: check the vehicle class.")
    for _ in range(3):
        mem.report(mem.retrieve(TASK, namespace=NS), status="resolved")  # rules: KEEP
        mem.consolidate()
    mem.report(mem.retrieve(TASK, namespace=NS), status="failed", insight_feedback={a: "harmful"})
    mem.consolidate()
    assert mem.insight(a).state == "archived"
    assert mem.retrieve(TASK, namespace=NS).insights == ()


def test_the_rule_controller_judges_unnamed_insights_from_the_outcome(memory: Memory) -> None:
    a = add_insight(memory, "A: check the vehicle class.")
    b = add_insight(memory, "B: check the manufacturer.")
    memory.report(memory.retrieve(TASK, namespace=NS), status="resolved", insight_feedback={a: "helpful"})
    memory.consolidate()
    for i in (a, b):
        assert [(h.op, h.decided_by) for h in memory.insight(i).history][-1] == (
            "KEEP",
            "feedback" if i == a else "rules",
        )


def test_under_add_keep_harmful_and_partial_verdicts_record_nothing(open_memory: Any) -> None:
    mem = open_memory(operations="add+keep")
    a = add_insight(mem, "A: check the vehicle class.")
    before = mem.insight(a)
    mem.report(mem.retrieve(TASK, namespace=NS), status="failed", insight_feedback={a: "harmful"})
    mem.report(
        mem.retrieve(TASK, namespace=NS),
        status="failed",
        insight_feedback={a: {"verdict": "partial", "revised_text": "narrower"}},
    )
    report = mem.consolidate()
    assert (report.applied, dict(report.operations)) == (2, {})
    after = mem.insight(a)
    assert after.node == before.node
    assert [h.op for h in after.history] == ["ADD"]
    assert [n.id for n in mem.insights(NS)] == [a]


def test_an_insight_is_only_shown_in_its_own_namespace(memory: Memory) -> None:
    a = add_insight(memory, "A: check the vehicle class.")
    assert memory.insight(a, namespace=NS).id == a
    with pytest.raises(NotFoundError):
        memory.insight(a, namespace="other")
    with pytest.raises(NotFoundError):
        memory.insight("no-such-insight")


def test_memory_open_reads_the_environment_when_called_and_each_memory_keeps_its_own(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOMEM_REDIS_URL", redis_url)
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(tmp_path / "one"))
    monkeypatch.setenv("EVOMEM_BUDGET", "1")
    with Memory.open() as one:
        monkeypatch.setenv("EVOMEM_DATA_DIR", str(tmp_path / "two"))
        monkeypatch.setenv("EVOMEM_BUDGET", "2")
        with Memory.open() as two:
            add_insight(one, "A: check the vehicle class.")
            add_insight(one, "B: check the manufacturer.")
            two.consolidate()  # brings two's index up to date
            assert (one.settings.budget, two.settings.budget) == (1, 2)
            assert len(one.retrieve(TASK, namespace=NS).insights) == 1
            assert len(two.retrieve(TASK, namespace=NS).insights) == 2


# -- delivery: the same event twice is one event ---------------------------------------------------------


def _event(**kw: Any) -> TaskEvent:
    return TaskEvent.model_validate({"namespace": NS, "query": TASK, "status": "resolved", **kw})


def test_the_same_task_event_reported_twice_leaves_the_same_state_as_once(
    open_memory: Any, redis_client: redis.Redis
) -> None:
    seed = _event(
        event_id=uuid.UUID(int=1), query="seed task", proposed_insight="A: check the vehicle class."
    )
    a = added_insight_id(NS, str(seed.event_id))
    event = _event(
        event_id=uuid.UUID(int=2),
        retrieved_insight_ids=[a],
        insight_feedback={a: "helpful"},
        proposed_insight="B: check the manufacturer.",
    )

    def run(times: int) -> dict[str, Any]:
        redis_client.flushdb()
        mem = open_memory()
        mem.report(seed)
        mem.consolidate()
        for _ in range(times):
            mem.report(event)
        report = mem.consolidate()
        assert (report.applied, report.replayed) == (1, times - 1)
        return state(mem, [NS], times=False)

    once, twice = run(1), run(2)
    assert twice == once
    assert len(once[NS]["insights"]) == 2
    assert [h.op for h in once[NS]["history"][a]] == ["ADD", "KEEP"]


def test_a_redelivered_document_reuses_the_stored_decision_and_changes_nothing(memory: Memory) -> None:
    a = add_insight(memory, "A: check the vehicle class.")
    spy = spy_on(memory)
    doc = _event(retrieved_insight_ids=[a], proposed_insight="B: check the manufacturer.").model_dump_json()
    memory.stream.publish_raw(doc)
    first = memory.consolidate()
    assert (first.applied, len(spy.asked)) == (1, 1)
    once = state(memory, [NS])
    memory.stream.publish_raw(doc)  # a publisher retried its XADD
    again = memory.consolidate()
    assert (again.applied, again.replayed, again.dead_lettered) == (0, 1, 0)
    assert len(spy.asked) == 1  # no second controller call
    assert state(memory, [NS]) == once
    assert memory.stream.info()["pending"] == 0


def test_a_decision_stored_before_a_crash_is_the_one_applied_on_redelivery(memory: Memory) -> None:
    """The decision is stored before it is applied; a redelivery applies it as stored, unasked."""
    a = add_insight(memory, "A: check the vehicle class.")
    event = _event(retrieved_insight_ids=[a], proposed_insight="what the rules would add")
    stored = ControllerDecision(
        add_new_insight=AddDecision(decision=True, new_insight_text="what was decided", decided_by="llm:m@v1")
    )
    key = (NS, str(event.event_id))
    memory.graph.save_decisions({key: StoredDecision(stored, event_digest(event))})  # the worker died here
    spy = spy_on(memory)
    memory.report(event)
    memory.consolidate()
    assert spy.asked == []
    node = memory.insight(added_insight_id(NS, str(event.event_id)))
    assert node.text == "what was decided"
    assert [(h.op, h.decided_by) for h in node.history] == [("ADD", "llm:m@v1")]
    assert memory.insight(a).version == 1  # the stored decision did not judge A


# -- namespace isolation (property) ------------------------------------------------------------------

NAMESPACES = ["alpha", "beta", "gamma"]
TASKS = [TASK, "Who wrote Hamlet?", "Stack block A on block B", "Is Paris in France?"]
PROPOSALS = [
    "Check the entity type first.",
    "Look up the author.",
    "Clear the top block first.",
    "Use a map.",
]


def test_no_retrieval_ever_returns_an_insight_of_another_namespace(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same tasks and texts in several namespaces, random reports and consolidations: every
    retrieval serves only its namespace's insights and queries, evidence never crosses, and naming
    another namespace's insight or query in a report is refused."""
    base = tmp_path_factory.mktemp("isolation")
    names = itertools.count()

    class Isolation(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            client = connect(redis_url)
            client.flushdb()
            client.close()
            self.mem = Memory.open(
                Settings(data_dir=base / f"m{next(names)}", redis_url=redis_url, top_k=10, budget=5)
            )
            self.last: dict[str, Retrieval] = {}

        @initialize()
        def seed(self) -> None:
            # the same tasks and the same insight texts in every namespace
            for ns in NAMESPACES:
                for task, text in zip(TASKS[:2], PROPOSALS[:2], strict=True):
                    self.mem.report(status="resolved", namespace=ns, query=task, proposed_insight=text)
            self.mem.consolidate()

        def owned(self, ns: str) -> set[str]:
            return self.mem.graph.insight_ids(ns)

        @rule(ns=st.sampled_from(NAMESPACES), task=st.sampled_from(TASKS))
        def retrieve(self, ns: str, task: str) -> None:
            r = self.mem.retrieve(task, namespace=ns)
            ids = {i.id for i in r.insights}
            assert ids <= self.owned(ns)
            assert set(self.mem.graph.namespace_of(ids).values()) <= {ns}
            assert set(r.similar) <= self.mem.graph.query_ids(ns)
            self.last[ns] = r

        @rule(
            ns=st.sampled_from(NAMESPACES),
            task=st.sampled_from(TASKS),
            status=st.sampled_from(["resolved", "failed"]),
            proposal=st.none() | st.sampled_from(PROPOSALS),
            verdict=st.none() | st.sampled_from(["helpful", "harmful", "partial"]),
            use_last=st.booleans(),
            then_consolidate=st.booleans(),
        )
        def report(
            self,
            ns: str,
            task: str,
            status: str,
            proposal: str | None,
            verdict: str | None,
            use_last: bool,
            then_consolidate: bool,
        ) -> None:
            r = self.last.get(ns) if use_last else None
            if r is None:
                self.mem.report(status=status, namespace=ns, query=task, proposed_insight=proposal)
            else:
                feedback: dict[str, Any] = {}
                if r.insights and verdict:
                    feedback[r.insights[0].id] = (
                        verdict
                        if verdict != "partial"
                        else {"verdict": "partial", "revised_text": f"{proposal or 'Narrower'} in {ns}"}
                    )
                self.mem.report(r, status=status, proposed_insight=proposal, insight_feedback=feedback)
            if then_consolidate:
                self.consolidate()

        @rule()
        def consolidate(self) -> None:
            report = self.mem.consolidate()
            assert report.dead_lettered == 0
            for ns in NAMESPACES:
                queries = self.mem.graph.query_ids(ns)
                for node in self.mem.insights(ns):
                    assert node.namespace == ns
                    assert node.positive | node.negative <= queries
                    assert {a for a, _ in self.mem.graph.edges_into(node.id)} <= self.owned(ns)

        @rule(
            ns=st.sampled_from(NAMESPACES),
            other=st.sampled_from(NAMESPACES),
            how=st.sampled_from(["insight_feedback", "retrieved_insight_ids", "retrieval", "query_id"]),
            data=st.data(),
        )
        def report_foreign(self, ns: str, other: str, how: str, data: st.DataObject) -> None:
            assume(ns != other)
            common: dict[str, Any] = {"status": "resolved", "namespace": ns, "query": TASK}
            if how == "retrieval":
                r = self.mem.retrieve(data.draw(st.sampled_from(TASKS)), namespace=other)
                assume(r.insights)
                call: Any = lambda: self.mem.report(r, **common)  # noqa: E731
                target = r.insights[0].id
            elif how == "query_id":
                # query ids are scoped to a namespace: another's id is a new query here, and the other
                # namespace neither changes nor shows through
                foreign_q = sorted(self.mem.graph.query_ids(other))
                assume(foreign_q)
                target = data.draw(st.sampled_from(foreign_q))
                theirs = self.mem.graph.queries(other, [target])
                self.mem.report(query_id=target, **common)
                self.consolidate()
                assert self.mem.graph.queries(other, [target]) == theirs
                assert self.mem.graph.queries(ns, [target])[target].namespace == ns
                return
            else:
                foreign = sorted(self.owned(other))
                assume(foreign)
                target = data.draw(st.sampled_from(foreign))
                doc = {how: {target: "helpful"} if how == "insight_feedback" else [target]}
                call = lambda: self.mem.report(**common, **doc)  # noqa: E731
            length = self.mem.stream.info()["length"]
            with pytest.raises(InvalidEventError) as refused:
                call()
            expected = "insight_feedback" if how == "insight_feedback" else "retrieved_insight_ids"
            assert refused.value.field.startswith(expected)
            assert self.mem.stream.info()["length"] == length

        def teardown(self) -> None:
            self.mem.close()

    run_state_machine_as_test(
        Isolation,
        settings=hsettings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -- malformed events ----------------------------------------------------------------------------------

OVERSIZED = ["x" * 16_000] * 20  # 320 kB of steps: over the 256 kB bound
TOO_MANY_STEPS = ["step"] * 501


@pytest.mark.parametrize(
    ("fields", "expected_field"),
    [
        ({}, "status"),
        ({"status": "done"}, "status"),
        ({"status": 1}, "status"),
        (
            {"status": "resolved", "insight_feedback": {"no-such-insight": "helpful"}},
            "insight_feedback[no-such-insight]",
        ),
        ({"status": "resolved", "retrieved_insight_ids": ["no-such-insight"]}, "retrieved_insight_ids[0]"),
        ({"status": "failed", "trajectory": OVERSIZED}, "trajectory"),
        ({"status": "failed", "trajectory": TOO_MANY_STEPS}, "trajectory"),
        ({"status": "failed", "trajectory": ["fine", 42]}, "trajectory.1"),
        (
            {"status": "failed", "insight_feedback": {"{A}": {"verdict": "partial"}}},
            "insight_feedback.{A}.revised_text",
        ),
        (
            {"status": "failed", "insight_feedback": {"{A}": {"verdict": "partial", "revised_text": "   "}}},
            "insight_feedback.{A}.revised_text",
        ),
        (
            {"status": "failed", "insight_feedback": {"{A}": {"verdict": "total", "revised_text": "x"}}},
            "insight_feedback.{A}.verdict",
        ),
        ({"status": "failed", "insight_feedback": {"{A}": "meh"}}, "insight_feedback.{A}"),
        ({"status": "resolved", "namespace": "not a namespace"}, "namespace"),
        ({"status": "resolved", "query": ""}, "query"),
        ({"status": "resolved", "surprise": True}, "surprise"),
    ],
)
def test_a_malformed_report_is_refused_with_the_field_and_changes_nothing(
    memory: Memory, fields: dict[str, Any], expected_field: str
) -> None:
    a = add_insight(memory, "A: check the vehicle class.")
    fields = json.loads(json.dumps(fields).replace("{A}", a))
    expected_field = expected_field.replace("{A}", a)
    before = state(memory, [NS])
    length = memory.stream.info()["length"]
    doc: dict[str, Any] = {"namespace": NS, "query": TASK, **fields}
    with pytest.raises(InvalidEventError) as refused:
        memory.report(**doc)
    assert refused.value.field == expected_field
    assert expected_field in str(refused.value)
    assert memory.stream.info()["length"] == length
    memory.consolidate()
    assert state(memory, [NS]) == before


def test_reporting_a_retrieval_under_another_namespace_is_refused(memory: Memory) -> None:
    a = add_insight(memory, "A: check the vehicle class.")
    r = memory.retrieve(TASK, namespace=NS)
    assert [i.id for i in r.insights] == [a]
    with pytest.raises(InvalidEventError) as refused:
        memory.report(r, status="resolved", namespace="other")
    assert refused.value.field == "retrieved_insight_ids[0]"
    with pytest.raises(InvalidEventError) as refused:
        memory.report(status="resolved", namespace="other", query=TASK, insight_feedback={a: "harmful"})
    assert refused.value.field == f"insight_feedback[{a}]"
    assert memory.insight(a).version == 1


def test_malformed_stream_documents_go_to_the_dead_letter_stream_and_valid_ones_are_applied(
    memory: Memory,
) -> None:
    a = add_insight(memory, "A: check the vehicle class.")
    b = add_insight(memory, "B: in another namespace.", namespace="other")
    before = state(memory, [NS, "other"])

    def doc(**kw: Any) -> dict[str, Any]:
        return {"event_id": str(uuid.uuid4()), "namespace": NS, "query": TASK, "status": "failed", **kw}

    valid_keep = doc(status="resolved", insight_feedback={a: "helpful"})
    valid_add = doc(proposed_insight="C: read the registry.")
    bad: list[tuple[str | dict[str, Any], str]] = [
        ('{"namespace": "fever", "query": ', "event"),
        ("[1, 2, 3]", "event"),
        ({k: v for k, v in doc().items() if k != "status"}, "status"),
        (doc(status="done"), "status"),
        (doc(retrieved_insight_ids=["no-such-insight"]), "retrieved_insight_ids[no-such-insight]"),
        (doc(insight_feedback={"no-such-insight": "harmful"}), "insight_feedback[no-such-insight]"),
        (doc(insight_feedback={b: "harmful"}), f"insight_feedback[{b}]"),
        (doc(trajectory=OVERSIZED), "trajectory"),
        (doc(insight_feedback={a: {"verdict": "partial"}}), f"insight_feedback.{a}.revised_text"),
    ]
    entry_of: dict[str, str] = {memory.stream.publish_raw(json.dumps(valid_keep)): "valid"}
    for document, fld in bad:
        entry_of[
            memory.stream.publish_raw(document if isinstance(document, str) else json.dumps(document))
        ] = fld
    entry_of[memory.stream.publish_raw(json.dumps(valid_add))] = "valid"

    report = memory.consolidate()
    assert (report.events, report.applied, report.dead_lettered) == (len(bad) + 2, 2, len(bad))
    letters = memory.stream.dlq()
    assert sorted((entry_of[d["source_id"]], d["field"]) for d in letters) == sorted((f, f) for _, f in bad)
    for letter in letters:
        assert letter["reason"].startswith(letter["field"])
    assert {d["event"] for d in letters if d["field"] == "status"} >= {json.dumps(bad[3][0])}
    assert memory.stream.info()["pending"] == 0

    # the bad events left no trace; the valid ones did exactly their part
    after = state(memory, [NS, "other"])
    assert after["other"] == before["other"]
    for document, _ in bad:
        if isinstance(document, dict) and "event_id" in document:
            assert not memory.graph.is_applied(NS, document["event_id"])
            assert memory.graph.load_decisions([(NS, document["event_id"])]) == {}
    new_queries = {query_id_for(TaskEvent.model_validate(d)) for d in (valid_keep, valid_add)}
    assert set(after[NS]["queries"]) == set(before[NS]["queries"]) | new_queries
    assert set(after[NS]["insights"]) == set(before[NS]["insights"]) | {
        added_insight_id(NS, valid_add["event_id"])
    }
    node = memory.insight(a)
    assert set(node.positive) == set(before[NS]["insights"][a]["positive"]) | {
        query_id_for(TaskEvent.model_validate(valid_keep))
    }
    assert node.negative == frozenset() and node.state == "active"


def test_a_query_reported_without_a_retrieval_is_linked_to_similar_past_queries(memory: Memory) -> None:
    """Events published by other languages carry no retrieval record; the projector links their
    query to its most similar past queries once it is indexed, so expansion finds it later."""
    first = memory.report(None, namespace="fever", query="Verify: Mohra is a truck", status="resolved")
    memory.report(None, namespace="fever", query="Verify: Mohra is a lorry", status="resolved")
    memory.report(None, namespace="other", query="Verify: Mohra is a truck", status="resolved")
    memory.consolidate()
    q1 = query_id_for(TaskEvent(event_id=uuid.UUID(first), namespace="fever", query="x", status="resolved"))
    ids = memory.graph.query_ids("fever")
    (q2,) = ids - {q1}
    neighbours = memory.graph.neighbours("fever", [q1, q2])
    assert {q: set(n) for q, n in neighbours.items()} == {q1: {q2}, q2: {q1}}
    assert 0 < neighbours[q1][q2] < 1  # weighted by how similar the two are
    assert memory.graph.unlinked("fever", ids) == set()
    (other,) = memory.graph.query_ids("other")
    assert memory.graph.neighbours("other", [other]) == {other: {}}


def test_stats_show_the_live_pollution_signal_of_each_namespace(memory: Memory) -> None:
    """The share of judged insights found harmful where they were served, and retirements per 100
    events, over the namespace's recent events: what an operator watches."""
    a = add_insight(memory, "A: check the vehicle class.")
    memory.report(memory.retrieve(TASK, namespace=NS), status="resolved", insight_feedback={a: "helpful"})
    for _ in range(2):
        memory.report(memory.retrieve(TASK, namespace=NS), status="failed", insight_feedback={a: "harmful"})
    memory.consolidate()
    recent = memory.stats()["namespaces"][NS]["recent"]
    # the second judged negative reaches the evidence policy's max(ARCHIVE_MIN = 2, 0.5 · 2): archived
    assert recent == {
        "events": 4,
        "judged": 3,
        "harmful_share": pytest.approx(2 / 3),
        "retired_per_100_events": pytest.approx(100 / 4),
    }


def test_the_rule_controller_blames_with_evidence_and_never_archives(open_memory: Any) -> None:
    """A failed task is evidence against the relevant insights it was served, never enough to archive
    one: that needs a judge (a verdict, or the LLM)."""
    mem = open_memory(archive_policy="immediate")
    a = add_insight(mem, "A: check the vehicle class.")
    for _ in range(3):
        mem.report(mem.retrieve(TASK, namespace=NS), status="failed")
    mem.consolidate()
    node = mem.insight(a)
    assert (node.state, len(node.negative)) == ("active", 3)
    assert [h.outcome for h in node.history][-3:] == ["negative_evidence"] * 3
