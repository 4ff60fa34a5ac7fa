"""The HTTP service as a protocol peer: body limits and pacing, chunked and GET bodies, methods,
the bearer scheme, browsers in open mode, idle connections, errors and their logging, metrics
counted before the answer, quotas. Raw sockets where the bytes on the wire are the point."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from pydantic import SecretStr

from evomem import Memory, Settings
from evomem.sdk import RemoteMemory
from evomem.service.server import EvomemHTTPServer, build_server
from tests.support.pipeline_helpers import wait_for

TOKENS = "tok-alpha=alpha;tok-beta=beta"
_wires: list[Wire] = []


@pytest.fixture(autouse=True)
def _close_wires() -> Iterator[None]:
    yield
    while _wires:
        _wires.pop().close()


@pytest.fixture
def make_server(settings: Settings, redis_client: redis.Redis) -> Iterator[Any]:
    started: list[EvomemHTTPServer] = []

    def make(**overrides: Any) -> EvomemHTTPServer:
        srv = build_server(settings.model_copy(update={"http_port": 0, **overrides}))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()


@pytest.fixture
def server(make_server: Any) -> EvomemHTTPServer:
    srv: EvomemHTTPServer = make_server(tokens=SecretStr(TOKENS))
    return srv


class Wire:
    """One raw TCP connection: bytes out, parsed responses in."""

    def __init__(self, server: EvomemHTTPServer, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(server.server_address, timeout=timeout)
        self.buf = b""
        _wires.append(self)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self, head: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before a response; got {self.buf!r}")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = 0 if head else int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def closed_by_peer(self) -> bool:
        """True once the server has closed the connection (waits up to the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self) -> None:
        self.sock.close()


def request(
    method: str, path: str, body: bytes = b"", token: str | None = "tok-alpha", extra: str = ""
) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    return f"{head}{auth}{length}{extra}\r\n".encode() + body


RETRIEVE = json.dumps({"query": "Verify claim 0", "namespace": "alpha"}).encode()


