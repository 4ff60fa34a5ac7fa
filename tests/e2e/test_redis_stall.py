"""A Redis that stops answering (SIGSTOP) does not freeze the HTTP service: health answers 503
naming Redis within a 1 s probe timeout, the metrics and the OpenAPI document are served, a
retrieval is answered within ``EVOMEM_HTTP_REDIS_TIMEOUT_S``; after SIGCONT everything serves again."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import httpx

from evomem import Settings
from evomem.adapters.redis.connection import EmbeddedRedis
from evomem.service.server import build_server
from tests.support.pipeline_helpers import wait_for

RETRIEVE = {"query": "Verify: Mohra is a car", "namespace": "alpha"}


def test_a_stalled_redis_never_holds_health_metrics_or_docs(tmp_path: Path) -> None:
    redis_server = EmbeddedRedis(tmp_path / "redis")
    url = redis_server.ensure()
    pid = int(redis_server.pidfile.read_text())
    settings = Settings(data_dir=tmp_path / "data", redis_url=url, http_port=0, http_redis_timeout_s=0.5)
    srv = build_server(settings)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    stopped = False
    try:
        with httpx.Client(base_url=srv.url, timeout=1.0) as http:  # a probe's 1 s timeout
            assert http.post("/v1/retrieve", json=RETRIEVE).status_code == 200
            os.kill(pid, signal.SIGSTOP)
            stopped = True
            health = http.get("/healthz")
            assert health.status_code == 503 and "redis" in health.json()
            assert health.json()["redis"] != "ok"
            assert http.get("/openapi.json").status_code == 200
            assert http.get("/metrics").status_code == 200
            with httpx.Client(base_url=srv.url, timeout=0.5 + 1.0) as bounded:
                answer = bounded.post("/v1/retrieve", json=RETRIEVE)
                assert answer.status_code == 503 and "redis" in answer.json()["error"]
                assert bounded.post("/v1/retrieve", json=RETRIEVE).status_code == 503  # at once, no new wait
            health = http.get("/healthz")
            assert health.status_code == 503 and "not answering" in health.json()["redis"]
            os.kill(pid, signal.SIGCONT)
            stopped = False
            wait_for(lambda: http.get("/healthz").status_code == 200, 30, "health to recover")
            assert http.post("/v1/retrieve", json=RETRIEVE).status_code == 200
            event = {"namespace": "alpha", "query": "Verify: Mohra is a car", "status": "resolved"}
            accepted = http.post("/v1/events", content=json.dumps(event))
            assert accepted.status_code == 202, accepted.text
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()
        redis_server.stop()
