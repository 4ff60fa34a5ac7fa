"""``evomem up`` / ``evomem down``: the whole pipeline on one machine, in the background.

Starts the embedded Redis (unless ``EVOMEM_REDIS_URL`` names a server), worker processes and the
retrieval side (the process that holds the Qdrant store and projects into it), with logs and pid
files under ``DATA_DIR``; ``down`` stops them in the reverse order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evomem.runfiles import logs_dir, run_dir
from evomem.runtime import ensure_redis, stop_redis
from evomem.settings import Settings

STOP_TIMEOUT_S = 30.0


def _dirs(settings: Settings) -> tuple[Path, Path]:
    run, logs = run_dir(settings.data_dir), logs_dir(settings.data_dir)
    run.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    return run, logs


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (exited, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (another OS): the signal is all there is to go by
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _pids(run: Path) -> dict[str, int]:
    out = {}
    for f in sorted(run.glob("*.pid")):
        try:
            out[f.stem] = int(f.read_text())
        except ValueError:
            continue
    return out


def _spawn(name: str, argv: list[str], run: Path, logs: Path) -> int:
    with open(logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    (run / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def up(settings: Settings, workers: int, serve: bool = True) -> list[str]:
    run, logs = _dirs(settings)
    lines = []
    if settings.redis_url is None:
        lines.append(f"redis     {ensure_redis(settings, persistent=True)}")
    running = {k: p for k, p in _pids(run).items() if _alive(p)}
    exe = [sys.executable, "-m", "evomem.cli"]
    for i in range(workers):
        name = f"worker-{i}"
        if name in running:
            lines.append(f"{name:<9} already running (pid {running[name]})")
            continue
        argv = [*exe, "worker"]
        metrics = ""
        if settings.worker_metrics_port is not None:
            # one port each: worker i serves /metrics on WORKER_METRICS_PORT + i (0: any free port)
            port = settings.worker_metrics_port + i if settings.worker_metrics_port else 0
            argv += ["--metrics-port", str(port)]
            metrics = f", metrics on port {port}" if port else ", metrics on a free port (in its log)"
        pid = _spawn(name, argv, run, logs)
        lines.append(f"{name:<9} pid {pid}, log {logs / (name + '.log')}{metrics}")
    if serve and "retrieval" not in running:
        pid = _spawn("retrieval", [*exe, "serve"], run, logs)
        lines.append(
            f"retrieval pid {pid}, log {logs / 'retrieval.log'}, "
            f"http://{settings.http_host}:{settings.http_port}"
        )
    return lines


def down(settings: Settings) -> list[str]:
    run, _ = _dirs(settings)
    lines = []
    pids = _pids(run)
    for pid in pids.values():
        if _alive(pid):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for name, pid in pids.items():
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
            lines.append(f"{name:<9} killed (did not stop in {STOP_TIMEOUT_S:.0f} s)")
        else:
            lines.append(f"{name:<9} stopped")
        (run / f"{name}.pid").unlink(missing_ok=True)
    if settings.redis_url is None and stop_redis(settings):
        lines.append("redis     stopped")
    return lines


__all__ = ["down", "up"]
