"""Helpers of the LLM controller tests: one local OpenAI-compatible server per session, settings
that make retries quick, insights seeded straight into the system of record, and a worker loop
that runs until the stream has nothing left for it (a condition, not a sleep)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import redis

from evomem.adapters.redis.events import EventStream
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.pipeline.batches import ConsolidationWorker
from evomem.settings import Settings
from evomem.testing.llm_server import LLMTestServer
from evomem.testing.seeding import seed_insights
from schemas import InsightNode, TaskEvent

SECRET = "sk-test-0123456789abcdefSECRET"


def llm_settings(tmp_path: Path, redis_url: str, server: LLMTestServer, **overrides: Any) -> Settings:
    """The LLM controller against the test server, with retries that take milliseconds."""
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "redis_url": redis_url,
        "controller": "llm",
        "llm_base_url": server.url,
        "llm_api_key": SECRET,
        "llm_tokenizer": "estimate",
        "llm_timeout_s": 1.0,
        "llm_backoff_base_s": 0.005,
        "llm_backoff_max_s": 0.02,
        "llm_transient_attempts": 2,
        "llm_max_attempts": 2,
        "llm_events_per_call": 8,
        "max_deliveries": 3,
        "batch_wait_ms": 0,
        "archive_policy": "immediate",
    }
    values.update(overrides)
    return Settings(**values)


def seed(client: redis.Redis, namespace: str, texts: list[str]) -> list[str]:
    """Active insights with these texts, written as ADD edits of seed events; their ids."""
    return seed_insights(RedisGraphStore(client), namespace, texts)


def publish(
    client: redis.Redis, namespace: str, query: str, status: str, insight_ids: list[str], **fields: Any
) -> TaskEvent:
    event = TaskEvent(
        namespace=namespace,
        query=query,
        status=status,  # type: ignore[arg-type]
        retrieved_insight_ids=insight_ids,
        event_id=uuid.uuid4(),
        **fields,
    )
    EventStream(client).publish(event)
    return event


def run_until_idle(worker: ConsolidationWorker, max_batches: int = 50) -> dict[str, int]:
    """Batches until one finds nothing to do; the reports' counts added up."""
    total = {"events": 0, "applied": 0, "dead_lettered": 0, "deferred": 0, "batches": 0}
    for _ in range(max_batches):
        report = worker.run_batch(block_ms=0)
        if report.events == 0:
            return total
        total["batches"] += 1
        for k in ("events", "applied", "dead_lettered", "deferred"):
            total[k] += getattr(report, k)
    raise AssertionError(f"the worker was still busy after {max_batches} batches: {total}")


def snapshot(client: redis.Redis, ids: list[str]) -> dict[str, InsightNode]:
    return RedisGraphStore(client).insights(ids)


def dead_letters(client: redis.Redis) -> list[dict[str, str]]:
    return EventStream(client).dlq()


def applied(client: redis.Redis, event: TaskEvent) -> bool:
    return RedisGraphStore(client).is_applied(event.namespace, str(event.event_id))
