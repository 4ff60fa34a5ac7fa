"""How many connections each retrieval process holds, for ``/metrics``
(``evomem_process_connections{process}``) and for the supervisor of ``evomem serve --workers N``,
which hands each accepted connection to the process holding the fewest (``processes``).

A process counts the connections it holds open; a supervised one also tells the supervisor of each
one that closes (a message on its channel), and the supervisor writes what every process holds to
``DATA_DIR/run/connections.json``, which any process's ``/metrics`` reads, so one scrape shows the
spread over all of them.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path

from evomem.runfiles import run_dir

CLOSED = b"-"  # a child's message to its supervisor: one of its connections closed
TAKEN = b"+"  # and: it holds a connection handed to it (the supervisor may close its own descriptor)


class ConnectionCounts:
    """The connections this process holds open, and the channel to tell a supervisor of closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open = 0
        self.number = 0  # this process's number under a supervisor (0 alone)
        self.channel: socket.socket | None = None

    def opened(self) -> None:
        with self._lock:
            self.open += 1

    def taken(self, n: int) -> None:
        channel = self.channel
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.send(TAKEN * n)

    def closed(self) -> None:
        with self._lock:
            self.open -= 1
        channel = self.channel
        if channel is not None:
            with contextlib.suppress(OSError):  # the supervisor went away: it is stopping us anyway
                channel.send(CLOSED)


COUNTS = ConnectionCounts()


def counts_file(data_dir: Path) -> Path:
    return run_dir(data_dir) / "connections.json"


def write_counts(data_dir: Path, held: dict[int, int]) -> None:
    path = counts_file(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({str(k): v for k, v in sorted(held.items())}))
    tmp.replace(path)


def connection_counts(data_dir: Path) -> dict[str, float]:
    """{process number: connections it holds}: every process's as the supervisor last wrote them,
    or this process's own when it runs alone."""
    if COUNTS.channel is not None:
        with contextlib.suppress(OSError, ValueError):
            return {k: float(v) for k, v in json.loads(counts_file(data_dir).read_text()).items()}
    return {str(COUNTS.number): float(COUNTS.open)}


__all__ = [
    "CLOSED",
    "COUNTS",
    "TAKEN",
    "ConnectionCounts",
    "connection_counts",
    "counts_file",
    "write_counts",
]
