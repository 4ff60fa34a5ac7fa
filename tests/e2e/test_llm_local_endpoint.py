"""What a small local endpoint (llama.cpp's server on a one-slot CPU) showed, on the local test
server: a json_schema refused with a 500 still falls back; the fallback carries the call's own
schema; each call asks for a completion budget sized to its events; a context overflow or a
timeout shrinks the load instead of failing events; an event that dies shows the model's answer
in its dead letter and in ``evomem stats``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import redis

from evomem import cli
from evomem.adapters.llm.adaptive import RECOVER_AFTER, AdaptiveLimits
from evomem.adapters.llm.controller import COMPLETION_OVERHEAD_TOKENS, LLMController, shorten
from evomem.adapters.llm.prompt import build_batch
from evomem.adapters.llm.token_count import EstimatedTokens
from evomem.pipeline.batches import ConsolidationWorker
from evomem.runtime import make_controller, open_worker
from evomem.testing.llm_server import Fault, LLMTestServer
from tests.support.llm_helpers import dead_letters, llm_settings, publish, run_until_idle, seed

NS = "local"
TEXTS = ["Check the year of a claim against the evidence.", "Search for the bridge entity first."]


def worker_for(
    tmp_path: Path, redis_url: str, client: redis.Redis, server: LLMTestServer, **overrides: object
) -> tuple[ConsolidationWorker, list[str]]:
    settings = llm_settings(tmp_path, redis_url, server, **overrides)
    return open_worker(settings, client, consumer="w1"), seed(client, NS, TEXTS)


@pytest.mark.parametrize("status", [500, 422, 400])
def test_a_refused_json_schema_falls_back_whatever_the_status(
    status: int, tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    """llama-cpp-python refuses json_schema with a 500 (its request validation error): that is a
    refusal of the format, not an outage; the controller steps down to JSON mode with a schema,
    decides every event, and never asks for json_schema again."""
    llm_server.reset(json_schema=False, refusal_status=status)
    worker, ids = worker_for(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1)
    events = [publish(redis_client, NS, f"task {i}", "resolved", ids) for i in range(3)]
    totals = run_until_idle(worker)

    assert totals["applied"] == 3 and totals["deferred"] == 0 and not dead_letters(redis_client)
    refused = [c for c in llm_server.calls if c.status == status]
    assert len(refused) >= 1 and all(c.mode == "json_schema" for c in refused)
    answered = [c for c in llm_server.calls if c.status == 200]
    assert len(answered) == len(events) and all(c.mode == "json_object" and c.schema for c in answered)


def test_the_fallback_schema_fixes_each_events_number_and_insights() -> None:
    """The schema sent with JSON mode is the call's own: exactly the events asked for, in order,
    each with exactly its insight numbers; a grammar built from it leaves a model only the choices."""
    from tests.e2e.test_llm_controller import inp, node

    a, b, c = node(1, "First."), node(2, "Second."), node(3, "Third.")
    batch = build_batch([inp("q1", retrieved=(a, b)), inp("q2", retrieved=(b, c))], EstimatedTokens(), 500)
    schema = batch.answer_schema([2])
    (entry,) = schema["properties"]["events"]["prefixItems"]
    assert schema["properties"]["events"]["items"] is False
    assert entry["properties"]["event"] == {"const": 2}
    edits = entry["properties"]["insight_edits"]["prefixItems"]
    assert [{s["properties"]["insight"]["const"] for s in e["anyOf"]} for e in edits] == [{2}, {3}]
    shapes = {
        s["properties"]["operation"]["const"]: s["properties"]["revised_insight_text"]
        for s in edits[0]["anyOf"]
    }
    assert shapes["KEEP"] == shapes["ARCHIVE"] == {"type": "null"}  # only a REVISE writes a text
    assert shapes["REVISE"]["type"] == "string" and shapes["REVISE"]["maxLength"] >= 200


def test_a_call_asks_for_a_completion_budget_sized_to_its_events(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    worker, ids = worker_for(
        tmp_path,
        redis_url,
        redis_client,
        llm_server,
        llm_events_per_call=3,
        llm_completion_tokens_per_event=100,
        llm_max_tokens=250,
    )
    for i in range(4):
        publish(redis_client, NS, f"task {i}", "resolved", ids)
    assert run_until_idle(worker)["applied"] == 4
    assert sorted((len(c.events), c.max_tokens) for c in llm_server.calls) == [
        (1, 100 + COMPLETION_OVERHEAD_TOKENS),
        (3, 250),  # 3 × 100 + overhead, capped by LLM_MAX_TOKENS
    ]


def test_a_prompt_too_long_for_the_context_halves_the_events_per_call_and_one_too_long_alone_dies(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    worker, ids = worker_for(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=8)
    llm_server.reset(context_tokens=900)  # the instructions and a few short events, not eight
    events = [publish(redis_client, NS, f"task {i}", "resolved", ids) for i in range(8)]
    steps = ["searched and read " * 40] * 40
    huge = publish(redis_client, NS, "HUGE task", "resolved", ids, trajectory=steps)
    totals = run_until_idle(worker)

    assert totals["applied"] == 8 and totals["dead_lettered"] == 1
    assert any(len(c.events) == 8 and c.status == 400 for c in llm_server.calls)
    assert max(len(c.events) for c in llm_server.calls if c.status == 200) < 8
    (letter,) = dead_letters(redis_client)
    assert "does not fit the model's context" in letter["reason"] and "(the event alone)" in letter["reason"]
    assert json.loads(letter["event"])["event_id"] == str(huge.event_id)
    assert {e.event_id for e in events}  # every other event was decided


def test_timeouts_halve_the_calls_in_flight_then_the_events_per_call() -> None:
    limits = AdaptiveLimits(concurrency=8, events_per_call=8)
    for expected in (4, 2, 1):
        limits.timed_out()
        assert (limits.concurrency, limits.events_per_call) == (expected, 8)
    limits.timed_out()
    assert (limits.concurrency, limits.events_per_call) == (1, 4)
    for _ in range(RECOVER_AFTER):
        limits.answered()
    assert limits.concurrency == 2 and limits.events_per_call == 4  # calls in flight come back
    limits.too_long(3)
    assert limits.events_per_call == 1


def test_a_slot_is_held_for_the_call_and_the_limit_binds_threads() -> None:
    limits = AdaptiveLimits(concurrency=2, events_per_call=1)
    inside, peak, lock = 0, 0, threading.Lock()
    release = threading.Event()

    def call() -> None:
        nonlocal inside, peak
        with limits.slot():
            with lock:
                inside += 1
                peak = max(peak, inside)
            release.wait(5)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join()
    assert peak <= 2


def test_calls_that_time_out_shrink_the_load_and_the_events_are_then_decided(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    """A one-slot server queues eight calls until they time out; after the first timeouts the
    worker sends fewer at once and every event is decided in the end."""
    worker, ids = worker_for(
        tmp_path,
        redis_url,
        redis_client,
        llm_server,
        llm_events_per_call=1,
        llm_concurrency=4,
        llm_transient_attempts=4,
        llm_timeout_s=0.5,
    )
    llm_server.add_fault(Fault("slow", times=2, delay_s=2.0))
    for i in range(4):
        publish(redis_client, NS, f"task {i}", "resolved", ids)
    totals = run_until_idle(worker)
    controller = worker.consolidator.controller
    assert isinstance(controller, LLMController)
    assert totals["applied"] == 4 and controller.limits.concurrency < 4


def test_a_dead_letter_shows_the_models_answer_and_stats_shows_the_reason(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    llm_server: LLMTestServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, ids = worker_for(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1)
    llm_server.add_fault(Fault("wrong_shape", match="BROKEN"))
    publish(redis_client, NS, "BROKEN task", "failed", ids)
    assert run_until_idle(worker)["dead_lettered"] == 1

    (letter,) = dead_letters(redis_client)
    assert 'the model answered: {"insight_edits": [{"insight_id": "1"' in letter["reason"]
    monkeypatch.setenv("EVOMEM_REDIS_URL", redis_url)
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(tmp_path / "data"))
    assert cli.main(["stats"]) == 0
    out = capsys.readouterr().out
    assert "dead letter" in out and "the model answered" in out and "invalid" in out
    assert cli.main(["stats", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "the model answered" in doc["recent_dead_letters"][0]["reason"]


def test_a_long_answer_is_cut_to_one_line() -> None:
    said = shorten('{"events":\n  [' + "x" * 1000 + "]}")
    assert len(said) == 300 and said.endswith("…") and "\n" not in said


def test_json_object_schema_can_be_chosen_outright(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    settings = llm_settings(tmp_path, redis_url, llm_server, llm_response_format="json_object_schema")
    controller = make_controller(settings, redis_client)
    assert isinstance(controller, LLMController)
    from tests.e2e.test_llm_controller import inp

    assert len(controller.decide([inp("q")])) == 1
    assert [(c.mode, c.schema) for c in llm_server.calls] == [("json_object", True)]


def test_the_demo_judges_with_any_endpoint_given_by_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], llm_server: LLMTestServer
) -> None:
    """``--llm-url`` points the demo's LLM controller at an endpoint, asking it for its model."""
    from evomem import demo

    args = ["--tasks", "20", "--batch", "10", "--phases", "1", "--json", "--llm-url", llm_server.url]
    assert demo.main([*args, "--data-dir", str(tmp_path / "demo")]) == 0
    llm = json.loads(capsys.readouterr().out)["llm"]
    assert llm["endpoint"] == f"evomem-test at {llm_server.url}"
    assert llm["events_applied"] == 20 and llm["events_dead_lettered"] == 0 and llm["calls"] >= 2
    assert "evomem-test" in llm["models"]


