"""What the growth benchmark measures with, besides a clock: resident memory from /proc, the time
spent projecting inside ``Memory.consolidate()``, and a progress line on stderr."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from evomem import Memory
from evomem.adapters.redis.connection import EmbeddedRedis

_STATUS_FIELDS = {"VmRSS": "rss", "VmHWM": "peak", "RssAnon": "anon", "RssFile": "file"}


def rss_mb(pid: int | str = "self") -> dict[str, float | None]:
    """Resident memory of a process in MB from /proc: ``rss`` now, ``peak`` (VmHWM), and how much of
    ``rss`` is ``anon`` (heaps) or ``file`` (mapped files: the index's segments and WAL, the
    interpreter); None where /proc has no answer (another OS, or the process is gone)."""
    out: dict[str, float | None] = dict.fromkeys(_STATUS_FIELDS.values())
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in _STATUS_FIELDS:
                out[_STATUS_FIELDS[name]] = round(int(value.split()[0]) / 1024, 1)
    return out


def cpu_s(pid: int | str = "self") -> float | None:
    """CPU time (user + system, all threads) a process has used, from /proc/<pid>/stat; None when
    /proc has no answer. Unlike a wall clock it does not count time spent waiting for a core that
    other processes hold, so it stays comparable on a loaded machine."""
    if pid == "self":
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def redis_pid(mem: Memory) -> int | None:
    """The redis-server's pid: from INFO (any local server), else the embedded server's pid file."""
    with contextlib.suppress(Exception):
        return int(mem.redis.info("server")["process_id"])
    with contextlib.suppress(OSError, ValueError):
        return int(EmbeddedRedis(mem.settings.data_dir).pidfile.read_text().strip())
    return None


def redis_used_memory_mb(mem: Memory) -> float | None:
    """What Redis itself counts as its data (``used_memory``), as against the process's RSS."""
    with contextlib.suppress(Exception):
        return round(int(mem.redis.info("memory")["used_memory"]) / 2**20, 1)
    return None


class ProjectionTimer:
    """Time spent in ``mem.projector.run_once``, which ``Memory.consolidate()`` calls after each
    batch it applies. The public method is wrapped on this one instance, as an observer: nothing
    private is touched and what it does is unchanged. ``available`` is False when the memory has no
    projector (opened without its index); ``calls`` stays 0 if consolidation stops projecting
    through ``run_once``, and the projection figures are then reported as unknown."""

    def __init__(self, mem: Memory) -> None:
        self.ns = 0
        self.calls = 0
        projector = mem.projector
        self.available = projector is not None and callable(getattr(projector, "run_once", None))
        if projector is None or not self.available:
            return
        original: Callable[..., Any] = projector.run_once

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - t0
                self.calls += 1

        # an instance attribute shadows the method for this projector only (mypy refuses a plain
        # assignment to a method)
        setattr(projector, "run_once", timed)  # noqa: B010


class Progress:
    """One line on stderr: rewritten in place on a terminal, else printed every ``every_s``."""

    def __init__(self, stream: TextIO, label: str, total: int, enabled: bool = True, every_s: float = 30.0):
        self.stream, self.label, self.total, self.enabled = stream, label, max(total, 1), enabled
        self.tty = stream.isatty()
        self.every_s = 0.2 if self.tty else every_s
        self.start = self.last = time.perf_counter()
        self.last_done = 0

    def update(self, done: int, note: str = "") -> None:
        now = time.perf_counter()
        if not self.enabled or (now - self.last < self.every_s and done < self.total):
            return
        rate = (done - self.last_done) / max(now - self.last, 1e-9)
        self.last, self.last_done = now, done
        line = (
            f"  {self.label}: {done:,}/{self.total:,} ({done / self.total:4.0%}) {now - self.start:7.1f} s, "
            f"{rate:6.0f}/s now{'  ' + note if note else ''}"
        )
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["Progress", "ProjectionTimer", "cpu_s", "redis_pid", "redis_used_memory_mb", "rss_mb"]
