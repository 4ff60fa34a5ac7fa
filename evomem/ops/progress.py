"""A progress line for long commands (``demo``, ``import``, ``export``, ``bench``): on stderr, shown
on a terminal by default or anywhere with ``--progress``, never with ``--no-progress``. On a
terminal it is rewritten in place at most ten times a second; elsewhere one line every 10%."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TextIO, TypeVar

T = TypeVar("T")
REDRAW_S = 0.1


def wanted(flag: bool | None, stream: TextIO | None = None) -> bool:
    """``--progress`` / ``--no-progress`` as given, else whether the stream is a terminal."""
    stream = sys.stderr if stream is None else stream
    return stream.isatty() if flag is None else flag


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line on stderr (default: only on a terminal)",
    )


class Progress:
    def __init__(
        self, stream: TextIO | None, label: str, total: int, enabled: bool = True, *, transient: bool = False
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.transient = transient  # erased when done, for commands that print their own lines
        self.label, self.total, self.enabled = label, max(total, 1), enabled
        self.start = time.perf_counter()
        self.tty = self.stream.isatty()
        self.count = 0
        self._next_step = 0.1
        self._drawn_at = 0.0

    def advance(self, n: int = 1) -> None:
        self.update(self.count + n)

    def update(self, done: int) -> None:
        self.count = done
        if not self.enabled:
            return
        frac = min(done / self.total, 1.0)
        now = time.perf_counter()
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        line = f"  {self.label}: {done:,}/{self.total:,} ({frac:4.0%}) {elapsed:6.1f} s, {rate:,.0f}/s"
        if self.tty:
            if now - self._drawn_at >= REDRAW_S or done >= self.total:
                self.stream.write("\r" + line)
                self.stream.flush()
                self._drawn_at = now
        elif frac >= self._next_step or done >= self.total:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._next_step = frac + 0.1

    def done(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r\x1b[K" if self.transient else "\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.done()


def iterate(items: Iterable[T], label: str, total: int, enabled: bool) -> Iterator[T]:
    """The items, advancing a progress line by one each."""
    with Progress(None, label, total, enabled) as bar:
        for item in items:
            yield item
            bar.advance()


__all__ = ["Progress", "add_flag", "iterate", "wanted"]
