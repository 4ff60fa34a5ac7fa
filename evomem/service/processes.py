"""``evomem serve --workers N``: N retrieval processes answering on one port. Qdrant Edge's query
holds the GIL, so one process uses one core; each process here holds its own embedded index replica
(``DATA_DIR/qdrant``, ``DATA_DIR/qdrant-1``, ...) and follows the change feed on its own.

The supervisor binds the port, brings the replicas up to date (``prepare_replicas``: the first caught
up from Redis, the others copied from it where that is cheaper than replaying), then starts the
processes, each with a Unix socket pair to it. The supervisor alone accepts: it hands each new
connection (its descriptor, SCM_RIGHTS) to the process that holds the fewest, and each process tells
it when one closes. With one listening socket shared by the processes, whichever was in ``accept()``
first took most of a burst of new connections (28 of 32 in two of three tries), and a keep-alive
connection stays where it landed; ``SO_REUSEPORT``'s hash over a few dozen connections left one
process more than 60% of them too often (docs/lab/2026-12-07-tenants-and-processes.md). A process
that dies is started again on its replica, which keeps its cursor in Redis and so only replays what
it missed. With ``EVOMEM_QDRANT_URL`` every process reads the one shared server instead.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evomem.backoff import capped_doubling
from evomem.errors import ConfigError
from evomem.logs import get_logger
from evomem.runfiles import service_url_file
from evomem.runtime import hold_redis, prepare_replicas, replica_dirs, resolve_embedder
from evomem.service.connections import CLOSED, COUNTS, TAKEN, counts_file, write_counts
from evomem.service.server import bind, build_server, serve
from evomem.settings import Settings

log = get_logger("evomem.service")

READY = "ready"
RESTART_BACKOFF_BASE_S = 0.2  # the wait after a process exits, doubled for each quick exit in a row
RESTART_BACKOFF_MAX_S = 10.0
STABLE_AFTER_S = 60.0  # a process that served this long and then died gets the shortest backoff
STOP_GRACE_S = 15.0


class _Child:
    """One retrieval process, its channel (the supervisor's end), and how to start it again."""

    def __init__(self, number: int, env: dict[str, str], fd: int) -> None:
        self.number = number
        self.env = env
        self.fd = fd
        self.proc: subprocess.Popen[str] | None = None
        self.channel: socket.socket | None = None  # set while the process serves
        self.held = 0  # connections handed to it and not closed yet
        # connections handed and not acknowledged yet: kept open here, so that those a process that
        # died never took are handed to another one instead of being lost
        self.unacked: collections.deque[socket.socket] = collections.deque()
        self.restarts = 0
        self.failing = 0  # exits in a row, each soon after its start: what the backoff doubles on
        self.started_at = 0.0

    def start(self) -> None:
        """Start the process and wait until it serves (its store is open and caught up)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "evomem.service.processes",
                    str(self.fd),
                    str(theirs.fileno()),
                    str(self.number),
                ],
                env=self.env,
                pass_fds=(self.fd, theirs.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
            )
        finally:
            theirs.close()
        self.proc = proc
        self.started_at = time.monotonic()
        assert proc.stdout is not None
        line = proc.stdout.readline()  # EOF if it exits before it serves
        proc.stdout.close()
        if line.strip() != READY:
            ours.close()
            code = proc.wait()
            raise ConfigError(
                f"retrieval process {self.number} exited ({code}) before serving; see its log above"
            )
        self.held = 0
        self.channel = ours
        log.info("service.process_started", number=self.number, pid=proc.pid, restarts=self.restarts)

    def gone(self) -> list[socket.socket]:
        """Its channel closed (it exited): nothing more is handed to it until it starts again.
        Returns the connections it never took."""
        if self.channel is not None:
            self.channel.close()
        self.channel = None
        self.held = 0
        orphans = list(self.unacked)
        self.unacked.clear()
        return orphans

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)


class _Dispatcher:
    """The supervisor's accept loop (a thread): each connection to the process holding the fewest,
    ties taken in turn; the closes each process reports counted back."""

    def __init__(self, sock: socket.socket, children: list[_Child], data_dir: Path) -> None:
        self.sock = sock
        self.children = children
        self.data_dir = data_dir
        self.lock = threading.Lock()
        self.handed = [0] * len(children)  # every connection handed to each, for the log
        self._turn = 0
        self._written: dict[int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evomem-dispatch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                serving = [c for c in self.children if c.channel is not None]
            channels = {c.channel: c for c in serving if c.channel is not None}
            wanted: list[Any] = [*channels, self.sock] if serving else list(channels)
            if not wanted:
                self._stop.wait(0.05)  # no process serves yet: connections wait in the backlog
                continue
            try:
                ready, _, _ = select.select(wanted, [], [], 0.2)
            except (OSError, ValueError):  # a channel closed under us: look again
                continue
            for r in ready:
                if r is self.sock:
                    self._accept_all()
                else:
                    self._closed(channels[r])

    def _closed(self, child: _Child) -> None:
        channel = child.channel
        if channel is None:
            return
        try:
            msg = channel.recv(64)
        except BlockingIOError:
            return
        except OSError:
            msg = b""
        orphans: list[socket.socket] = []
        with self.lock:
            if not msg:
                orphans = child.gone()
            else:
                child.held = max(0, child.held - msg.count(CLOSED))
                for _ in range(msg.count(TAKEN)):
                    if child.unacked:
                        child.unacked.popleft().close()
        for conn in orphans:
            self._hand(conn)

    def _accept_all(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("service.accept_failed", error=str(exc))
                return
            self._hand(conn)  # closed here once the process says it holds its own descriptor of it

    def _hand(self, conn: socket.socket) -> None:
        while True:
            orphans: list[socket.socket] = []
            with self.lock:
                for c in self.children:  # a process that exited and whose channel is not read yet
                    if c.channel is not None and c.proc is not None and c.proc.poll() is not None:
                        orphans += c.gone()
                serving = [c for c in self.children if c.channel is not None]
            for orphan in orphans:
                self._hand(orphan)
            with self.lock:
                if not serving:
                    conn.close()  # nobody to serve it
                    return
                n = len(self.children)
                order = sorted(serving, key=lambda c: (c.held, (c.number - self._turn) % n))
                child = order[0]
                self._turn = (child.number + 1) % n
                channel = child.channel
                assert channel is not None
            try:
                socket.send_fds(channel, [b"c"], [conn.fileno()])
            except OSError:
                with self.lock:
                    orphans = child.gone()
                for orphan in orphans:
                    self._hand(orphan)
                continue
            with self.lock:
                child.held += 1
                child.unacked.append(conn)
                self.handed[child.number] += 1
            return

    def write_counts(self) -> None:
        """What every process holds, for any process's /metrics (written when it changed)."""
        with self.lock:
            held = {c.number: c.held for c in self.children}
        if held != self._written:
            with contextlib.suppress(OSError):
                write_counts(self.data_dir, held)
            self._written = held


def _env(settings: Settings, redis_url: str, index: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        EVOMEM_DATA_DIR=str(settings.data_dir),
        EVOMEM_REDIS_URL=redis_url,
        EVOMEM_HTTP_HOST=settings.http_host,
        EVOMEM_HTTP_WORKERS="1",
    )
    if index is not None:
        env["EVOMEM_INDEX_DIR"] = str(index)
    return env


def serve_any(settings: Settings) -> None:
    """``evomem serve``: one process, or ``EVOMEM_HTTP_WORKERS`` of them."""
    if settings.http_workers > 1:
        serve_workers(settings)
    else:
        serve(settings)


def serve_workers(settings: Settings, announce: bool = True) -> None:
    """Run ``settings.http_workers`` retrieval processes on one port until SIGTERM/SIGINT."""
    n = settings.http_workers
    sock = bind(settings.http_host, settings.http_port)  # first: a port in use starts nothing
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    release_redis = None
    url_file = service_url_file(settings.data_dir)
    children: list[_Child] = []
    dispatcher: _Dispatcher | None = None
    try:
        # the embedded Redis outlives any one process: the supervisor holds it while they run
        redis_url, release_redis = hold_redis(settings)
        shared = settings.model_copy(update={"redis_url": redis_url})
        report = prepare_replicas(shared, n)
        dirs: Sequence[Path | None] = replica_dirs(shared, n) if settings.qdrant_url is None else [None] * n
        # every process embeds alike: EMBEDDER=auto resolved once, here, after the first replica
        # (which the others copy) recorded its embedder
        embedder = {"EVOMEM_EMBEDDER": resolve_embedder(shared)}
        host, port = sock.getsockname()[:2]
        env_port = {"EVOMEM_HTTP_PORT": str(port)}
        for i, d in enumerate(dirs):
            child = _Child(i, {**_env(settings, redis_url, d), **env_port, **embedder}, sock.fileno())
            children.append(child)
        dispatcher = _Dispatcher(sock, children, settings.data_dir)
        dispatcher.start()  # each process is handed connections as soon as it serves
        for child in children:
            child.start()
        url = f"http://{host}:{port}"
        url_file.parent.mkdir(parents=True, exist_ok=True)
        url_file.write_text(url)
        log.info("service.listening", url=url, processes=n, replicas=report)
        if announce:
            print(f"evomem retrieval service on {url} ({n} processes)", flush=True)
        _supervise(children, stop, dispatcher)
    finally:
        if dispatcher is not None:
            dispatcher.stop()
            log.info("service.connections_handed", handed=dispatcher.handed)
        for child in children:
            child.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            if child.proc is not None:
                try:
                    child.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    child.proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        url_file.unlink(missing_ok=True)
        counts_file(settings.data_dir).unlink(missing_ok=True)
        if release_redis is not None:
            release_redis()


def _supervise(children: list[_Child], stop: threading.Event, dispatcher: _Dispatcher) -> None:
    """Start again any process that exits, with a backoff that doubles while it keeps failing."""
    while not stop.wait(0.5):
        dispatcher.write_counts()
        for child in children:
            proc = child.proc
            if proc is None or proc.poll() is None:
                continue
            with dispatcher.lock:
                orphans = child.gone()
            for conn in orphans:
                conn.close()  # the dispatcher hands connections on; here the process is long gone
            child.restarts += 1
            lived = time.monotonic() - child.started_at
            child.failing = child.failing + 1 if lived < STABLE_AFTER_S else 1
            log.warning(
                "service.process_exited", number=child.number, code=proc.returncode, restarts=child.restarts
            )
            if stop.wait(capped_doubling(child.failing, RESTART_BACKOFF_BASE_S, RESTART_BACKOFF_MAX_S)):
                return
            try:
                child.start()
            except ConfigError as exc:
                log.error("service.process_restart_failed", number=child.number, error=str(exc))


def child_main(fd: int, channel_fd: int, number: int) -> int:
    """One retrieval process: the service on the connections the supervisor hands it over
    ``channel_fd``, its own replica (the settings). ``fd`` is the listening socket (its address)."""
    sock = socket.socket(fileno=fd)
    channel = socket.socket(fileno=channel_fd)
    COUNTS.number, COUNTS.channel = number, channel
    server = build_server(Settings(), sock=sock, channel=channel)

    def shutdown(*_: Any) -> None:
        server._server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, shutdown)
    try:
        print(READY, flush=True)
        server.serve_forever()
    finally:
        server.service.runtime.close()
        COUNTS.channel = None
        channel.close()
        sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
