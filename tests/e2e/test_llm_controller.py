"""The LLM controller on its own: batching by namespace, the concurrency cap, the prompt's token
budget, validation of REVISE and ADD, and which controller the settings select."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evomem.adapters.llm.answers import DuplicateCheck, read_answer
from evomem.adapters.llm.controller import LLMController
from evomem.adapters.llm.prompt import PROMPT_VERSION, SYSTEM_PROMPT, build_batch, event_document
from evomem.adapters.llm.token_count import EstimatedTokens, TiktokenTokens, cut
from evomem.core.decisions import DecisionFailure, DecisionInput, RuleController
from evomem.errors import ConfigError
from evomem.runtime import make_controller
from evomem.settings import Settings
from evomem.testing.llm_server import LLMTestServer
from schemas import ControllerDecision, InsightNode, TaskEvent
from schemas.models import utcnow
from tests.support.llm_helpers import llm_settings

OPS = frozenset({"KEEP", "ARCHIVE", "REVISE"})


def node(i: int, text: str, namespace: str = "ns") -> InsightNode:
    return InsightNode(
        id=f"{namespace}-{i}",
        namespace=namespace,
        text=text,
        state="active",
        created_by_event="seed",
        created_at=utcnow(),
        updated_at=utcnow(),
    )


def inp(
    query: str,
    status: str = "resolved",
    namespace: str = "ns",
    retrieved: tuple[InsightNode, ...] = (),
    **fields: object,
) -> DecisionInput:
    event = TaskEvent(namespace=namespace, query=query, status=status, **fields)  # type: ignore[arg-type]
    return DecisionInput(event, retrieved, OPS)


_made: list[LLMController] = []


@pytest.fixture(autouse=True)
def _close_controllers() -> Iterator[None]:
    """Each controller holds an HTTP client's connections: closed after every test."""
    yield
    while _made:
        _made.pop().close()


def controller(
    tmp_path: Path, redis_url: str, client: redis.Redis, server: LLMTestServer, **overrides: object
) -> LLMController:
    c = make_controller(llm_settings(tmp_path, redis_url, server, **overrides), client)
    assert isinstance(c, LLMController)
    _made.append(c)
    return c


