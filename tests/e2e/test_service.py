"""The retrieval service over HTTP: the API of DESIGN §8, tenancy, failing open, the remote SDK."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from evomem import InvalidEventError, Memory, NotFoundError, Settings, StoreLockedError
from evomem.adapters.redis.connection import EmbeddedRedis
from evomem.sdk import RemoteMemory
from evomem.service.server import EvomemHTTPServer, build_server

TOKENS = "tok-alpha=alpha;tok-beta=beta;tok-admin=*"
_clients: list[Client] = []


class Client:
    def __init__(self, server: EvomemHTTPServer, token: str | None) -> None:
        host, port = server.server_address[:2]
        self.conn = http.client.HTTPConnection(str(host), int(port), timeout=10)
        self.headers = {"Content-Type": "application/json"}
        _clients.append(self)
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        raw = response.read()
        ctype = response.getheader("Content-Type") or ""
        return response.status, json.loads(raw) if "json" in ctype else raw.decode()


@pytest.fixture
def server(settings: Settings, redis_client: redis.Redis) -> Iterator[EvomemHTTPServer]:
    # archive_min=1: a single harmful verdict archives a fresh insight, as these tests show over HTTP
    srv = build_server(
        settings.model_copy(update={"tokens": _secret(TOKENS), "http_port": 0, "archive_min": 1})
    )
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    close_clients()
    srv.shutdown()
    srv.server_close()
    srv.service.runtime.close()


def close_clients() -> None:
    while _clients:
        _clients.pop().conn.close()


def _secret(value: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(value)


def seed(server: EvomemHTTPServer, namespace: str, texts: list[str]) -> None:
    """Insights added through the HTTP API, consolidated by the service's memory."""
    client = Client(server, "tok-admin")
    for n, text in enumerate(texts):
        status, _ = client.call(
            "POST",
            "/v1/events",
            {
                "namespace": namespace,
                "query": f"Verify claim {n} about {namespace}",
                "status": "resolved",
                "proposed_insight": text,
            },
        )
        assert status == 202
    Memory(server.service.runtime).consolidate()


def test_retrieve_report_and_inspect_over_http(server: EvomemHTTPServer) -> None:
    seed(server, "alpha", ["Check the vehicle class first."])
    client = Client(server, "tok-alpha")
    status, body = client.call(
        "POST", "/v1/retrieve", {"query": "Verify claim 0 about alpha", "namespace": "alpha"}
    )
    assert status == 200
    (served,) = body["insights"]
    assert served["text"] == "Check the vehicle class first." and served["support"] == 1
    assert body["stale"]["projector_lag_s"] >= 0 and body["degraded"] is None
    status, accepted = client.call(
        "POST",
        "/v1/events",
        {
            "namespace": "alpha",
            "query": "Verify claim 0 about alpha",
            "status": "failed",
            "retrieval_id": body["retrieval_id"],
            "insight_feedback": {served["id"]: "harmful"},
        },
    )
    assert status == 202 and accepted["event_id"]
    Memory(server.service.runtime).consolidate()
    status, node = client.call("GET", f"/v1/insights/{served['id']}")
    assert status == 200
    assert node["insight"]["state"] == "archived" and len(node["insight"]["negative"]) == 1
    assert [h["outcome"] for h in node["history"]] == ["added", "archived"]
    status, lineage = client.call("GET", f"/v1/insights/{served['id']}/lineage")
    assert status == 200 and [e["id"] for e in lineage["lineage"]] == [served["id"]]


def test_requests_without_a_valid_token_are_refused_and_change_nothing(server: EvomemHTTPServer) -> None:
    event = {"namespace": "alpha", "query": "q", "status": "resolved", "proposed_insight": "Sneaky."}
    for token in (None, "not-a-token"):
        client = Client(server, token)
        assert client.call("POST", "/v1/events", event)[0] == 401
        assert client.call("POST", "/v1/retrieve", {"query": "q", "namespace": "alpha"})[0] == 401
        assert client.call("GET", "/v1/insights/x")[0] == 401
    status, body = Client(server, "tok-beta").call("POST", "/v1/events", event)
    assert status == 403 and "alpha" in body["error"]
    assert (
        Client(server, "tok-beta").call("POST", "/v1/retrieve", {"query": "q", "namespace": "alpha"})[0]
        == 403
    )
    assert Memory(server.service.runtime).stream.info()["length"] == 0