def test_the_local_server_names_what_is_missing(tmp_path: Path) -> None:
    from evomem.errors import ConfigError
    from evomem.testing.local_llm import LocalLLMServer

    with pytest.raises(ConfigError, match="no model file"):
        LocalLLMServer(tmp_path / "none.gguf")


def test_a_model_file_llama_cannot_load_ends_the_start_with_its_log(tmp_path: Path) -> None:
    from evomem.errors import ConfigError
    from evomem.testing.local_llm import LocalLLMServer, server_available

    if not server_available():
        pytest.skip("llama-cpp-python's server is not installed (make llm-local)")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    server = LocalLLMServer(bogus)
    with pytest.raises(ConfigError, match="exited") as caught:
        server.start()
    assert server.process is None and "bogus.gguf" in str(caught.value)


def test_a_revision_or_addition_that_copies_the_task_is_not_a_lesson() -> None:
    """What SmolLM2-135M did in the demo: insights rewritten into the task it was shown ("Plan:
    block E is on block H ..."). A REVISE that copies six words in a row of a report in the call
    (its event's or another's) is refused with the reason; such an ADD is dropped and the event's
    verdicts stand; the agent's own proposed insight may be adopted word for word."""
    from evomem.adapters.llm.answers import DuplicateCheck, read_answer
    from tests.e2e.test_llm_controller import inp, node

    query = "Plan: block E is on block H, block L is on the table; goal: D is on E."
    original = node(1, "Always put every block on the table first.")
    proposal = "Clear a block before moving it, and build the goal tower from the bottom up."
    batch = build_batch(
        [
            inp(
                query,
                retrieved=(original,),
                trajectory=["used 1 insight(s) from memory", "answered"],
                proposed_insight=proposal,
            ),
            inp("What is the elevation of the city where the founder of Paper Moons was born?"),
        ],
        EstimatedTokens(),
        1500,
    )

    def answer(op: str, revised: str | None, added: str | None) -> str:
        edit = {"insight": 1, "operation": op, "revised_insight_text": revised}
        add = {"decision": added is not None, "new_insight_text": added}
        return json.dumps({"events": [{"event": 1, "insight_edits": [edit], "add_new_insight": add}]})

    def read(text: str) -> object:
        return read_answer(text, "stop", batch, [1], "llm:t", DuplicateCheck(0.9))[1]

    copied = read(answer("REVISE", "Block E is on block H, block L is on the table.", None))
    assert isinstance(copied, str) and "copies the tasks' own text" in copied
    assert "block e is on block h" in copied
    kept = read(answer("KEEP", None, "The plan: block E is on block H, block L is on the table; done."))
    assert kept.add_new_insight.decision is False  # type: ignore[attr-defined]
    assert kept.insight_edits[0].operation == "KEEP"  # type: ignore[attr-defined]
    other = read(
        answer("KEEP", None, "Question: what is the elevation of the city where the founder was born")
    )
    assert other.add_new_insight.decision is False  # type: ignore[attr-defined]  # another event's task
    adopted = read(answer("KEEP", None, proposal))
    assert adopted.add_new_insight.new_insight_text == proposal  # type: ignore[attr-defined]
    narrowed = read(
        answer("REVISE", "Put a block on the table only when it sits on a block you must move.", None)
    )
    assert narrowed.insight_edits[0].operation == "REVISE"  # type: ignore[attr-defined]


