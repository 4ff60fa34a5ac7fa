"""The long real-process runs of test_hardening.py (make test-slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from evomem import Memory, Settings, keys
from evomem.adapters.redis.connection import EmbeddedRedis
from evomem.adapters.redis.events import EventStream
from tests.e2e.test_hardening import CLI, Serve
from tests.support.pipeline_helpers import FAST, child_env, wait_for


# -- item 3: one owner of the embedded Redis -----------------------------------------------------
@pytest.mark.slow
def test_stopping_the_service_leaves_the_embedded_redis_to_a_running_worker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    embedded = EmbeddedRedis(data)
    serve = Serve(data, tmp_path / "serve.log")
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [*CLI, "worker", "-c", "1"],
            env=child_env(EVOMEM_DATA_DIR=str(data), **FAST),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def consolidated(n: int) -> bool:
            client = embedded.client()
            try:
                stream = EventStream(client)
                info = stream.info()
                return bool(info["length"] >= n and info["lag"] == 0 and info["pending"] == 0)
            finally:
                client.close()  # the test holds no connection while the service stops

        event = {
            "namespace": "ops",
            "query": "Check the disk",
            "status": "resolved",
            "proposed_insight": "Df.",
        }
        req = urllib.request.Request(
            serve.url + "/v1/events", json.dumps(event).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as response:
            assert response.status == 202
        wait_for(lambda: consolidated(1), 60, "the worker to consolidate the first event")
        assert serve.stop() == 0
        assert embedded.running(), "the service stopped the Redis a worker still uses"
        client = embedded.client()
        EventStream(client).publish_raw(json.dumps({**event, "query": "Check the fans"}))
        client.close()
        wait_for(lambda: consolidated(2), 60, "the worker to consolidate an event after the service stopped")
    finally:
        serve.stop()
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        embedded.stop()


@pytest.mark.slow
def test_consolidate_reclaims_the_batch_of_a_consolidation_killed_mid_batch(
    settings: Settings, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A consolidating process SIGKILLed while it holds its batch (here: stopped inside the
    controller); the next `evomem consolidate` takes the batch over once it is idle."""
    with Memory.open_local(settings, index=False) as mem:
        for n in range(5):
            mem.report(None, namespace="ops", query=f"Task {n}", status="resolved", proposed_insight=f"L{n}.")
    code = (
        "import os, signal\n"
        "from evomem import Memory, Settings\n"
        "mem = Memory.open_local(Settings(), index=False)\n"
        "mem.consolidator.controller.decide = lambda *a, **k: os.kill(os.getpid(), signal.SIGSTOP)\n"
        "mem.consolidate()\n"
    )
    env = child_env(
        EVOMEM_REDIS_URL=redis_url, EVOMEM_DATA_DIR=str(tmp_path / "cli"), EVOMEM_CONTROLLER="rules"
    )
    victim = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:

        def holds_batch() -> bool:
            info = EventStream(redis_client).info()
            return info["pending"] == 5

        wait_for(holds_batch, 60, "the victim to read its batch")
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    fast = {"EVOMEM_CLAIM_IDLE_MS": "200", "EVOMEM_BATCH_TIME_LIMIT_S": "0.1"}

    def idle_enough() -> bool:
        pending = redis_client.xpending_range(keys.EVENTS_STREAM, keys.CONSUMER_GROUP, "-", "+", 10)
        return all(p["time_since_delivered"] >= 200 for p in pending)

    wait_for(idle_enough, 10, "the batch to be idle")
    result = subprocess.run(
        [*CLI, "consolidate", "--json"], env={**env, **fast}, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["applied"] == 5
    assert EventStream(redis_client).info()["pending"] == 0