def test_another_tenants_insight_does_not_exist_for_a_token(server: EvomemHTTPServer) -> None:
    seed(server, "alpha", ["Alpha's secret lesson."])
    (insight_id,) = Memory(server.service.runtime).graph.insight_ids("alpha")
    status, body = Client(server, "tok-beta").call("GET", f"/v1/insights/{insight_id}")
    assert status == 404 and "secret" not in json.dumps(body)
    assert Client(server, "tok-beta").call("GET", f"/v1/insights/{insight_id}/lineage")[0] == 404
    assert Client(server, "tok-alpha").call("GET", f"/v1/insights/{insight_id}")[0] == 200


def test_two_tenants_writing_and_reading_at_once_never_see_each_other(server: EvomemHTTPServer) -> None:
    """Both tenants use the same task texts and insight texts; every retrieval of either returns
    only its own namespace's insights, and a write into the other namespace is refused."""
    ids: dict[str, set[str]] = {"alpha": set(), "beta": set()}
    errors: list[str] = []
    stop = threading.Event()

    def tenant(ns: str, token: str, other: str) -> None:
        client = Client(server, token)
        rng = random.Random(ns)
        for n in range(40):
            status, _ = client.call(
                "POST",
                "/v1/events",
                {
                    "namespace": ns,
                    "query": f"Verify claim {n % 7}",
                    "status": "resolved",
                    "proposed_insight": f"Shared lesson {n % 5}.",
                },
            )
            if status != 202:
                errors.append(f"{ns} write {status}")
            if (
                client.call("POST", "/v1/events", {"namespace": other, "query": "x", "status": "resolved"})[0]
                != 403
            ):
                errors.append(f"{ns} wrote into {other}")
            status, body = client.call(
                "POST", "/v1/retrieve", {"query": f"Verify claim {rng.randint(0, 6)}", "namespace": ns}
            )
            for insight in body.get("insights", []):
                ids[ns].add(insight["id"])

    def consolidate() -> None:
        while not stop.is_set():
            Memory(server.service.runtime).consolidate()
            stop.wait(0.02)

    worker = threading.Thread(target=consolidate)
    worker.start()
    tenants = [
        threading.Thread(target=tenant, args=a)
        for a in (("alpha", "tok-alpha", "beta"), ("beta", "tok-beta", "alpha"))
    ]
    for t in tenants:
        t.start()
    for t in tenants:
        t.join()
    stop.set()
    worker.join()
    assert errors == []
    graph = Memory(server.service.runtime).graph
    assert ids["alpha"] and ids["beta"], "both tenants were served insights"
    assert ids["alpha"] <= graph.insight_ids("alpha")
    assert ids["beta"] <= graph.insight_ids("beta")
    assert not graph.insight_ids("alpha") & graph.insight_ids("beta")


def test_a_malformed_event_gets_422_naming_the_field(server: EvomemHTTPServer) -> None:
    client = Client(server, "tok-alpha")
    status, body = client.call("POST", "/v1/events", {"namespace": "alpha", "query": "q", "status": "maybe"})
    assert status == 422 and body["field"] == "status"
    status, body = client.call(
        "POST",
        "/v1/events",
        {"namespace": "alpha", "query": "q", "status": "failed", "insight_feedback": {"nope": "harmful"}},
    )
    assert status == 422 and body["field"] == "insight_feedback[nope]"
    assert Memory(server.service.runtime).stream.info()["length"] == 0


def test_health_metrics_and_openapi(server: EvomemHTTPServer) -> None:
    client = Client(server, None)
    status, health = client.call("GET", "/healthz")
    assert status == 200 and health["redis"] == "ok"
    server.service.runtime.retriever.wait_warm(30)  # type: ignore[union-attr]
    _, health = client.call("GET", "/healthz")
    assert health["text_cache"]["warming"] is False  # started by the service; an empty store warms at once
    assert health["text_cache"]["capacity"] == server.service.runtime.settings.text_cache
    Client(server, "tok-alpha").call("POST", "/v1/retrieve", {"query": "q", "namespace": "alpha"})
    status, text = client.call("GET", "/metrics")
    assert status == 200
    assert 'evomem_requests_total{route="retrieve",outcome="ok"} 1' in text
    assert 'evomem_request_seconds_bucket{route="retrieve",le="+Inf"} 1' in text
    assert "evomem_projector_lag_seconds" in text
    status, doc = client.call("GET", "/openapi.json")
    assert status == 200
    assert {
        "/v1/retrieve",
        "/v1/events",
        "/v1/insights/{id}",
        "/v1/insights/{id}/lineage",
        "/healthz",
        "/metrics",
    } <= set(doc["paths"])
    assert "TaskEvent" in doc["components"]["schemas"]


