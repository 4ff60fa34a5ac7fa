"""The wheel a user installs works on its own: built from the checkout, installed with its
dependencies into a fresh virtual environment (no system site packages), it runs the README's
example from a directory outside the checkout, and ``evomem --version`` names its version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.timeout(1800)
def test_the_built_wheel_runs_the_readme_example_in_a_fresh_venv(tmp_path: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVOMEM_", "PYTHON", "VIRTUAL_ENV"))}
    env["EVOMEM_DATA_DIR"] = str(tmp_path / "data")
    work = tmp_path / "elsewhere"
    work.mkdir()

    source = tmp_path / "src"  # a clean copy of the tracked tree: a build leaves nothing in the checkout
    tracked = _run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], work, env, 60).split()
    for name in tracked:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        work,
        env,
        600,
    )
    (wheel,) = dist.glob("*.whl")
    assert wheel.name.startswith(f"{project['name'].replace('-', '_')}-{project['version']}-")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], work, env, 300)  # system site packages off
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], work, env, 1500)

    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "the README has no Python example"
    example = work / "example.py"
    example.write_text(
        block.group(1)
        + "\nimport evomem, sys\n"
        + "print('FROM', evomem.__file__)\n"
        + "print('APPLIED', counts.applied, 'EVENT', event_id)\n"
        + f"print('PATH', [p for p in sys.path if p.startswith({str(ROOT)!r})])\n"
    )
    out = _run([str(python), str(example)], work, env, 600)
    (origin,) = re.findall(r"^FROM (.*)$", out, re.M)
    assert Path(origin).is_relative_to(venv), f"evomem imported from {origin}, not the installed wheel"
    assert "APPLIED 1 EVENT " in out
    assert "PATH []" in out  # nothing of the checkout on the path
    assert "Check which kind of entity a claim names first." in out  # the insight the example added

    version = _run([str(venv / "bin" / "evomem"), "--version"], work, env, 120)
    assert version.strip() == f"evomem {project['version']}"
