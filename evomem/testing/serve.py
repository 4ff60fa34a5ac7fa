"""A retrieval service as a process of its own, for the tests and the benchmarks that drive one:
started, waited for until it says where it listens, stopped with SIGTERM when the block ends."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The line ``evomem serve`` (and ``serve()``) prints once it listens, before the URL.
LISTENING = "retrieval service on http://"


@dataclass
class ServiceProcess:
    proc: subprocess.Popen[str]
    host: str
    port: int
    returncode: int | None = None
    """The process's exit status once the block has ended (None while it runs)."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextlib.contextmanager
def service_process(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    what: str = "the service",
    stop_timeout_s: float = 60.0,
) -> Iterator[ServiceProcess]:
    """``python <args>`` (e.g. ``-m evomem.cli serve``), yielded once its first line says where it
    listens; a process that exits or prints anything else first raises ``RuntimeError`` (its stderr
    is the caller's). SIGTERM at the end, then a kill if it has not exited in ``stop_timeout_s``."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        env=dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    service: ServiceProcess | None = None
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if LISTENING not in line:
            raise RuntimeError(f"{what} did not start (exit status {proc.wait()}); its stderr is above")
        host, port = line.rsplit("http://", 1)[1].split()[0].rsplit(":", 1)
        service = ServiceProcess(proc, host, int(port))
        yield service
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if service is not None:
            service.returncode = code
        if proc.stdout is not None:
            proc.stdout.close()


__all__ = ["LISTENING", "ServiceProcess", "service_process"]