def test_the_remote_sdk_has_the_same_calls_as_the_embedded_one(
    server: EvomemHTTPServer, settings: Settings
) -> None:
    seed(server, "alpha", ["Check the vehicle class first."])
    remote = Memory.open(settings.model_copy(update={"url": server.url, "token": _secret("tok-alpha")}))
    assert isinstance(remote, RemoteMemory)
    with remote:
        r = remote.retrieve("Verify claim 0 about alpha", "alpha")
        (served,) = r.insights
        assert "Check the vehicle class first." in r.render()
        remote.report(r, status="resolved", insight_feedback={served.id: "helpful"})
        Memory(server.service.runtime).consolidate()
        node = remote.insight(served.id)
        assert len(node.positive) == 2 and node.state == "active"
        with pytest.raises(InvalidEventError) as err:
            remote.report(r, status="exploded")
        assert err.value.field == "status"
        with pytest.raises(NotFoundError):
            remote.insight("no-such-insight")


def test_a_second_process_opening_the_store_is_told_to_use_the_service(
    server: EvomemHTTPServer, settings: Settings
) -> None:
    url_file = settings.data_dir / "run" / "service.url"
    url_file.parent.mkdir(parents=True, exist_ok=True)
    url_file.write_text(server.url)
    with pytest.raises(StoreLockedError) as err:
        Memory.open_local(settings)
    assert f"EVOMEM_URL={server.url}" in str(err.value)


def test_when_redis_is_down_retrieval_fails_open_from_qdrant_alone(tmp_path: Path) -> None:
    redis_server = EmbeddedRedis(tmp_path / "redis")
    url = redis_server.ensure()
    settings = Settings(data_dir=tmp_path / "data", redis_url=url, http_port=0)
    srv = build_server(settings)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        seed(srv, "default", ["Check the vehicle class first."])
        client = Client(srv, None)
        status, body = client.call("POST", "/v1/retrieve", {"query": "Verify claim 0 about default"})
        assert status == 200 and body["degraded"] is None and len(body["insights"]) == 1
        redis_server.stop()
        # Each retrieval serves the lesson; the service says it is degraded as soon as it learns
        # Redis is gone (a read it makes, or the retrieval record it could not write).
        answers = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (answers and answers[-1]["degraded"]):
            status, body = client.call("POST", "/v1/retrieve", {"query": "Verify claim 0 about default"})
            assert status == 200
            answers.append(body)
        assert body["degraded"] and "redis unreachable" in body["degraded"]
        for body in answers:
            assert [i["text"] for i in body["insights"]] == ["Check the vehicle class first."]
        status, health = client.call("GET", "/healthz")
        assert status == 503 and health["redis"] == "unreachable"
        status, _ = client.call(
            "POST", "/v1/events", {"namespace": "default", "query": "q", "status": "resolved"}
        )
        assert status == 503
    finally:
        close_clients()
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()
        redis_server.stop()


def test_staleness_is_reported_while_the_projector_is_behind(
    settings: Settings, redis_client: redis.Redis
) -> None:
    from evomem.service.auth import TokenAuth
    from evomem.service.retrieval_service import RetrievalService

    with Memory.open_local(settings) as mem, Memory.open_local(settings, index=False) as writer:
        service = RetrievalService(mem.runtime, TokenAuth(None))
        writer.report(None, namespace="alpha", query="q", status="resolved", proposed_insight="A lesson.")
        writer.consolidate()  # no index here: the change waits for mem's projector
        service._stale = (0.0, 0.0)
        import time

        time.sleep(0.01)  # the change must be measurably old; this is the quantity under test
        assert service.staleness() > 0
        assert mem.projector is not None and mem.projector.run_once().changes > 0
        service._stale = (0.0, 0.0)
        assert service.staleness() == 0
