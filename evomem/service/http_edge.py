"""The HTTP edge shared by ``evomem serve`` and ``evomem mcp --http``: uvicorn's httptools protocol
with the bounds it lacks, set once from the settings (``EdgeLimits``) and used by both servers.

uvicorn bounds none of this with httptools: llhttp buffers a header line of any length, takes any
number of header fields, arms its keep-alive timer only after a response (a client that never
finishes its head holds the connection for good), and ``limit_concurrency`` counts every open
connection, half-sent heads included, against one global cap that one client can fill. Here:

- a request head (request line and header fields) past ``max_head_bytes`` or ``max_headers``
  fields is answered 431 and the connection closed, counted on the raw bytes while it arrives, so a
  connection never holds more than that and one socket read;
- the head must arrive within ``head_timeout_s`` of its first byte (408), a body within
  ``body_timeout_s`` of its head (408), and a connection idle between requests is closed after
  ``idle_timeout_s``;
- connections are admitted at accept time against a global cap and a cap per client address; past
  either the client gets a plain 503 and the socket is closed at once, so a flood from one address
  costs its own connections, not everybody's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from evomem.logs import get_logger
from evomem.service.connections import COUNTS
from evomem.settings import Settings

log = get_logger("evomem.edge")

#: The listen backlog: the default of 5 made 64 agents connecting at once wait ~1 s for SYN retries
#: (bench/README.md); the kernel caps it at net.core.somaxconn.
BACKLOG = 128
#: Refusals are logged at most this often, with their counts: a flood must not become a log flood.
LOG_EVERY_S = 10.0

_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The bounds of one HTTP server's edge."""

    max_head_bytes: int
    max_headers: int
    head_timeout_s: float
    body_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    max_connections_per_client: int

    @classmethod
    def from_settings(cls, settings: Settings) -> EdgeLimits:
        return cls(
            max_head_bytes=settings.http_max_head_bytes,
            max_headers=settings.http_max_headers,
            head_timeout_s=settings.http_head_timeout_s,
            body_timeout_s=settings.http_body_timeout_s,
            idle_timeout_s=settings.http_idle_timeout_s,
            max_connections=settings.http_max_connections,
            max_connections_per_client=settings.http_max_connections_per_client,
        )


