"""The README's Python example runs as written, on the embedded stack. (Every setting is documented
on the generated settings page: tests/unit/test_docs.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_sdk_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("EVOMEM_REDIS_URL", raising=False)
    monkeypatch.delenv("EVOMEM_QDRANT_URL", raising=False)
    scope: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), scope)
    assert str(scope["event_id"])
    assert scope["counts"].applied == 1  # type: ignore[attr-defined]
