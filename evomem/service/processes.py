"""``evomem serve --workers N``: N retrieval processes answering on one port. Qdrant Edge's query
holds the GIL, so one process uses one core; each process here holds its own embedded index replica
(``DATA_DIR/qdrant``, ``DATA_DIR/qdrant-1``, ...) and follows the change feed on its own.

The supervisor binds the port, brings the replicas up to date (``prepare_replicas``: the first caught
up from Redis, the others copied from it where that is cheaper than replaying), then starts the
processes on the inherited listening socket: the kernel hands each new connection to whichever
process accepts first, so an idle process takes it before a busy one. A process that dies is started
again on its replica, which keeps its cursor in Redis and so only replays what it missed. With
``EVOMEM_QDRANT_URL`` every process reads the one shared server instead.
"""

from __future__ import annotations

import os
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
from evomem.runtime import hold_redis, prepare_replicas, replica_dirs
from evomem.service.server import bind, build_server, serve
from evomem.settings import Settings

log = get_logger("evomem.service")

READY = "ready"
RESTART_BACKOFF_BASE_S = 0.2  # the wait after a process exits, doubled for each quick exit in a row
RESTART_BACKOFF_MAX_S = 10.0
STABLE_AFTER_S = 60.0  # a process that served this long and then died gets the shortest backoff
STOP_GRACE_S = 15.0


class _Child:
    """One retrieval process on the shared socket, and how to start it again."""

    def __init__(self, number: int, env: dict[str, str], fd: int) -> None:
        self.number = number
        self.env = env
        self.fd = fd
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0
        self.failing = 0  # exits in a row, each soon after its start: what the backoff doubles on
        self.started_at = 0.0

    def start(self) -> None:
        """Start the process and wait until it serves (its store is open and caught up)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "evomem.service.processes", str(self.fd)],
            env=self.env,
            pass_fds=(self.fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.proc = proc
        self.started_at = time.monotonic()
        assert proc.stdout is not None
        line = proc.stdout.readline()  # EOF if it exits before it serves
        proc.stdout.close()
        if line.strip() != READY:
            code = proc.wait()
            raise ConfigError(
                f"retrieval process {self.number} exited ({code}) before serving; see its log above"
            )
        log.info("service.process_started", number=self.number, pid=proc.pid, restarts=self.restarts)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)


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
    try:
        # the embedded Redis outlives any one process: the supervisor holds it while they run
        redis_url, release_redis = hold_redis(settings)
        shared = settings.model_copy(update={"redis_url": redis_url})
        report = prepare_replicas(shared, n)
        dirs: Sequence[Path | None] = replica_dirs(shared, n) if settings.qdrant_url is None else [None] * n
        host, port = sock.getsockname()[:2]
        env_port = {"EVOMEM_HTTP_PORT": str(port)}
        for i, d in enumerate(dirs):
            child = _Child(i, {**_env(settings, redis_url, d), **env_port}, sock.fileno())
            children.append(child)
            child.start()
        url = f"http://{host}:{port}"
        url_file.parent.mkdir(parents=True, exist_ok=True)
        url_file.write_text(url)
        log.info("service.listening", url=url, processes=n, replicas=report)
        if announce:
            print(f"evomem retrieval service on {url} ({n} processes)", flush=True)
        _supervise(children, stop)
    finally:
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
        if release_redis is not None:
            release_redis()


def _supervise(children: list[_Child], stop: threading.Event) -> None:
    """Start again any process that exits, with a backoff that doubles while it keeps failing."""
    while not stop.wait(0.5):
        for child in children:
            proc = child.proc
            if proc is None or proc.poll() is None:
                continue
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


def child_main(fd: int) -> int:
    """One retrieval process: the service on the inherited socket, its own replica (the settings)."""
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    server = build_server(Settings(), sock=sock)

    def shutdown(*_: Any) -> None:
        server._server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, shutdown)
    try:
        print(READY, flush=True)
        server.serve_forever()
    finally:
        server.service.runtime.close()
        sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(int(sys.argv[1])))
