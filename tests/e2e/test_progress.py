"""Progress lines of the long commands: on stderr, on a terminal or with --progress, never else."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import redis

from evomem import Memory, Settings
from evomem.cli import main
from evomem.ops.progress import Progress, wanted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_in_place_and_ends_with_the_total() -> None:
    tty = Terminal()
    with Progress(tty, "import", 1000, wanted(None, tty)) as bar:
        for _ in range(1000):
            bar.advance()
    text = tty.getvalue()
    assert text.startswith("\r") and text.endswith("\n")
    assert "1,000/1,000 (100%)" in text and text.count("\n") == 1  # one line, redrawn


def test_elsewhere_nothing_unless_asked_then_a_line_per_tenth() -> None:
    pipe = io.StringIO()
    with Progress(pipe, "export", 100, wanted(None, pipe)) as bar:
        for _ in range(100):
            bar.advance()
    assert pipe.getvalue() == ""
    with Progress(pipe, "export", 100, wanted(True, pipe)) as bar:
        for _ in range(100):
            bar.advance()
    lines = pipe.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in pipe.getvalue() and lines[-1].startswith("  export: 100/100")
    assert wanted(False, Terminal()) is False


def test_export_and_import_show_progress_only_with_the_flag(
    settings: Settings,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("EVOMEM_REDIS_URL", str(settings.redis_url))
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(settings.data_dir))
    with Memory.open(settings) as mem:
        for i in range(5):
            mem.report(
                None, status="resolved", namespace="alpha", query=f"task {i}", proposed_insight=f"Lesson {i}."
            )
        mem.consolidate()
    out = tmp_path / "memory.jsonl"

    def run(*argv: Any) -> str:
        capsys.readouterr()
        assert main([str(a) for a in argv]) == 0
        return capsys.readouterr().err

    assert "export:" not in run("export", "-o", out)  # stderr is not a terminal here
    plain = out.read_text()
    err = run("export", "-o", out, "--progress")
    assert "export: 11/11 (100%)" in err and out.read_text() == plain  # 5 queries, 5 insights, a header
    redis_client.flushdb()
    err = run("import", out, "--progress")
    assert "import: 11/11 (100%)" in err
    assert "import:" not in run("import", out)


def test_demo_shows_a_line_per_phase_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "demo",
        "--tasks",
        "30",
        "--phases",
        "2",
        "--batch",
        "10",
        "--data-dir",
        str(tmp_path),
        "--progress",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "phase 1/2: tasks × memories: 45/45 (100%)" in err and "phase 2/2" in err
