"""The HTTP edge shared by ``evomem serve`` and ``evomem mcp --http``, probed with raw sockets:
head size and field count (431), head and body deadlines (408), connection caps in all and per
client address (503 at accept), MCP sessions per token (429), and an MCP server in front of a
service that requires tokens forwarding each caller's own."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from pydantic import SecretStr

from evomem import Settings
from evomem.mcp.mcp_server import MCPHTTPServer
from evomem.service.server import build_server

TOKENS = "tok-alpha=alpha;tok-beta=beta;tok-admin=*"
RETRIEVE = json.dumps({"query": "Verify: Mohra is a car", "namespace": "alpha"}).encode()
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Edge:
    """A running server of either kind: its address and the path a request goes to."""

    def __init__(self, address: tuple[str, int], path: str, stop: Any) -> None:
        self.address, self.path, self.stop = address, path, stop

    def connect(self, source: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=timeout, source_address=(source, 0))
        _socks.append(sock)
        return sock

    @property
    def url(self) -> str:
        return f"http://{self.address[0]}:{self.address[1]}{self.path}"


_socks: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while _socks:
        _socks.pop().close()


def _start_serve(settings: Settings, **overrides: Any) -> Edge:
    srv = build_server(settings.model_copy(update={"http_port": 0, "tokens": SecretStr(TOKENS), **overrides}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    def stop() -> None:
        srv.shutdown()
        srv.server_close()
        srv.service.runtime.close()

    return Edge(srv.server_address, "/v1/retrieve", stop)


def _start_mcp(settings: Settings, **overrides: Any) -> Edge:
    srv = MCPHTTPServer(settings.model_copy(update={"tokens": SecretStr(TOKENS), **overrides}), 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    host, port = srv.socket.getsockname()[:2]

    def stop() -> None:
        srv.shutdown()
        thread.join(timeout=15)
        srv.close()

    return Edge((host, port), "/mcp", stop)


@pytest.fixture(params=["serve", "mcp"])
def make_edge(request: pytest.FixtureRequest, settings: Settings, redis_client: redis.Redis) -> Iterator[Any]:
    started: list[Edge] = []

    def make(**overrides: Any) -> Edge:
        edge = (_start_serve if request.param == "serve" else _start_mcp)(settings, **overrides)
        started.append(edge)
        return edge

    yield make
    for edge in started:
        edge.stop()


def _head(edge: Edge, extra: bytes = b"", length: int | None = None) -> bytes:
    return (
        f"POST {edge.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-alpha\r\n".encode()
        + b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        + (f"Content-Length: {length}\r\n".encode() if length is not None else b"")
        + extra
    )


def _status(sock: socket.socket) -> int:
    """The status of the answer on ``sock`` (the server may close right after it)."""
    data = b""
    while b"\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split()[1])


def _answer_or_close(sock: socket.socket) -> int:
    """The status the server answers on ``sock`` before it closes it; 0 if it closes it silently."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0


def _closed(sock: socket.socket) -> bool:
    try:
        while chunk := sock.recv(65536):
            del chunk
    except ConnectionResetError:
        return True
    return True


