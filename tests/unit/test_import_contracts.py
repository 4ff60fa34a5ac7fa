"""The import contracts of ``make lint`` (``lint-imports``, configured in pyproject.toml) hold for this
tree, and fail on a copy of it with a vendor import in the core, an upward import from a stage and an
import cycle: the direction of the dependencies is machine-checked, not a convention."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copy, not the installed checkout
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("evomem", "schemas", "workers"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_tree_keeps_every_import_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_vendor_in_the_core_an_upward_import_and_a_cycle_each_break_a_contract(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    (tree / "evomem/core/leak.py").write_text('"""A pure module that reaches for Redis."""\n\nimport redis\n')
    (tree / "evomem/pipeline/upward.py").write_text(
        '"""A stage that builds its own adapters."""\n\nfrom evomem import runtime\n'
    )
    (tree / "evomem/adapters/redis/ping.py").write_text("from evomem.adapters.redis import pong\n")
    (tree / "evomem/adapters/redis/pong.py").write_text("from evomem.adapters.redis import ping\n")
    remote = tree / "evomem/sdk/remote.py"
    remote.write_text(remote.read_text() + "\nfrom evomem.runtime import open_runtime  # noqa\n")
    result = _lint(tree)
    out = result.stdout
    assert result.returncode != 0, out
    assert "The core is pure: no client library, no I/O BROKEN" in out
    assert "evomem.core.leak -> redis" in out
    assert "evomem.pipeline.upward -> evomem.runtime" in out  # the layers contract
    assert "No import cycle between sibling modules anywhere BROKEN" in out
    assert "load neither Redis, Qdrant nor the" in out and "evomem.sdk.remote -> evomem.runtime" in out


def test_importing_evomem_loads_no_agent_framework() -> None:
    """The frameworks are installed here (the dev extra), yet ``import evomem`` and its SDK load none."""
    frameworks = ("langgraph", "langchain_core", "langchain_openai", "agents", "pydantic_ai")
    code = (
        "import sys, evomem, evomem.sdk, evomem.integrations, evomem.integrations.outcomes\n"
        f"print([m for m in {frameworks!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
