"""The long real-process runs of test_worker_metrics.py (make test-slow)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from evomem import Memory, Settings
from evomem.service.server import EvomemHTTPServer, build_server
from tests.e2e.test_worker_metrics import DASHBOARD, _events, parse, value
from tests.support.pipeline_helpers import Workers, wait_for


@pytest.fixture
def service(settings: Settings, redis_client: redis.Redis) -> Iterator[EvomemHTTPServer]:
    srv = build_server(settings.model_copy(update={"http_port": 0}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()
    srv.service.runtime.close()


def _worker_url(log: Path) -> str | None:
    found = re.search(r"worker metrics on (http://\S+/metrics)", log.read_text(errors="replace"))
    return found.group(1) if found else None


@pytest.mark.slow
def test_worker_process_and_service_scrape_cleanly_and_the_dashboard_uses_their_names(
    service: EvomemHTTPServer, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``evomem worker -c 2 --metrics-port 0``: events consolidated by its prefork children show in
    its parent's /metrics; every metric the Grafana dashboard queries is exposed by one of the two."""
    workers = Workers(
        redis_url, tmp_path, {"EVOMEM_WORKER_METRICS_PORT": "0", "EVOMEM_DATA_DIR": str(tmp_path)}
    )
    workers.start(1, concurrency=2)
    try:
        log = tmp_path / "worker-0.log"
        wait_for(lambda: _worker_url(log) is not None, 60, "the worker's metrics endpoint")
        url = _worker_url(log)
        assert url is not None
        mem = Memory(service.service.runtime)
        _events(mem, "alpha", 6, redis_client)
        httpx.post(
            f"{service.url}/v1/retrieve", json={"query": "Verify claim 1 about alpha", "namespace": "alpha"}
        )

        def consolidated() -> bool:
            metrics = parse(httpx.get(url, timeout=10).text)
            return value(metrics, "evomem_worker_events_total", result="applied") == 6

        wait_for(consolidated, 60, "the workers to consolidate the events")
        worker = parse(httpx.get(url, timeout=10).text)
        assert value(worker, "evomem_worker_dead_letters_total") == 1
        assert value(worker, "evomem_worker_decisions_total", operation="ADD", outcome="added") == 6
        assert value(worker, "evomem_worker_batch_seconds_count") >= 1
        assert value(worker, "evomem_stream_lag") == 0 and value(worker, "evomem_dead_letters") == 1

        response = httpx.get(f"{service.url}/metrics", timeout=10)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        served = parse(response.text)
        assert value(served, "evomem_requests_total", route="retrieve", outcome="ok") >= 1
    finally:
        workers.stop()

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\bevomem_[a-z0-9_]+", e)}
    exposed = set(worker) | set(served)
    assert used, "the dashboard queries nothing"
    assert used <= exposed, f"the dashboard queries metrics nobody exposes: {sorted(used - exposed)}"
    covered = {"evomem_worker_events_total", "evomem_worker_batch_seconds_bucket", "evomem_stream_lag"}
    assert covered <= used and "evomem_request_seconds_bucket" in used


@pytest.mark.slow
def test_flower_follows_the_workers(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    """``celery -A workers.app flower`` against our Celery app: it sees the worker online and the
    consolidation tasks it runs (its own Prometheus /metrics says so)."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "EVOMEM_REDIS_URL": redis_url, "EVOMEM_DATA_DIR": str(tmp_path)}
    workers = Workers(redis_url, tmp_path, {"EVOMEM_DATA_DIR": str(tmp_path)})
    with open(tmp_path / "flower.log", "wb") as log:
        flower = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.app",
                "flower",
                "--address=127.0.0.1",
                f"--port={port}",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    workers.start(1, concurrency=1)
    try:

        def flower_metrics() -> dict[str, Any]:
            try:
                return parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
            except httpx.HTTPError:
                return {}

        wait_for(
            lambda: any(v == 1 for v in flower_metrics().get("flower_worker_online", {}).values()),
            90,
            "Flower to see the worker",
        )
        with Memory.open(Settings(redis_url=redis_url, data_dir=tmp_path), index=False) as mem:
            _events(mem, "alpha", 2, redis_client)

        def succeeded() -> bool:
            events = flower_metrics().get("flower_events_total", {})
            return any(
                dict(labels).get("task") == "evomem.consolidate"
                and dict(labels).get("type") == "task-succeeded"
                for labels in events
            )

        wait_for(succeeded, 90, "Flower to see a consolidation task succeed")
    finally:
        workers.stop()
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(timeout=20)
