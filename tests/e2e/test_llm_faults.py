"""Every LLM failure, end to end through a consolidation worker on the real Redis and the local
OpenAI-compatible server: retried per policy, then pending or dead-lettered with the reason; no
partial edit; the other events flow on; a redelivered event costs no second LLM call."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from evomem.adapters.redis.graph import RedisGraphStore
from evomem.errors import TransientError
from evomem.pipeline.batches import ConsolidationWorker
from evomem.runtime import open_worker
from evomem.testing.llm_server import Fault, LLMTestServer
from tests.support.llm_helpers import (
    SECRET,
    applied,
    dead_letters,
    llm_settings,
    publish,
    run_until_idle,
    seed,
    snapshot,
)

NS = "faults"
TEXTS = [
    "Check the year of a claim against the evidence.",
    "Search for the bridge entity first.",
    "Clear a block before moving it.",
]


def setup(
    tmp_path: Path, redis_url: str, client: redis.Redis, server: LLMTestServer, **overrides: object
) -> tuple[ConsolidationWorker, list[str]]:
    settings = llm_settings(tmp_path, redis_url, server, **overrides)
    worker = open_worker(settings, client, consumer="w1")
    return worker, seed(client, NS, TEXTS)


def test_llm_decisions_are_applied_with_the_model_and_prompt_version_in_the_history(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server)
    ok = publish(
        redis_client, NS, "task resolved", "resolved", ids[:2], proposed_insight="Quote the evidence."
    )
    bad = publish(redis_client, NS, "task failed", "failed", ids[2:])
    totals = run_until_idle(worker)

    assert totals["applied"] == 2 and llm_server.requests == 1  # both events in one call
    nodes = snapshot(redis_client, ids)
    assert all(len(nodes[i].positive) == 2 for i in ids[:2])  # the seed's query and this one
    assert nodes[ids[2]].state == "archived"
    history = RedisGraphStore(redis_client).history(ids[0])
    assert history[-1].decided_by == "llm:gpt-4o-mini:prompt-v1" and history[-1].event_id == str(ok.event_id)
    assert applied(redis_client, bad)
    texts = {
        n.text
        for n in RedisGraphStore(redis_client)
        .insights(RedisGraphStore(redis_client).insight_ids(NS))
        .values()
    }
    assert "Quote the evidence." in texts


def test_a_429_is_retried_after_its_retry_after_and_then_applied(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server)
    llm_server.add_fault(Fault("rate_limit", times=1, retry_after_s=0.05))
    event = publish(redis_client, NS, "task", "resolved", ids[:1])
    sleeps: list[float] = []
    controller = worker.consolidator.controller
    controller.sleep = sleeps.append  # type: ignore[attr-defined]
    totals = run_until_idle(worker)

    assert totals["applied"] == 1 and applied(redis_client, event)
    assert [c.status for c in llm_server.calls] == [429, 200]
    assert len(sleeps) == 1 and sleeps[0] >= 0.05  # the Retry-After, not a shorter backoff


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "unavailable", "slow"])
def test_a_persistent_transient_fault_is_retried_per_policy_then_dead_lettered_and_others_flow(
    kind: str, tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    """429 / 500 / 503 / slower than the timeout, every time, for one event: each delivery tries the
    call ``LLM_TRANSIENT_ATTEMPTS`` times; the event stays pending until its last delivery, then goes
    to the dead letters with the endpoint's reason. Nothing of it is applied; the healthy event is."""
    worker, ids = setup(
        tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1, llm_timeout_s=0.3
    )
    llm_server.add_fault(Fault(kind, match="POISON", retry_after_s=0.01, delay_s=1.0))  # type: ignore[arg-type]
    before = snapshot(redis_client, ids)
    poison = publish(redis_client, NS, "POISON task", "failed", ids[:2], proposed_insight="Never applied.")
    healthy = publish(redis_client, NS, "healthy task", "resolved", ids[2:])
    totals = run_until_idle(worker)

    assert applied(redis_client, healthy) and not applied(redis_client, poison)
    assert len(list(llm_server.calls_for("POISON"))) == 2 * 3  # attempts × deliveries
    assert totals["deferred"] == 2 and totals["dead_lettered"] == 1
    (letter,) = dead_letters(redis_client)
    assert letter["deliveries"] == "3" and letter["reason"].startswith("controller after 3 deliveries: LLM ")
    said = {"slow": "timed out", "rate_limit": "(429)", "server_error": "(500)", "unavailable": "(503)"}[kind]
    assert said in letter["reason"]
    after = snapshot(redis_client, ids)
    assert {i: after[i] for i in ids[:2]} == {i: before[i] for i in ids[:2]}  # no partial edit
    assert RedisGraphStore(redis_client).load_decisions([(NS, str(poison.event_id))]) == {}