def test_a_dead_letter_quotes_the_models_entry_for_its_event_not_the_whole_answer() -> None:
    from evomem.adapters.llm.answers import entry_text

    answer = json.dumps({"events": [{"event": 1, "x": "long " * 80}, {"event": 2, "insight_edits": []}]})
    assert entry_text(answer, 2) == '{"event":2,"insight_edits":[]}'
    assert entry_text(answer, 3) == answer and entry_text("not json", 1) == "not json"


def test_a_revision_may_repeat_an_insight_the_report_quotes_but_not_the_task() -> None:
    """An agent that says which insight it applied quotes the insight, not its task: a revision that
    shares words with that quote is no copy of the task (the duplicate check weighs repeats)."""
    from datetime import UTC, datetime

    from evomem.adapters.llm.answers import copied_from_task, task_words
    from evomem.adapters.llm.prompt import build_batch
    from evomem.adapters.llm.token_count import EstimatedTokens
    from evomem.core.decisions import DecisionInput
    from evomem.core.ports import InsightHead
    from schemas import TaskEvent

    applied = "Check the congestion window first and write down what it shows before you change anything."
    head = InsightHead("i1", "ns", applied, "active", 1)
    event = TaskEvent(
        namespace="ns",
        query="Draft a brief guide on tcp congestion control for our wiki",
        status="failed",
        trajectory=[f"applied an insight from memory: {applied}", "the draft went out without a review"],
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    batch = build_batch(
        [DecisionInput(event, (head,), frozenset({"KEEP", "ARCHIVE", "REVISE"}))], EstimatedTokens(), 1500
    )
    words = task_words(batch)
    assert (
        copied_from_task("For tcp, check the congestion window first and write down what it shows.", words)
        is None
    )
    assert copied_from_task("Note that the draft went out without a review at all.", words) is not None
