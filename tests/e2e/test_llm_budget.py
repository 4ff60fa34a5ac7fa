"""The budget shared by all workers: the Redis rate limit (requests and tokens per minute,
Retry-After) and the token accounting per event, operation and model with an estimated cost."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from evomem.adapters.llm.endpoint import EndpointError, retry_after_s
from evomem.adapters.llm.ratelimit import RateLimiter
from evomem.adapters.llm.usage import event_usage, summary
from evomem.runtime import open_worker
from evomem.testing.llm_server import LLMTestServer
from tests.support.llm_helpers import (
    applied,
    llm_settings,
    publish,
    run_until_idle,
    seed,
)


def test_two_workers_share_one_request_budget(redis_client: redis.Redis) -> None:
    a = RateLimiter(redis_client, "endpoint|model", rpm=3)
    b = RateLimiter(redis_client, "endpoint|model", rpm=3)
    assert [a.try_acquire(0), b.try_acquire(0), a.try_acquire(0)] == [0.0, 0.0, 0.0]
    wait = b.try_acquire(0)
    assert 19.0 < wait <= 20.0  # the next of 3 per minute frees in 20 s
    assert RateLimiter(redis_client, "another|model", rpm=3).try_acquire(0) == 0.0


def test_the_token_budget_is_reserved_then_settled(redis_client: redis.Redis) -> None:
    lim = RateLimiter(redis_client, "e|m", tpm=1000)
    assert lim.try_acquire(600) == 0.0
    assert 11.0 < lim.try_acquire(600) <= 12.0  # 200 short at 1000 a minute
    lim.settle(reserved=600, used=150)  # the call used less: 450 come back
    assert lim.try_acquire(600) == 0.0


def test_the_limit_is_atomic_across_threads(redis_client: redis.Redis) -> None:
    lim = RateLimiter(redis_client, "e|m", rpm=10)
    granted = []
    barrier = threading.Barrier(20)

    def take() -> None:
        barrier.wait()
        granted.append(lim.try_acquire(1) == 0.0)

    threads = [threading.Thread(target=take) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 10


def test_a_retry_after_holds_back_every_worker_and_a_long_wait_gives_up_at_the_deadline(
    redis_client: redis.Redis,
) -> None:
    import time

    slept: list[float] = []
    a = RateLimiter(redis_client, "e|m")
    b = RateLimiter(redis_client, "e|m", sleep=slept.append)
    a.block(30)
    assert 29.0 < b.try_acquire(0) <= 30.0
    with pytest.raises(EndpointError) as info:
        b.acquire(0, deadline=time.monotonic() + 0.5)
    assert info.value.kind == "rate_limit_wait" and not info.value.retry_now
    assert len(slept) == 1 and slept[0] <= 0.5  # waited out what the batch had left, no more


def test_retry_after_headers_are_read_in_every_form() -> None:
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert retry_after_s({}) is None and retry_after_s({"retry-after": "soon"}) is None


def test_a_worker_over_its_request_budget_leaves_the_rest_pending(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    """rpm=2: two events are judged, the third would wait 30 s, longer than the batch has: it stays
    pending and the endpoint never sees it."""
    settings = llm_settings(
        tmp_path,
        redis_url,
        llm_server,
        llm_rpm=2,
        llm_events_per_call=1,
        llm_concurrency=1,
        batch_time_limit_s=2.0,
    )
    worker = open_worker(settings, redis_client, consumer="w1")
    worker.consolidator.controller.limiter.sleep = lambda _s: None  # type: ignore[attr-defined]
    ids = seed(redis_client, "ns", ["An insight."])
    events = [publish(redis_client, "ns", f"task {i}", "resolved", ids) for i in range(3)]
    report = worker.run_batch(block_ms=0)
    assert report.applied == 2 and report.deferred == 1 and llm_server.requests == 2
    assert sum(applied(redis_client, e) for e in events) == 2


def test_usage_is_counted_per_event_operation_and_model_with_an_estimated_cost(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, llm_server: LLMTestServer
) -> None:
    from evomem.testing.llm_server import Fault

    settings = llm_settings(
        tmp_path, redis_url, llm_server, llm_price_prompt_per_1k=0.5, llm_price_completion_per_1k=2.0
    )
    worker = open_worker(settings, redis_client, consumer="w1")
    ids = seed(redis_client, "ns", ["An insight.", "Another one."])
    llm_server.add_fault(Fault("unknown_ids", match="task 2", times=1))
    events = [publish(redis_client, "ns", f"task {i}", "failed", ids) for i in range(5)]
    assert run_until_idle(worker)["applied"] == 5

    s = summary(redis_client, settings)
    calls = llm_server.calls
    assert s["calls"] == len(calls) == 2 and s["events_judged"] == 5
    assert s["prompt_tokens"] == sum(c.prompt_tokens for c in calls)
    assert s["completion_tokens"] == sum(c.completion_tokens for c in calls)
    assert s["operations"]["decide"]["calls"] == 1 and s["operations"]["repair"]["events"] == 1
    assert s["failures"] == {"invalid": 1}
    model = s["models"]["gpt-4o-mini"]
    assert model["estimated_cost_usd"] == pytest.approx(
        s["prompt_tokens"] / 1000 * 0.5 + s["completion_tokens"] / 1000 * 2.0, abs=1e-6
    )
    per_event = [event_usage(redis_client, str(e.event_id)) for e in events]
    assert sum(u["prompt_tokens"] for u in per_event) == s["prompt_tokens"]
    assert per_event[2]["calls"] == 2 and per_event[0]["calls"] == 1


def test_a_model_without_a_price_shows_no_cost(redis_client: redis.Redis) -> None:
    from evomem.adapters.llm.usage import UsageRecorder

    UsageRecorder(redis_client).record_call("llama3:8b", "decide", ["e1", "e2"], 101, 11)
    s = summary(redis_client)
    assert s["models"]["llama3:8b"]["prompt_tokens"] == 101 and s["estimated_cost_usd"] is None
    assert s["prompt_tokens_per_event"] == 50.5
    assert event_usage(redis_client, "e1") == {"calls": 1, "prompt_tokens": 51, "completion_tokens": 6}


def test_a_dated_model_snapshot_is_priced_as_its_model() -> None:
    from evomem.adapters.llm.usage import price_of

    assert price_of("gpt-4o-mini-2024-07-18") == price_of("gpt-4o-mini") != price_of("gpt-4o-2024-08-06")
    assert price_of("gpt-4o-2024-08-06") == price_of("gpt-4o") and price_of("llama3:8b") is None
