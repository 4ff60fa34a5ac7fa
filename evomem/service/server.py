"""The HTTP server: the Starlette app of ``routes`` under uvicorn (the ``edge`` protocol), on a socket bound
before anything else is opened, so that a port in use fails fast and leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from evomem.errors import ConfigError
from evomem.logs import get_logger
from evomem.runfiles import service_url_file
from evomem.runtime import Runtime, open_runtime
from evomem.service.auth import TokenAuth
from evomem.service.connections import COUNTS
from evomem.service.http_edge import BACKLOG, EdgeLimits, uvicorn_config
from evomem.service.retrieval_service import RetrievalService
from evomem.service.routes import Api, create_app
from evomem.settings import Settings

log = get_logger("evomem.service")

SHUTDOWN_GRACE_S = 10


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: ``serve`` installs handlers that let the
    memory close cleanly (uvicorn re-raises the signal it caught after shutting down)."""

    channel: socket.socket | None = None  # under a supervisor: the connections come over it

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.channel is None:
            await super().startup(sockets)
            return
        await super().startup([])  # no listener of its own: the supervisor accepts
        self._receive(self.channel)

    def _receive(self, channel: socket.socket) -> None:
        """Serve each connection the supervisor hands over the channel (SCM_RIGHTS): the same
        protocol as one accepted here."""
        loop = asyncio.get_running_loop()
        config = self.config

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        pending: set[asyncio.Task[Any]] = set()

        def readable() -> None:
            try:
                msg, fds, _, _ = socket.recv_fds(channel, 16, 16)
            except (BlockingIOError, InterruptedError):
                return
            if not msg and not fds:  # the supervisor is gone
                loop.remove_reader(channel.fileno())
                self.should_exit = True
                return
            COUNTS.taken(len(fds))
            for fd in fds:
                conn = socket.socket(fileno=fd)
                conn.setblocking(False)
                task = loop.create_task(loop.connect_accepted_socket(protocol, conn))
                pending.add(task)
                task.add_done_callback(pending.discard)

        channel.setblocking(False)
        loop.add_reader(channel.fileno(), readable)


class EvomemHTTPServer:
    """The service on its bound socket; ``serve_forever`` runs it (in any thread), ``shutdown`` stops
    it and waits, ``server_close`` releases the socket."""

    def __init__(
        self,
        sock: socket.socket,
        service: RetrievalService,
        settings: Settings,
        channel: socket.socket | None = None,
    ) -> None:
        self.socket = sock
        self.service = service
        app, self.api = create_app(service, settings)
        config = uvicorn_config(
            app,
            EdgeLimits.from_settings(settings),
            lifespan="off",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
        self._server = _Server(config)
        self._server.channel = channel
        self._done = threading.Event()
        self._done.set()

    @property
    def server_address(self) -> tuple[str, int]:
        host, port = self.socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{host}:{port}"

    def serve_forever(self, poll_interval: float = 0.1) -> None:  # poll_interval: the old signature
        self._done.clear()
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._done.set()

    def shutdown(self) -> None:
        self._server.should_exit = True
        self._done.wait(SHUTDOWN_GRACE_S + 5)

    def server_close(self) -> None:
        self.socket.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket; ``ConfigError`` with a plain reason when the address cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it Nagle's algorithm and the client's delayed ACK held every answer ~40 ms (the
    # headers and the body go out as two writes); set on the listener too, which accepted sockets inherit
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is in use; set EVOMEM_HTTP_PORT or --port") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def build_server(
    settings: Settings,
    runtime: Runtime | None = None,
    sock: socket.socket | None = None,
    channel: socket.socket | None = None,
) -> EvomemHTTPServer:
    """The retrieval side: the stores (``runtime``, or those the settings name), the projector
    following the change feed, and the HTTP API on its bound socket (``sock``: one already listening;
    with ``channel``, the connections ``evomem serve --workers`` accepts on it and hands over)."""
    auth = TokenAuth(settings.tokens.get_secret_value() if settings.tokens else None)
    if sock is None:
        sock = bind(settings.http_host, settings.http_port)  # first: a port in use opens nothing
    try:
        runtime = runtime or open_runtime(settings)
    except BaseException:
        sock.close()
        raise
    try:
        auth.attach(runtime.tokens)  # run-time tokens
        if not auth.enabled and settings.http_host not in ("127.0.0.1", "localhost", "::1"):
            raise ConfigError(
                "without EVOMEM_TOKENS (or a token made with `evomem tokens create`) the service only "
                f"listens on loopback; set tokens to bind {settings.http_host}"
            )
        runtime.follow()
        return EvomemHTTPServer(sock, RetrievalService(runtime, auth), settings, channel)
    except BaseException:
        sock.close()
        runtime.close()
        raise


def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; the URL is written under DATA_DIR so other processes can find it.
    One process; ``evomem.service.processes.serve_workers`` runs several."""
    server = build_server(settings)
    url_file = service_url_file(settings.data_dir)

    def shutdown(*_: Any) -> None:
        server._server.should_exit = True

    previous = {sig: signal.signal(sig, shutdown) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        url_file.parent.mkdir(parents=True, exist_ok=True)
        url_file.write_text(server.url)
        log.info("service.listening", url=server.url, auth=server.service.auth.enabled)
        print(f"evomem retrieval service on {server.url}", flush=True)
        server.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.server_close()
        server.service.runtime.close()
        url_file.unlink(missing_ok=True)


__all__ = ["Api", "EvomemHTTPServer", "bind", "build_server", "serve"]
