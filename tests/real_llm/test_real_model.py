"""The LLM controller against a real model: llama.cpp's OpenAI-compatible server on
SmolLM2-135M-Instruct (``make test-llm``; skipped without ``--real-llm``).

A 135M model judges poorly, so these tests assert what must hold whatever its skill: every call is
answered, every event is decided or dead-lettered with the model's answer in its reason, the tokens
are accounted, nothing outside an event's retrieved insights is edited, and the answer of a call
has exactly the events and insights asked for. They print what the model made of the prompt.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evomem.adapters.llm.answers import load_json
from evomem.adapters.llm.controller import LLMController
from evomem.adapters.llm.endpoint import ChatEndpoint, ResponseFormatUnsupported
from evomem.adapters.llm.prompt import SYSTEM_PROMPT, build_batch
from evomem.adapters.llm.token_count import EstimatedTokens
from evomem.adapters.llm.usage import event_usage, summary
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.core.decisions import DecisionInput
from evomem.core.ports import InsightHead
from evomem.runtime import open_worker
from evomem.settings import Settings
from evomem.testing.local_llm import LocalLLMServer
from schemas import TaskEvent
from tests.support.llm_helpers import dead_letters, publish, run_until_idle, seed

# a CPU model shared with other work can take many minutes for the dozen events
pytestmark = [pytest.mark.real_llm, pytest.mark.timeout(1800)]

NS = "fever"
INSIGHTS = [
    "Find the sentence that names the claim's subject and compare every detail before choosing "
    "SUPPORTS or REFUTES.",
    "A claim that sounds plausible is usually true: answer SUPPORTS without searching.",
    "Claims that mention a year are usually wrong; answer REFUTES.",
    "Only decide after quoting evidence about the claim's subject; with no such sentence, answer "
    "NOT ENOUGH INFO.",
]
#: (query, status, insights by index, extra fields): the shapes of report a fleet sends.
EVENTS: list[tuple[str, str, list[int], dict[str, object]]] = [
    ("Verify the claim: Marie Curie won a Nobel Prize in 1903.", "resolved", [0, 3], {}),
    ("Verify the claim: Alan Turing designed the first compiler in 1952.", "failed", [1], {}),
    (
        "Is it true that Ada Lovelace described a calculating engine before 1843?",
        "failed",
        [2],
        {"feedback": "the year was right; the rule is too broad"},
    ),
    (
        "Fact-check: Niels Bohr is known for having published a lecture series (1936).",
        "resolved",
        [0],
        {"proposed_insight": "Check the year in the claim against the year in the evidence."},
    ),
    ("Verify the claim: Grace Hopper invented the radio in 1898.", "failed", [1, 2], {}),
    (
        "Is it true that Emmy Noether discovered a symmetry theorem before 1980?",
        "resolved",
        [3],
        {"trajectory": ["searched: Emmy Noether theorem", "quoted: 'Noether proved ...'", "answered"]},
    ),
    ("Verify the claim: Carl Sagan won a Nobel Prize in 1980.", "failed", [0, 1, 2], {}),
    (
        "Fact-check: Lise Meitner is known for having discovered a new element (1962).",
        "resolved",
        [3, 0],
        {"final_answer": "SUPPORTS"},
    ),
    ("Verify the claim: Rosalind Franklin described the double helix in 1952.", "resolved", [0], {}),
    ("Is it true that Nikola Tesla invented the radio before 1903?", "failed", [2, 3], {}),
    ("Verify the claim: Alan Turing published a lecture series in 1936.", "resolved", [], {}),
    (
        "Verify the claim: Marie Curie discovered a new element in 1898.",
        "resolved",
        [0, 3],
        {"proposed_insight": "Quote the evidence sentence before answering."},
    ),
]


@pytest.fixture(scope="module")
def llama(request: pytest.FixtureRequest) -> Iterator[LocalLLMServer]:
    model = request.config.getoption("--real-llm-model")
    with LocalLLMServer(Path(model) if model else None) as server:
        yield server


def real_settings(tmp_path: Path, redis_url: str, server: LocalLLMServer, **overrides: object) -> Settings:
    """The product's defaults for the controller (eight events a call, eight calls in flight),
    with time limits long enough for a CPU shared with other work."""
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "redis_url": redis_url,
        "controller": "llm",
        "llm_base_url": server.url,
        "llm_model": server.alias,
        "llm_tokenizer": "estimate",
        "llm_timeout_s": 300.0,
        "batch_time_limit_s": 1200.0,
        "claim_idle_ms": 1_500_000,
        "visibility_timeout_s": 1500,
        "batch_wait_ms": 0,
        "max_deliveries": 3,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def test_every_event_is_decided_or_dead_lettered_with_the_models_answer(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    llama: LocalLLMServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = real_settings(tmp_path, redis_url, llama)
    worker = open_worker(settings, redis_client, consumer="real")
    ids = seed(redis_client, NS, INSIGHTS)
    events: list[TaskEvent] = [
        publish(redis_client, NS, q, status, [ids[i] for i in which], **fields)
        for q, status, which, fields in EVENTS
    ]
    started = time.perf_counter()
    with caplog.at_level("INFO", logger="evomem.adapters.llm"):
        totals = run_until_idle(worker)
    wall = time.perf_counter() - started

    usage = summary(redis_client, settings)
    # every call answered: no timeout, no refusal, no server error, nothing left pending
    assert not [k for k in usage["failures"] if k.startswith("transient") or k in ("rejected", "context")]
    assert totals["deferred"] == 0
    graph = RedisGraphStore(redis_client)
    letters = {json.loads(d["event"])["event_id"]: d["reason"] for d in dead_letters(redis_client)}
    for e in events:
        decided = graph.is_applied(NS, str(e.event_id))
        assert decided != (str(e.event_id) in letters), e.query  # one or the other, never both
    for reason in letters.values():  # why an event died, with what the model said
        assert reason.startswith("controller: LLM answer still invalid after 3 tries"), reason
        assert "the model answered: " in reason, reason
    # tokens accounted: the totals are the sum of every event's share
    shares = [event_usage(redis_client, str(e.event_id)) for e in events]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert sum(s["prompt_tokens"] for s in shares) == usage["prompt_tokens"]
    assert sum(s["completion_tokens"] for s in shares) == usage["completion_tokens"]
    assert usage["events_judged"] == len(events)
    # nothing edited outside an event's retrieved set
    by_event = {str(e.event_id): set(e.retrieved_insight_ids) for e in events}
    status = {str(e.event_id): e.status for e in events}
    chosen: Counter[str] = Counter()
    for insight_id in graph.insight_ids(NS):
        for record in graph.history(insight_id):
            if record.event_id in by_event and record.op != "ADD":
                assert record.insight_id in by_event[record.event_id], record
            if record.event_id in by_event and record.insight_id in (insight_id, None):
                chosen[f"{record.op} after {status[record.event_id]}"] += 1
    once = {str(e.event_id) for e, s in zip(events, shares, strict=True) if s.get("calls") == 1}
    first = len(once - set(letters))
    n = len(events)
    print(
        f"\n{llama.alias} on llama.cpp, {n} events ({settings.llm_events_per_call} a call): "
        f"decided {n - len(letters)}/{n} ({(n - len(letters)) / n:.0%}): first try {first}, "
        f"after repair {n - len(letters) - first}; dead-lettered {len(letters)}; "
        f"{usage['calls']} calls, {usage['prompt_tokens_per_event']} prompt and "
        f"{usage['completion_tokens_per_event']} completion tokens per event "
        f"(repairs included: {usage['prompt_tokens'] / n:.0f} and {usage['completion_tokens'] / n:.0f}); "
        f"{n / wall:.3f} events/s; failures {usage['failures']}\n  operations: {dict(sorted(chosen.items()))}"
    )
    for record in caplog.records:
        if record.msg == "llm.answer_refused":
            said = getattr(record, "answer", "")[:300]
            print(f"  refused: {getattr(record, 'reason', '')} — answer: {said}")
    for reason in list(letters.values())[:2]:
        print(f"  dead letter: {reason[:400]}")


def test_a_call_answer_has_exactly_the_events_and_insights_asked_for(llama: LocalLLMServer) -> None:
    """llama.cpp's server refuses json_schema as a refusal (never as a transient error), and the
    call's own schema sent with JSON mode is enforced as a grammar: whatever the model writes, its
    answer names the events and insights of the call, each once, in order."""
    settings = Settings(llm_base_url=llama.url, llm_model=llama.alias, llm_timeout_s=300.0)
    chat = ChatEndpoint(settings)
    inputs = []
    for q, status, which, fields in EVENTS[:3]:
        event = TaskEvent(namespace=NS, query=q, status=status, **fields)  # type: ignore[arg-type]
        heads = tuple(_head(f"i{i}", INSIGHTS[i]) for i in which)
        inputs.append(DecisionInput(event, heads, frozenset({"KEEP", "ARCHIVE", "REVISE"})))
    batch = build_batch(inputs, EstimatedTokens(), 1500)
    try:
        chat.complete(SYSTEM_PROMPT, batch.render(), "json_schema", max_tokens=64)
        refused = False
    except ResponseFormatUnsupported:
        refused = True
    schema = batch.answer_schema(batch.numbers)
    reply = chat.complete(SYSTEM_PROMPT, batch.render(), "json_object_schema", schema)
    doc = load_json(reply.text)  # as the controller reads it (a raw line break in a string is allowed)
    assert [e["event"] for e in doc["events"]] == batch.numbers
    for entry, view in zip(doc["events"], batch.events, strict=True):
        assert tuple(x["insight"] for x in entry["insight_edits"]) == view.labels
        assert all(x["operation"] in ("KEEP", "ARCHIVE", "REVISE") for x in entry["insight_edits"])
    print(f"\njson_schema refused: {refused}; answer: {reply.text[:300]}")
    chat.close()


def test_the_controller_steps_down_to_the_grammar_and_stays_there(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llama: LocalLLMServer
) -> None:
    settings = real_settings(tmp_path, redis_url, llama)
    controller = LLMController.from_settings(settings, redis_client)
    event = TaskEvent(namespace=NS, query=EVENTS[0][0], status="resolved")
    (decision,) = controller.decide([DecisionInput(event, (_head("a", INSIGHTS[0]),), frozenset({"KEEP"}))])
    assert controller._mode in ("json_schema", "json_object_schema")  # never plain JSON mode here
    print(f"\nresponse format in use: {controller._mode}; decision: {decision}")
    controller.close()


def _head(id_: str, text: str) -> InsightHead:
    return InsightHead(id=id_, namespace=NS, text=text, state="active", version=1, positive_count=1)