def test_events_are_batched_per_call_and_never_mix_namespaces(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    shared = (node(1, "Check the year."), node(2, "Read the question twice."))
    inputs = [inp(f"a{i}", retrieved=shared) for i in range(11)] + [
        inp(f"b{i}", namespace="other", retrieved=(node(1, "Other tenant.", "other"),)) for i in range(3)
    ]
    out = controller(tmp_path, redis_url, redis_client, llm_server).decide(inputs)

    assert all(isinstance(d, ControllerDecision) for d in out)
    assert sorted(len(c.events) for c in llm_server.calls) == [3, 3, 8]
    for call in llm_server.calls:
        assert len({q[0] for q in call.queries}) == 1  # one namespace a call
        assert "Other tenant." not in call.prompt or all(q.startswith("b") for q in call.queries)
    first = next(c for c in llm_server.calls if len(c.events) == 8)
    assert first.prompt.count("Check the year.") == 1  # a shared insight is shown once
    assert [e.insight_id for e in out[0].insight_edits] == ["ns-1", "ns-2"]  # type: ignore[union-attr]


def test_concurrent_calls_stay_under_the_cap(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    llm_server.reset(latency_s=0.1)
    inputs = [inp(f"q{i}") for i in range(12)]
    out = controller(
        tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1, llm_concurrency=4
    ).decide(inputs)
    assert len(out) == 12 and llm_server.requests == 12
    assert 1 < llm_server.max_in_flight <= 4


def test_fewer_prompt_tokens_per_event_when_eight_share_a_call(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    shared = (node(1, "Check the year."), node(2, "Read the question twice."), node(3, "Quote evidence."))
    inputs = [inp(f"task {i}", retrieved=shared, trajectory=["searched", "answered"]) for i in range(8)]
    controller(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1).decide(inputs)
    single = sum(c.prompt_tokens for c in llm_server.calls)
    llm_server.reset()
    controller(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=8).decide(inputs)
    batched = sum(c.prompt_tokens for c in llm_server.calls)
    assert batched <= 0.7 * single


def test_a_revise_into_its_own_text_is_refused_and_a_duplicate_add_is_dropped() -> None:
    original = node(1, "Before moving a block, clear everything stacked on it.")
    batch = build_batch([inp("q", retrieved=(original,))], EstimatedTokens(), 1500)
    same = {
        "events": [
            {
                "event": 1,
                "insight_edits": [
                    {
                        "insight": 1,
                        "operation": "REVISE",
                        "revised_insight_text": "before moving a block, clear everything stacked on it!",
                    }
                ],
                "add_new_insight": {"decision": False, "new_insight_text": None},
            }
        ]
    }
    dup = DuplicateCheck(0.9)
    (answer,) = read_answer(json.dumps(same), "stop", batch, [1], "llm:t", dup).values()
    assert isinstance(answer, str) and "repeats its text" in answer

    reworded = "Clear everything stacked on a block before moving the block."
    rephrased = {
        "events": [
            {
                "event": 1,
                "insight_edits": [{"insight": 1, "operation": "KEEP", "revised_insight_text": None}],
                "add_new_insight": {"decision": True, "new_insight_text": reworded},
            }
        ]
    }
    (answer,) = read_answer(json.dumps(rephrased), "stop", batch, [1], "llm:t", dup).values()
    assert isinstance(answer, ControllerDecision) and not answer.add_new_insight.decision

    fresh = {"decision": True, "new_insight_text": "Check the goal."}
    new = {**rephrased, "events": [{**rephrased["events"][0], "add_new_insight": fresh}]}
    (answer,) = read_answer(json.dumps(new), "stop", batch, [1], "llm:t", dup).values()
    assert isinstance(answer, ControllerDecision)
    assert answer.add_new_insight.new_insight_text == "Check the goal."
    assert answer.add_new_insight.decided_by == "llm:t"


@pytest.mark.parametrize(
    "entry, expected",
    [
        (
            {
                "event": 1,
                "insight_edits": [],
                "add_new_insight": {"decision": False, "new_insight_text": None},
            },
            "no operation for insight 1",
        ),
        (
            {
                "event": 1,
                "insight_edits": [{"insight": 1, "operation": "KEEP", "revised_insight_text": None}] * 2,
                "add_new_insight": {"decision": False, "new_insight_text": None},
            },
            "more than one operation",
        ),
        (
            {
                "event": 1,
                "insight_edits": [{"insight": 1, "operation": "DELETE", "revised_insight_text": None}],
                "add_new_insight": {"decision": False, "new_insight_text": None},
            },
            "operation",
        ),
        (
            {
                "event": 1,
                "insight_edits": [{"insight": 1, "operation": "REVISE", "revised_insight_text": None}],
                "add_new_insight": {"decision": False, "new_insight_text": None},
            },
            "no revised_insight_text",
        ),
        (
            {
                "event": 1,
                "insight_edits": [{"insight": 1, "operation": "KEEP", "revised_insight_text": None}],
                "add_new_insight": {"decision": True, "new_insight_text": ""},
            },
            "no new_insight_text",
        ),
        (
            {
                "event": 2,
                "insight_edits": [],
                "add_new_insight": {"decision": False, "new_insight_text": None},
            },
            "has no entry",
        ),
    ],
)
def test_malformed_entries_are_refused_with_a_reason_for_the_model(
    entry: dict[str, object], expected: str
) -> None:
    batch = build_batch([inp("q", retrieved=(node(1, "An insight."),))], EstimatedTokens(), 1500)
    doc = json.dumps({"events": [entry]})
    (answer,) = read_answer(doc, "stop", batch, [1], "llm:t", DuplicateCheck(0.9)).values()
    assert isinstance(answer, str) and expected in answer


def test_an_event_is_cut_to_its_token_budget_keeping_both_ends_and_marking_the_cut() -> None:
    counter = EstimatedTokens()
    steps = [f"step {i}: " + "looked something up " * 5 for i in range(400)]
    event = TaskEvent(
        namespace="ns",
        query="q",
        status="failed",
        trajectory=steps,
        feedback="x" * 15_000,
        final_answer="the final answer",
    )
    doc = event_document(1, event, [1], counter, 1000)
    assert sum(counter.count(str(v)) for v in doc.values()) <= 1000
    assert doc["trajectory"].startswith("1. step 0:") and doc["trajectory"].endswith("looked something up ")
    assert "400. step 399" in doc["trajectory"] and "tokens cut" in doc["trajectory"]
    assert "tokens cut" in doc["feedback"] and doc["final_answer"] == "the final answer"


def test_tiktoken_counts_when_an_encoding_is_at_hand() -> None:
    """Any tiktoken encoding serves (here a byte-level one built offline)."""
    import tiktoken

    enc = tiktoken.Encoding(
        name="bytes",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    counter = TiktokenTokens(enc)
    assert counter.count("abc déf") == len("abc déf".encode())
    short = cut(counter, "a" * 300 + "END", 60)
    assert counter.count(short) <= 60 + 20 and short.endswith("END") and "tokens cut" in short


def test_the_settings_choose_the_controller(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    llm_server: LLMTestServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "EVOMEM_LLM_API_KEY", "EVOMEM_LLM_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    base = {"data_dir": tmp_path, "redis_url": redis_url}
    assert isinstance(make_controller(Settings(**base), redis_client), RuleController)  # type: ignore[arg-type]
    auto = make_controller(Settings(**base, llm_base_url=llm_server.url), redis_client)  # type: ignore[arg-type]
    assert isinstance(auto, LLMController) and auto.name == f"llm:gpt-4o-mini:prompt-v{PROMPT_VERSION}"
    auto.close()
    assert isinstance(
        make_controller(
            Settings(**base, controller="rules", llm_base_url=llm_server.url),  # type: ignore[arg-type]
            redis_client,
        ),
        RuleController,
    )
    with pytest.raises(ConfigError, match="needs EVOMEM_LLM_BASE_URL"):
        make_controller(Settings(**base, controller="llm"), redis_client)  # type: ignore[arg-type]
    assert isinstance(make_controller("auto"), RuleController)
    assert "JSON" in SYSTEM_PROMPT  # JSON mode requires the word in the prompt


def test_a_failure_is_reported_per_event_not_raised(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    from evomem.testing.llm_server import Fault

    llm_server.add_fault(Fault("unavailable", match="DOWN"))
    out = controller(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1).decide(
        [inp("DOWN"), inp("up")]
    )
    assert isinstance(out[0], DecisionFailure) and out[0].transient and "503" in out[0].reason
    assert isinstance(out[1], ControllerDecision)
