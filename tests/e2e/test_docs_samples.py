"""Every Python sample of the documentation runs as written, each on a fresh embedded memory: the
```python blocks of README.md, of docs/**/*.md and of the files the site includes (bench/README.md,
deploy/*.md). A block that cannot run offline says so in its first line, visibly, and there are few."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = "# Not run by the docs tests:"
SOURCES = sorted(
    {ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "deploy").glob("*.md")}
    | {p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts}
)
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    out = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{path.relative_to(ROOT)}:{line}", m.group(1)))
    return out


BLOCKS = _blocks()
RUN = [(where, code) for where, code in BLOCKS if not code.startswith(NOT_RUN)]


def test_the_docs_have_samples_and_few_that_cannot_run() -> None:
    skipped = [where for where, code in BLOCKS if code.startswith(NOT_RUN)]
    assert len(RUN) >= 5
    assert len(skipped) <= 3, skipped
    for where, code in BLOCKS:
        if code.startswith(NOT_RUN):
            reason = code.split("\n", 1)[0][len(NOT_RUN) :].strip()
            assert len(reason) > 10, f"{where}: say why the block cannot run"


@pytest.mark.parametrize(("where", "code"), RUN, ids=[w for w, _ in RUN])
def test_the_sample_runs(where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(tmp_path / "data"))
    for name in ("EVOMEM_REDIS_URL", "EVOMEM_QDRANT_URL", "EVOMEM_URL", "EVOMEM_TOKEN", "EVOMEM_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {"__name__": "__docs_sample__"})