class Admission:
    """Open connections of one server, in all and per client address (one event loop: no lock)."""

    def __init__(self, limits: EdgeLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_client: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self._logged_at = 0.0

    def admit(self, client: str) -> str | None:
        """None when the connection may stay; else why it may not."""
        if self.total >= self.limits.max_connections:
            return self._refuse("max_connections")
        if self.per_client[client] >= self.limits.max_connections_per_client:
            return self._refuse("max_connections_per_client")
        self.total += 1
        self.per_client[client] += 1
        return None

    def release(self, client: str) -> None:
        self.total -= 1
        self.per_client[client] -= 1
        if self.per_client[client] <= 0:
            del self.per_client[client]

    def note(self, reason: str) -> None:
        """Count a refused request (431, 408) and log the counts now and then."""
        self._refuse(reason)

    def _refuse(self, reason: str) -> str:
        self.refused[reason] += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("edge.refused", open=self.total, **dict(self.refused))
        return reason


class _Reject(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol within ``limits``; ``protocol_for`` makes one per server."""

    limits: ClassVar[EdgeLimits]
    admission: ClassVar[Admission]

    _peer = ""
    _admitted = False
    _in_head = True
    _raw_head = 0  # bytes read while a head is incomplete: what the parser may be holding
    _head_len = 0  # the head's request line and fields, counted as the parser hands them over
    _fields = 0
    _timer: asyncio.TimerHandle | None = None

    # -- connections -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        COUNTS.opened()
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else ""
        refused = self.admission.admit(self._peer)
        if refused is not None:
            self._answer(503, f"too many connections ({refused.replace('_', ' ')})")
            return
        self._admitted = True
        # a fresh connection owes its first head within the head deadline, not the idle timeout
        self._arm(self.limits.head_timeout_s, self._head_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._admitted:
            self._admitted = False
            self.admission.release(self._peer)
        super().connection_lost(exc)
        COUNTS.closed()

    # -- reading -----------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if not self._admitted or self.transport.is_closing():
            return
        if self._in_head:
            if self._raw_head == 0 and self._timer is None:
                self._arm(self.limits.head_timeout_s, self._head_late)  # a new head began: it must end
            self._raw_head += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Reject):
                self._reject(exc.__context__)
            else:
                self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            self._bad_request()  # no upgrade (WebSocket or other) is served here
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        if self._in_head and self._raw_head > self.limits.max_head_bytes:
            self._reject(_Reject(431, f"the request head is larger than {self.limits.max_head_bytes} bytes"))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_len = 0
        self._fields = 0

    def on_url(self, url: bytes) -> None:
        self._head_len += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        self._head_len += len(name) + len(value) + 4
        if self._fields > self.limits.max_headers:
            raise _Reject(431, f"more than {self.limits.max_headers} header fields")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._head_len > self.limits.max_head_bytes:
            raise _Reject(431, f"the request head is larger than {self.limits.max_head_bytes} bytes")
        self._in_head = False
        self._raw_head = 0
        self._disarm()
        super().on_headers_complete()
        if not self.transport.is_closing():
            self._arm(self.limits.body_timeout_s, self._body_late)  # cancelled once the body is in

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_head = True
        self._raw_head = 0
        super().on_message_complete()

    # -- deadlines ---------------------------------------------------------------------------------
    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_late(self) -> None:
        self._timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._raw_head:
            self.admission.note("head_timeout")
            self._answer(408, "the request head did not arrive in time")
        else:
            self.transport.close()  # connected and said nothing

    def _body_late(self) -> None:
        self._timer = None
        if self._in_head or self.transport.is_closing():
            return
        self.admission.note("body_timeout")
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            self._answer(408, "the request body did not arrive in time")
        else:
            self.transport.close()

    # -- answers -----------------------------------------------------------------------------------
    def _reject(self, reject: _Reject) -> None:
        self.admission.note(f"status_{reject.status}")
        self._answer(reject.status, reject.message)

    def _bad_request(self) -> None:
        self.admission.note("status_400")
        self._answer(400, "invalid HTTP request")

    def _answer(self, status: int, message: str) -> None:
        """A plain answer written straight to the socket, which is then closed (no app is involved)."""
        self._disarm()
        body = message.encode("ascii", "replace")
        reason = _REASONS.get(status, "Bad Request")
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n"
        )
        if status == 503:
            head += "retry-after: 1\r\n"
        self.transport.write(head.encode("ascii") + b"\r\n" + body)
        self.transport.close()


def protocol_for(limits: EdgeLimits) -> type[EdgeProtocol]:
    """A protocol class with its own admission counts: one per server."""
    return type("BoundEdgeProtocol", (EdgeProtocol,), {"limits": limits, "admission": Admission(limits)})


def uvicorn_config(app: Any, limits: EdgeLimits, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration both servers run under: the edge protocol, no WebSocket, no
    access log, no server header; ``options`` adds the rest (lifespan, graceful shutdown)."""
    config = uvicorn.Config(
        app,
        http=protocol_for(limits),
        ws="none",
        loop="asyncio",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        backlog=BACKLOG,
        timeout_keep_alive=max(1, round(limits.idle_timeout_s)),
        limit_concurrency=None,  # admission does it, per client as well as in all
        # should the h11 protocol ever be chosen, its own head bound is the same
        h11_max_incomplete_event_size=limits.max_head_bytes,
        **options,
    )
    config.timeout_keep_alive = limits.idle_timeout_s  # type: ignore[assignment]  # a float works
    return config


__all__ = ["BACKLOG", "Admission", "EdgeLimits", "EdgeProtocol", "protocol_for", "uvicorn_config"]
