"""The review queue under SIGKILLed workers (real Redis, real Celery worker processes, on one server
and on a Redis Cluster): approvals and rejections published twice each while pool processes are
killed mid-batch end with each approved edit applied once, no rejected one applied, and every
decision recorded once."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.core.review import approval_event_id
from schemas import ControlRequest
from tests.slow.test_pipeline import NS, broker_env, consolidated, control_done, redis_url, seeded_insights
from tests.support.pipeline_helpers import Workers, event, wait_for, xadd_events

pytestmark = pytest.mark.slow
__all__ = ["redis_url"]  # the fixture, parametrised over one server and a cluster
#: Every REVISE or ARCHIVE of an insight with a supporting query is held (the seeds have one each).
UNDER_REVIEW = {"EVOMEM_REVIEW": "true", "EVOMEM_REVIEW_SUPPORT": "1"}


@pytest.fixture
def workers(redis_url: str, server_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(redis_url, tmp_path, {**broker_env(redis_url, server_url), **UNDER_REVIEW})
    yield w
    w.stop()


def test_approvals_and_rejections_under_sigkilled_workers_are_each_applied_once(
    redis_url: str, redis_client: redis.Redis, workers: Workers
) -> None:
    rng = random.Random(405)
    workers.start(2, concurrency=2)
    hot, seeds = seeded_insights(redis_client, 10)
    harms = [
        event(NS, f"task {i}", "failed", insight_feedback={rng.choice(hot): "harmful"}) for i in range(120)
    ]
    xadd_events(redis_client, harms)
    total = len(seeds) + len(harms)
    wait_for(lambda: consolidated(redis_client, total), 240, "the events consolidated", every=0.2)
    graph = RedisGraphStore(redis_client)
    held = graph.reviews(NS)
    assert len(held) == len(harms) and {r.state for r in held} == {"pending"}
    assert {n.state for n in graph.insights(hot).values()} == {"active"}  # nothing applied yet
    approved = {r.held.review_id for r in rng.sample(held, 60)}
    requests = [
        ControlRequest(
            namespace=NS,
            action="approve" if r.held.review_id in approved else "reject",
            by="ops",
            review_id=r.held.review_id,
        )
        for r in held
    ]
    stream = EventStream(redis_client)
    caught = []
    for n, request in enumerate(requests):
        stream.publish_control(request)
        stream.publish_control(request)  # a client's retry: the same request id
        if n % 15 == 0:
            caught.append(workers.kill_mid_batch(redis_client, rng))
    total += 2 * len(requests)
    try:
        wait_for(lambda: control_done(redis_client, total), 240, "every decision applied", every=0.2)
    except AssertionError:
        raise AssertionError(f"{stream.info()}\n{workers.logs()}") from None
    assert any(caught), f"no process was caught mid-batch: {caught}"
    states = {r.held.review_id: r.state for r in graph.reviews(NS)}
    assert states == {r: "approved" if r in approved else "rejected" for r in states}
    applied = {r for r in states if graph.is_applied(NS, approval_event_id(r))}
    assert applied == approved
    # one history record per approved edit, in the insights' own histories (written with the edit)
    records = [h for i in hot for h in graph.history(i) if h.decided_by.endswith("approved by ops")]
    assert sorted(h.event_id for h in records) == sorted(approval_event_id(r) for r in approved)
    assert stream.info()["dead_letters"] == 0
