"""The wheel is the product: the library, its wire schemas and the Celery glue, with its Lua and JSON
files, and no benchmark code (the suites live in the checkout's bench/, beside their results)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_package_and_no_benchmark(tmp_path: Path) -> None:
    source = tmp_path / "src"
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:  # a clean copy of the checkout, bench/ included: the wheel must leave it out
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    assert (source / "bench" / "retrieval.py").exists()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("evograph_mem-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "evomem/sdk/local.py" in names and "evomem/runtime.py" in names
    assert "evomem/adapters/redis/lua/apply.lua" in names and "schemas/json/task_event.schema.json" in names
    assert "workers/tasks.py" in names
    assert not [n for n in names if n.startswith("bench/") or "/bench" in n or n.startswith("tests/")]


def test_evomem_bench_runs_the_checkouts_suite_and_says_where_it_is_elsewhere(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "evomem.cli", "bench", "--help"]
    inside = subprocess.run(cli, cwd=ROOT / "evomem", capture_output=True, text=True, timeout=120)
    assert inside.returncode == 0 and "usage: evomem bench" in inside.stdout
    outside = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert outside.returncode == 1
    assert "not part of the installed package" in outside.stderr and "checkout" in outside.stderr
