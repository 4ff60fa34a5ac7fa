"""`evomem demo`: a small simulated fleet runs end to end on the embedded stack and its memory is edited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evomem import demo

pytestmark = pytest.mark.slow  # the whole demo, in processes

ARMS = {"maintained", "append-only", "no memory"}


def test_demo_json_reports_three_arms_and_a_maintained_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A short run finishes, compares all three arms on the same tasks, and the maintained memory
    added, kept and archived (or collected negative evidence against) insights."""
    args = ["--tasks", "150", "--batch", "15", "--seed", "7", "--json", "--data-dir", str(tmp_path)]
    assert demo.main(args) == 0
    summary = json.loads(capsys.readouterr().out)

    assert set(summary["arms"]) == ARMS
    for arm in summary["arms"].values():
        assert 0.0 <= arm["success_rate"] <= 1.0
        assert len(arm["phases"]) == 5
    maintained = summary["arms"]["maintained"]
    assert maintained["operations"].get("ADD", 0) > 0
    assert maintained["operations"].get("KEEP", 0) > 0
    assert maintained["operations"].get("ARCHIVE", 0) > 0
    assert maintained["outcomes"].get("archived", 0) + maintained["outcomes"].get("negative_evidence", 0) > 0
    append_only = summary["arms"]["append-only"]
    assert not {"ARCHIVE", "REVISE"} & set(append_only["operations"])
    assert append_only["insights_active"] == append_only["insights_total"]  # nothing is ever archived there
    assert summary["arms"]["no memory"]["insights_total"] == 0
    assert (tmp_path / "maintained").is_dir() and (tmp_path / "append-only").is_dir()


def test_demo_text_output_and_a_used_data_dir_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The readable run prints a progress line per phase and the final table; a second run into the
    same directory is refused instead of mixing two runs' memories."""
    assert demo.main(["--tasks", "60", "--phases", "2", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("phase ") >= 2 and "maintained memory:" in out
    table = out[out.index("memory ") :]
    for arm in ARMS:
        assert f"\n{arm} " in table
    assert "maintained operations: ADD" in out

    assert demo.main(["--tasks", "10", "--data-dir", str(tmp_path)]) == 2
    assert "already holds a demo run" in capsys.readouterr().err


def test_demo_rejects_nonsense_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--tasks", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