def _send_all(sock: socket.socket, data: bytes) -> bool:
    """Send until done or the server has closed; False when it closed first."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def test_a_head_past_the_bound_is_431_and_read_no_further(make_edge: Any) -> None:
    edge = make_edge()
    # one 70 kB header field, sent whole
    sock = edge.connect()
    _send_all(sock, _head(edge, b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n", 0))
    assert _status(sock) == 431
    # a header line that never ends: the server answers and closes long before 8 MB went out
    sock = edge.connect()
    sent = 0
    piece = b"b" * 65536
    _send_all(sock, _head(edge, b"X-Endless: "))
    while sent < 8 << 20 and _send_all(sock, piece):
        sent += len(piece)
    assert sent < 8 << 20
    assert _status(sock) == 431
    # 2,000 small fields
    sock = edge.connect()
    _send_all(sock, _head(edge, b"".join(b"X-%d: 1\r\n" % i for i in range(2000)) + b"\r\n", 0))
    assert _status(sock) == 431
    # a head within the bounds is served as before
    with httpx.Client(timeout=10) as http:
        body = RETRIEVE if edge.path != "/mcp" else json.dumps(INIT).encode()
        response = http.post(
            edge.url,
            content=body,
            headers={**MCP_HEADERS, "Authorization": "Bearer tok-alpha", "X-Fine": "c" * 8000},
        )
    assert response.status_code == 200, response.text


def test_heads_and_bodies_owe_their_bytes_within_deadlines(make_edge: Any) -> None:
    edge = make_edge(http_head_timeout_s=0.5, http_body_timeout_s=0.8, http_idle_timeout_s=30.0)
    silent = edge.connect()
    half_head = edge.connect()
    _send_all(half_head, _head(edge))
    trickle = edge.connect()
    _send_all(trickle, _head(edge, b"\r\n", 4000))
    started = time.monotonic()
    # a token holder trickling its body a byte at a time, each byte well inside the idle timeout
    while time.monotonic() - started < 20 and _send_all(trickle, b" "):
        time.sleep(0.05)
    assert time.monotonic() - started < 20, "the trickled body was never cut off"
    assert _status(trickle) == 408
    assert _status(half_head) == 408
    assert _closed(silent)


def test_one_client_address_cannot_take_the_others_connections(make_edge: Any) -> None:
    edge = make_edge(http_max_connections=40, http_max_connections_per_client=10)
    hog = [edge.connect(source="127.0.0.2") for _ in range(10)]
    for sock in hog:
        _send_all(sock, _head(edge))  # half-sent heads, held open
    refused = edge.connect(source="127.0.0.2")
    assert _status(refused) == 503
    with httpx.Client(timeout=10) as http:  # another client is served meanwhile
        body = RETRIEVE if edge.path != "/mcp" else json.dumps(INIT).encode()
        response = http.post(
            edge.url, content=body, headers={**MCP_HEADERS, "Authorization": "Bearer tok-alpha"}
        )
    assert response.status_code == 200, response.text
    # the global cap holds across addresses, and a freed slot is usable again
    many = [edge.connect(source=f"127.0.1.{i}") for i in range(1, 31)]
    assert all(_send_all(s, _head(edge)) for s in many)
    assert _status(edge.connect(source="127.0.2.1")) == 503
    for sock in many[:5]:
        sock.close()
    with httpx.Client(timeout=10) as http:
        for _ in range(50):
            try:
                response = http.post(
                    edge.url, content=body, headers={**MCP_HEADERS, "Authorization": "Bearer tok-alpha"}
                )
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                break
            time.sleep(0.05)
    assert response.status_code == 200


def test_one_token_holds_a_bounded_number_of_mcp_sessions(
    settings: Settings, redis_client: redis.Redis
) -> None:
    edge = _start_mcp(settings, mcp_sessions_per_token=3)
    try:
        with httpx.Client(timeout=10) as http:

            def open_session(token: str) -> httpx.Response:
                return http.post(
                    edge.url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
                )

            sessions = [open_session("tok-alpha") for _ in range(3)]
            assert all(r.status_code == 200 for r in sessions)
            over = open_session("tok-alpha")
            assert over.status_code == 429 and "sessions" in over.json()["error"]
            assert open_session("tok-beta").status_code == 200  # another tenant is not locked out
            # a closed session frees its place
            closed = http.delete(
                edge.url,
                headers={
                    **MCP_HEADERS,
                    "Authorization": "Bearer tok-alpha",
                    "Mcp-Session-Id": sessions[0].headers["mcp-session-id"],
                    "Mcp-Protocol-Version": "2025-06-18",
                },
            )
            assert closed.status_code < 300, closed.text
            assert open_session("tok-alpha").status_code == 200
    finally:
        edge.stop()


def test_mcp_in_front_of_a_token_service_forwards_each_callers_token(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """No tokens of its own: the MCP server never lends its EVOMEM_TOKEN (admin here) to a caller."""
    service = _start_serve(settings)
    url = f"http://{service.address[0]}:{service.address[1]}"
    mcp = MCPHTTPServer(
        settings.model_copy(update={"url": url, "token": SecretStr("tok-admin"), "tokens": None}), 0
    )
    thread = threading.Thread(target=mcp.serve_forever, daemon=True)
    thread.start()

    def call(token: str | None, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        with httpx.Client(timeout=20) as http:
            opened = http.post(mcp.url, json=INIT, headers={**MCP_HEADERS, **auth})
            assert opened.status_code == 200, opened.text
            session = {
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "Mcp-Protocol-Version": "2025-06-18",
            }
            http.post(
                mcp.url,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers={**MCP_HEADERS, **auth, **session},
            )
            answer = http.post(
                mcp.url,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                },
                headers={**MCP_HEADERS, **auth, **session},
            )
        text = answer.text
        data = (
            next(line[5:] for line in text.splitlines() if line.startswith("data:"))
            if "data:" in text
            else text
        )
        result: dict[str, Any] = json.loads(data)["result"]
        return result

    try:
        anonymous = call(None, "retrieve_insights", {"query": "anything", "namespace": "beta"})
        assert anonymous["isError"] and "401" in anonymous["content"][0]["text"]
        foreign = call("tok-alpha", "retrieve_insights", {"query": "anything", "namespace": "beta"})
        assert foreign["isError"]
        own = call("tok-alpha", "retrieve_insights", {"query": "anything", "namespace": "alpha"})
        assert not own["isError"] and own["structuredContent"]["namespace"] == "alpha"
    finally:
        mcp.shutdown()
        thread.join(timeout=15)
        mcp.close()
        service.stop()


def test_a_crowd_of_refused_and_idle_connections_writes_a_few_log_lines_not_one_each(
    make_edge: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """1,100 idle sockets once wrote 44 MB of log in 10 s: refusals are counted and logged at most
    every 10 s, and idle or half-sent connections closed by a deadline log nothing each."""
    import logging

    edge = make_edge(
        http_max_connections=30,
        http_max_connections_per_client=10,
        http_head_timeout_s=0.5,
        http_idle_timeout_s=1.0,
    )
    with caplog.at_level(logging.DEBUG):
        crowd = []
        for _ in range(200):
            try:
                crowd.append(edge.connect(source="127.0.0.3"))
            except OSError:
                continue
        for sock in crowd[:5]:
            _send_all(sock, _head(edge))  # half-sent heads, timed out by the head deadline
        answers = [_answer_or_close(s) for s in crowd]  # each refused, or closed by a deadline
        # past the cap: 503 at accept; under it (a slot freed by a deadline admits one waiting in
        # the backlog): closed silently once idle, or 408 for a half-sent head
        assert answers.count(503) >= 100 and set(answers) <= {0, 408, 503}, answers
        with httpx.Client(timeout=10) as http:  # another client is served meanwhile
            body = RETRIEVE if edge.path != "/mcp" else json.dumps(INIT).encode()
            response = http.post(
                edge.url, content=body, headers={**MCP_HEADERS, "Authorization": "Bearer tok-alpha"}
            )
        assert response.status_code == 200, response.text
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    refused = [r for r in lines if "edge.refused" in r.getMessage()]
    assert refused, [r.getMessage() for r in lines]
    assert len(lines) <= 10, [r.getMessage()[:200] for r in lines]