def test_a_body_is_never_read_past_the_limit_nor_before_the_token(make_server: Any) -> None:
    server = make_server(tokens=SecretStr(TOKENS), http_max_body_bytes=4096)
    huge = "Content-Length: 300000000\r\n"
    head = (
        "POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
        + huge
        + "\r\n"
    )
    # a token: 413 at once, from the announced length, and the connection is closed
    wire = Wire(server)
    wire.send(head.format(auth="Authorization: Bearer tok-alpha\r\n").encode() + b"{" * 1000)
    status, headers, body = wire.response()
    assert status == 413 and json.loads(body)["field"] == "body" and headers["connection"] == "close"
    assert wire.closed_by_peer()
    # no token: 401 before a byte of the body is read
    wire = Wire(server)
    wire.send(head.format(auth="").encode())
    status, headers, _ = wire.response()
    assert status == 401 and headers["connection"] == "close"
    # Content-Length: -1 is a malformed request, not "read to EOF"
    wire = Wire(server)
    wire.send(request("POST", "/v1/retrieve", extra="Content-Length: -1\r\n"))
    assert wire.response()[0] == 400
    # a chunked body past the limit is cut off as soon as it passes it
    wire = Wire(server)
    chunk = b"x" * 3000
    wire.send(
        request("POST", "/v1/retrieve", extra="Transfer-Encoding: chunked\r\n").replace(
            b"Content-Length: 0\r\n", b""
        )
        + (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 2
    )
    assert wire.response()[0] == 413


def test_chunked_bodies_are_read_and_get_bodies_do_not_become_requests(server: EvomemHTTPServer) -> None:
    wire = Wire(server)
    half = len(RETRIEVE) // 2
    chunked = request("POST", "/v1/retrieve", extra="Transfer-Encoding: chunked\r\n").replace(
        b"Content-Length: 0\r\n", b""
    )
    for part in (RETRIEVE[:half], RETRIEVE[half:]):
        chunked += b"%x\r\n" % len(part) + part + b"\r\n"
    wire.send(chunked + b"0\r\n\r\n")
    status, _, body = wire.response()
    assert status == 200 and json.loads(body)["namespace"] == "alpha"
    # a GET with a body that looks like a request: one answer for the GET, then the next request's
    smuggled = b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    wire.send(request("GET", "/healthz", body=smuggled) + request("GET", "/healthz"))
    assert [wire.response()[0] for _ in range(2)] == [200, 200]
    assert Memory(server.service.runtime).stream.info()["length"] == 0


def test_undeclared_methods_get_405_with_allow_and_head_is_answered_on_get_routes(
    server: EvomemHTTPServer,
) -> None:
    wire = Wire(server)
    for method, path, allow in (
        ("TRACE", "/v1/retrieve", "POST"),
        ("HEAD", "/v1/retrieve", "POST"),
        ("PUT", "/healthz", "GET"),
        ("DELETE", "/v1/insights/x", "GET"),
    ):
        wire = Wire(server)
        wire.send(request(method, path))
        status, headers, body = wire.response(head=method == "HEAD")
        assert status == 405, (method, path)
        assert allow in headers["allow"]
        if method != "HEAD":
            assert json.loads(body)["error"]
    wire = Wire(server)
    wire.send(request("HEAD", "/healthz"))
    status, headers, body = wire.response(head=True)
    assert status == 200 and body == b""


def test_the_bearer_scheme_is_case_insensitive(server: EvomemHTTPServer) -> None:
    wire = Wire(server)
    for scheme in ("bearer", "BEARER", "Bearer"):
        wire.send(
            request(
                "POST", "/v1/retrieve", RETRIEVE, token=None, extra=f"Authorization: {scheme} tok-alpha\r\n"
            )
        )
        assert wire.response()[0] == 200, scheme


def test_a_body_less_post_is_refused_naming_the_body_and_the_openapi_says_bodies_are_required(
    server: EvomemHTTPServer,
) -> None:
    wire = Wire(server)
    wire.send(request("POST", "/v1/retrieve"))
    status, _, body = wire.response()
    assert status == 422 and json.loads(body)["field"] == "body"
    wire.send(request("POST", "/v1/events"))
    status, _, body = wire.response()
    assert status == 422 and json.loads(body)["field"] == "event"
    wire.send(request("GET", "/openapi.json"))
    doc = json.loads(wire.response()[2])
    for path in ("/v1/retrieve", "/v1/events"):
        assert doc["paths"][path]["post"]["requestBody"]["required"] is True
        assert {"413", "415", "422", "429"} <= doc["paths"][path]["post"]["responses"].keys()


def test_open_mode_refuses_other_origins_other_hosts_and_non_json_bodies(make_server: Any) -> None:
    server = make_server()  # no tokens: open, on loopback
    event = json.dumps(
        {"namespace": "default", "query": "q", "status": "resolved", "proposed_insight": "Evil."}
    )
    for extra, field in (
        ("Origin: http://evil.example\r\n", "Origin"),  # a page of another site posting a "simple" request
        ("Origin: null\r\n", "Origin"),
    ):
        wire = Wire(server)
        wire.send(
            request("POST", "/v1/events", event.encode(), token=None, extra=extra).replace(
                b"application/json", b"text/plain"
            )
        )
        status, _, body = wire.response()
        assert status == 403 and json.loads(body)["field"] == field
    # DNS rebinding: the browser sends the attacker's host name
    wire = Wire(server)
    wire.send(
        request("GET", "/v1/insights/x", token=None).replace(b"Host: 127.0.0.1", b"Host: evil.example:8765")
    )
    status, _, body = wire.response()
    assert status == 403 and json.loads(body)["field"] == "Host"
    wire = Wire(server)
    wire.send(
        request("POST", "/v1/events", event.encode(), token=None).replace(b"application/json", b"text/plain")
    )
    status, _, body = wire.response()
    assert status == 415 and json.loads(body)["field"] == "Content-Type"
    assert Memory(server.service.runtime).stream.info()["length"] == 0
    # a loopback origin and host are the developer's own tools
    wire = Wire(server)
    wire.send(
        request("POST", "/v1/events", event.encode(), token=None, extra="Origin: http://localhost:3000\r\n")
    )
    assert wire.response()[0] == 202


def test_idle_and_stalled_connections_are_closed_and_hold_no_thread(make_server: Any) -> None:
    server = make_server(
        tokens=SecretStr(TOKENS), http_idle_timeout_s=0.5, http_head_timeout_s=0.5, http_body_timeout_s=0.5
    )
    threads_before = threading.active_count()
    idle = [Wire(server) for _ in range(60)]
    half_head = Wire(server)
    half_head.send(b"POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    stalled_body = Wire(server)
    stalled_body.send(
        request("POST", "/v1/retrieve", extra="Content-Length: 100\r\n").replace(
            b"Content-Length: 0\r\n", b""
        )
        + b"{"
    )
    assert threading.active_count() <= threads_before + 2  # an event loop, not a thread per connection
    assert all(w.closed_by_peer() for w in idle)
    assert half_head.response()[0] == 408  # the edge answers a late head, then closes
    status, headers, _ = stalled_body.response()
    assert status == 408 and headers["connection"] == "close"
    # a kept-alive connection between requests is closed after the same silence
    wire = Wire(server)
    wire.send(request("POST", "/v1/retrieve", RETRIEVE))
    assert wire.response()[0] == 200
    assert wire.closed_by_peer()


def test_a_request_is_in_the_metrics_as_soon_as_its_answer_is(server: EvomemHTTPServer) -> None:
    wire, scraper = Wire(server), Wire(server)
    for n in range(1, 31):
        wire.send(request("POST", "/v1/retrieve", RETRIEVE))
        assert wire.response()[0] == 200
        scraper.send(request("GET", "/metrics", token=None))
        text = scraper.response()[2].decode()
        assert f'evomem_requests_total{{route="retrieve",outcome="ok"}} {n}.0' in text


def test_unexpected_errors_are_500_with_a_generic_body_and_a_logged_traceback(
    server: EvomemHTTPServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(ids: Any) -> Any:
        raise RuntimeError("a bug deep in the store adapter, token=tok-alpha")

    monkeypatch.setattr(Memory(server.service.runtime).graph, "namespace_of", broken)
    wire = Wire(server)
    with caplog.at_level(logging.ERROR, logger="evomem.service"):
        wire.send(request("GET", "/v1/insights/some-id"))
        status, _, body = wire.response()
    assert status == 500 and json.loads(body) == {"error": "internal error", "field": None}
    (failed,) = [r for r in caplog.records if "request.failed" in r.getMessage()]
    assert failed.exc_info is not None and "RuntimeError" in logging.Formatter().formatException(
        failed.exc_info
    )


def test_the_rendered_log_line_of_a_500_carries_its_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    from evomem.logs import configure_logging, get_logger

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("INFO", json=True)
        try:
            raise RuntimeError("boom")
        except RuntimeError as exc:
            get_logger("evomem.service").error("request.failed", route="x", exc_info=exc)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    line = capfd.readouterr().err.strip().splitlines()[-1]
    assert "Traceback" in json.loads(line)["exception"] and "RuntimeError: boom" in line


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_canonical_line_of_a_retrieval_carries_its_ids_and_no_other_requests(
    server: EvomemHTTPServer,
) -> None:
    logger = logging.getLogger("evomem.service")
    lines, level = _Lines(), logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        wire = Wire(server)
        answers = []
        for token, ns in (("tok-alpha", "alpha"), ("tok-beta", "beta")):
            body = json.dumps({"query": "Verify claim 0", "namespace": ns}).encode()
            wire.send(request("POST", "/v1/retrieve", body, token=token))
            status, _, data = wire.response()
            assert status == 200
            answers.append(json.loads(data)["retrieval_id"])
        wire.send(request("GET", "/healthz", token=None))
        assert wire.response()[0] in (200, 503)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    served = [r.__dict__ for r in lines.records if r.getMessage() == "request.served"]
    first, second, health = served[-3:]
    assert (first["route"], first["principal"], first["namespace"]) == ("retrieve", "token-1", "alpha")
    assert (second["principal"], second["namespace"]) == ("token-2", "beta")
    assert [first["retrieval_id"], second["retrieval_id"]] == answers
    # the next request on the same connection carries none of the ids the retrievals bound
    assert health["route"] == "healthz" and "retrieval_id" not in health and "namespace" not in health
    assert first["total_ms"] >= first["retrieve_ms"] > 0


def test_ids_bound_in_a_block_leave_with_it() -> None:
    from evomem.logs import bind, bound, merge_ids

    with bound(batch_id="b1", consumer=None):
        bind(event_id="e1")
        with bound(event_id="e2"):
            assert merge_ids(None, "info", {}) == {"batch_id": "b1", "event_id": "e2"}
        assert merge_ids(None, "info", {"event_id": "own"}) == {"batch_id": "b1", "event_id": "own"}
    assert merge_ids(None, "info", {}) == {}


def test_an_insight_key_of_another_kind_is_404_not_500(server: EvomemHTTPServer) -> None:
    mem = Memory(server.service.runtime)
    mem.report(None, namespace="alpha", query="q", status="resolved", proposed_insight="A lesson.")
    mem.consolidate()
    (insight_id,) = mem.graph.insight_ids("alpha")
    wire = Wire(server)
    for suffix in (":pos", ":neg", ":edges", ":hist"):
        wire.send(request("GET", f"/v1/insights/{insight_id}{suffix}"))
        assert wire.response()[0] == 404, suffix


def test_a_namespace_past_its_quota_gets_429_with_retry_after_and_the_sdk_a_quota_error(
    make_server: Any,
) -> None:
    limit = 3
    server = make_server(tokens=SecretStr(TOKENS), quota_events_per_minute=limit)
    event = {"namespace": "alpha", "query": "q", "status": "resolved"}
    wire = Wire(server)
    statuses = []
    # a minute's window may turn during the loop: within 2 * limit + 1 events one must be refused
    for _ in range(2 * limit + 1):
        wire.send(request("POST", "/v1/events", json.dumps(event).encode()))
        status, headers, body = wire.response()
        statuses.append(status)
        if status == 429:
            assert 1 <= int(headers["retry-after"]) <= 60 and "quota" in json.loads(body)["error"]
            break
    assert statuses[-1] == 429 and statuses.count(202) <= 2 * limit
    from evomem.errors import QuotaExceededError

    with RemoteMemory(server.url, "tok-alpha") as remote, pytest.raises(QuotaExceededError) as err:
        for _ in range(2 * limit + 1):
            remote.report(None, namespace="alpha", query="q", status="resolved")
    assert err.value.retry_after_s >= 1
    wire.send(
        request("POST", "/v1/events", json.dumps({**event, "namespace": "beta"}).encode(), token="tok-beta")
    )
    assert wire.response()[0] == 202  # another namespace's quota is its own


def test_answers_are_not_held_back_by_nagles_algorithm(server: EvomemHTTPServer) -> None:
    """Headers and body leave in two writes: without TCP_NODELAY the body waits for the client's
    delayed ACK (~40 ms). Accepted connections inherit the listener's option."""
    assert server.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    assert server.socket.proto == socket.IPPROTO_TCP  # what asyncio checks before setting it itself


def test_staleness_is_not_zero_while_redis_is_unreachable(tmp_path: Any) -> None:
    from evomem.adapters.redis.connection import EmbeddedRedis

    own = EmbeddedRedis(tmp_path / "redis")
    settings = Settings(data_dir=tmp_path / "data", redis_url=own.ensure(), http_port=0)
    srv = build_server(settings)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        wire = Wire(srv)
        wire.send(request("POST", "/v1/retrieve", RETRIEVE.replace(b"alpha", b"default"), token=None))
        status, _, body = wire.response()
        assert status == 200 and json.loads(body)["stale"]["projector_lag_s"] == 0
        own.stop()

        def stale_s() -> float:
            wire.send(request("POST", "/v1/retrieve", RETRIEVE.replace(b"alpha", b"default"), token=None))
            status, _, body = wire.response()
            assert status == 200  # retrieval fails open
            return float(json.loads(body)["stale"]["projector_lag_s"])

        # once past the staleness cache (0.1 s), an unknown lag must not read as "in step"
        wait_for(lambda: stale_s() > 0, 10, "staleness to stop reading 0 with Redis away")
        wire.send(request("GET", "/v1/insights/some-id", token=None))
        assert wire.response()[0] == 503  # a store briefly away, not a server error
    finally:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()
        own.stop()


def test_retrieval_and_event_byte_quotas_refuse_with_a_quota_error(
    settings: Settings, redis_client: Any
) -> None:
    from evomem import Memory, QuotaExceededError

    limited = settings.model_copy(
        update={"quota_retrievals_per_minute": 3, "quota_event_bytes_per_minute": 2000}
    )
    with Memory.open_local(limited) as mem:
        with pytest.raises(QuotaExceededError) as err:
            for _ in range(7):  # within two one-minute windows at most
                mem.retrieve("q", "alpha")
        assert "retrievals" in str(err.value)
        with pytest.raises(QuotaExceededError) as err:
            mem.report(None, namespace="alpha", query="q" * 3000, status="failed")
        assert "bytes" in str(err.value) and err.value.retry_after_s >= 1
        mem.report(None, namespace="beta", query="q", status="failed")  # its own budget


def test_retrieval_records_past_their_byte_quota_get_429_with_retry_after(make_server: Any) -> None:
    """A namespace's retrieval records (kept a day each in a Redis that never evicts) have a bytes
    quota of their own: long queries are refused with 429 and Retry-After long before the count of
    retrievals would be, and the retrieval id of each one served can still be reported on."""
    limit = 20_000  # two records of 8,000-character queries, and a bit
    server = make_server(tokens=SecretStr(TOKENS), quota_retrieval_bytes_per_minute=limit)
    long = json.dumps({"query": "v" * 8000, "namespace": "alpha"}).encode()
    wire = Wire(server)
    served, refused = [], None
    for _ in range(7):  # within two one-minute windows at most
        wire.send(request("POST", "/v1/retrieve", long))
        status, headers, body = wire.response()
        if status == 429:
            refused = headers, json.loads(body)
            break
        assert status == 200
        served.append(json.loads(body)["retrieval_id"])
    assert refused is not None and len(served) <= 6
    headers, doc = refused
    assert 1 <= int(headers["retry-after"]) <= 60
    assert "bytes of retrieval records" in doc["error"] and "QUOTA_RETRIEVAL_BYTES" in doc["error"]
    graph, retriever = server.service.runtime.graph, server.service.runtime.retriever
    assert retriever is not None
    retriever.flush()  # records are written beside the answer
    assert set(graph.load_retrievals([("alpha", r) for r in served])) == {("alpha", r) for r in served}
    beta = json.dumps({"query": "v" * 8000, "namespace": "beta"}).encode()
    wire.send(request("POST", "/v1/retrieve", beta, token="tok-beta"))
    assert wire.response()[0] == 200  # another namespace's quota is its own


def test_the_sdk_raises_a_quota_error_past_the_bytes_of_retrieval_records(settings: Settings) -> None:
    from evomem import QuotaExceededError

    limited = settings.model_copy(update={"quota_retrieval_bytes_per_minute": 20_000})
    with Memory.open_local(limited) as mem:
        for _ in range(40):  # short queries: 40 records of under 400 bytes pass
            mem.retrieve("q", "alpha")
        with pytest.raises(QuotaExceededError) as err:
            for _ in range(7):  # within two one-minute windows at most
                mem.retrieve("v" * 8000, "alpha")
        assert "bytes of retrieval records" in str(err.value) and err.value.retry_after_s >= 1
        mem.retrieve("v" * 8000, "beta")  # its own budget


@pytest.mark.parametrize(("query", "k", "served"), [("Verify claim 0", 5, 3), ("\u00e9" * 8000, 1000, 100)])
def test_the_quota_counts_about_the_bytes_a_retrieval_record_takes(
    redis_client: Any, query: str, k: int, served: int
) -> None:
    """What the quota charges for a record is within a tenth of what Redis stores, small or largest."""
    import uuid

    from evomem import keys
    from evomem.adapters.redis.graph import RedisGraphStore
    from evomem.adapters.redis.quotas import retrieval_record_bytes
    from evomem.core.ports import RetrievalRecord

    similar = tuple(str(uuid.uuid4()) for _ in range(k))
    insights = tuple(str(uuid.uuid4()) for _ in range(served))
    record = RetrievalRecord(
        str(uuid.uuid4()),
        "alpha",
        query,
        similar,
        insights,
        tuple(0.812345678901234 for _ in similar),
        tuple(0.712345678901234 for _ in insights),
        tuple((1.2345678901234, 12, 3) for _ in insights),
        "2026-12-07T11:40:00.123456+00:00",
    )
    RedisGraphStore(redis_client).save_retrieval(record, 60)
    stored = redis_client.strlen(keys.retrieval("alpha", record.id))
    assert abs(retrieval_record_bytes(query, similar, insights) - stored) <= stored / 10


def test_a_boolean_is_not_a_number_of_insights(server: EvomemHTTPServer) -> None:
    """``"budget": true`` is refused naming the field, as the OpenAPI document's integer says."""
    for field in ("budget", "top_k"):
        wire = Wire(server)
        wire.send(
            request(
                "POST", "/v1/retrieve", json.dumps({"query": "q", "namespace": "alpha", field: True}).encode()
            )
        )
        status, _, body = wire.response()
        assert status == 422 and json.loads(body)["field"] == field