@pytest.mark.parametrize("kind", ["truncated", "wrong_shape", "unknown_ids", "bad_request"])
def test_invalid_output_is_retried_with_the_error_shown_then_dead_lettered(
    kind: str, tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    """Unusable answers, every time: the event is asked again ``LLM_MAX_ATTEMPTS`` times in all, the
    retry telling the model what was wrong, then dead-lettered on its first delivery with the reason."""
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1)
    llm_server.add_fault(Fault(kind, match="BROKEN"))  # type: ignore[arg-type]
    before = snapshot(redis_client, ids)
    broken = publish(redis_client, NS, "BROKEN task", "failed", ids, proposed_insight="Never applied.")
    healthy = publish(redis_client, NS, "healthy task", "resolved", ids[:1])
    totals = run_until_idle(worker)

    calls = list(llm_server.calls_for("BROKEN"))
    assert len(calls) == 2 and totals["deferred"] == 0
    assert "could not be used" not in calls[0].prompt and "could not be used" in calls[1].prompt
    (letter,) = dead_letters(redis_client)
    assert letter["deliveries"] == "1" and "invalid after 2 tries" in letter["reason"]
    expected = {
        "truncated": "cut off",
        "wrong_shape": '{"events"',
        "unknown_ids": "not retrieved for it",
        "bad_request": "(400)",
    }[kind]
    assert expected in letter["reason"]
    assert applied(redis_client, healthy) and not applied(redis_client, broken)
    after = snapshot(redis_client, ids)
    assert {i: after[i] for i in ids[1:]} == {i: before[i] for i in ids[1:]}


def test_an_event_answered_badly_in_a_shared_call_does_not_hold_back_the_others(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    """Eight events in one call, one entry names an unknown insight: the seven are applied from the
    first answer; only the bad one is asked again, and its second answer is applied."""
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server)
    llm_server.add_fault(Fault("unknown_ids", match="ODD", times=1))
    events = [
        publish(redis_client, NS, f"{'ODD ' if i == 3 else ''}task {i}", "resolved", ids) for i in range(8)
    ]
    totals = run_until_idle(worker)

    assert totals["applied"] == 8 and all(applied(redis_client, e) for e in events)
    assert [len(c.events) for c in llm_server.calls] == [8, 1]
    assert llm_server.calls[1].queries == ("ODD task 3",)


def test_json_wrapped_in_prose_is_read(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server)
    llm_server.add_fault(Fault("prose"))
    event = publish(redis_client, NS, "task", "failed", ids[:1])
    assert run_until_idle(worker)["applied"] == 1 and applied(redis_client, event)
    assert llm_server.requests == 1


def test_an_endpoint_without_json_schema_gets_json_mode_from_then_on(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    llm_server.reset(json_schema=False)
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server, llm_events_per_call=1)
    events = [publish(redis_client, NS, f"task {i}", "resolved", ids) for i in range(3)]
    assert run_until_idle(worker)["applied"] == 3 and all(applied(redis_client, e) for e in events)
    refused = [c for c in llm_server.calls if c.status == 400]
    assert 1 <= len(refused) <= 3 and all(c.mode == "json_schema" for c in refused)  # calls already in flight
    assert [c.mode for c in llm_server.calls if c.status == 200] == ["json_object"] * 3
    llm_server.reset()
    later = publish(redis_client, NS, "a later task", "failed", ids)
    assert run_until_idle(worker)["applied"] == 1 and applied(redis_client, later)
    assert [(c.mode, c.status) for c in llm_server.calls] == [("json_object", 200)]


def test_a_redelivered_event_reuses_its_stored_decision_without_a_second_llm_call(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    llm_server: LLMTestServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decision is stored before it is applied: when applying fails (Redis dropped), the event
    stays pending, and its redelivery applies the stored decision; the endpoint is not asked again."""
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server)
    event = publish(redis_client, NS, "task", "failed", ids)
    real = worker.graph.apply_many
    calls = {"n": 0}

    def flaky(plans):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise TransientError("redis dropped the connection")
        return real(plans)

    monkeypatch.setattr(worker.consolidator.graph, "apply_many", flaky)
    with pytest.raises(TransientError):
        worker.run_batch(block_ms=0)
    assert llm_server.requests == 1 and not applied(redis_client, event)
    assert run_until_idle(worker)["applied"] == 1 and applied(redis_client, event)
    assert llm_server.requests == 1


def test_a_refused_key_keeps_events_pending_and_no_reason_or_log_shows_the_key(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    llm_server: LLMTestServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """401 is the operator's problem, not the event's: no quick retry, the event waits for a fix
    until its last delivery. The endpoint echoes the wrong key in its message; we never repeat it."""
    llm_server.state.api_key = "the-right-key"
    worker, ids = setup(tmp_path, redis_url, redis_client, llm_server)
    event = publish(redis_client, NS, "task", "failed", ids)
    with caplog.at_level("DEBUG"):
        totals = run_until_idle(worker)
    assert totals["deferred"] == 2 and totals["dead_lettered"] == 1 and not applied(redis_client, event)
    assert llm_server.requests == 3  # one per delivery: a refusal is not retried at once
    (letter,) = dead_letters(redis_client)
    assert "(401)" in letter["reason"] and SECRET not in letter["reason"]
    assert SECRET not in caplog.text and SECRET[:12] not in letter["reason"]
