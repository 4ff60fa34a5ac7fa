"""What the scale curve (``python -m bench.http --scale``) measures of a loaded store beyond the
in-process calls: recall of the served insights against Eq. 7-10 computed from Redis, and the
retrieval service as its own process on the store — start-up on a persisted replica, p50/p99 at
concurrency 1 over HTTP, its memory — and the copy that gives a second process its replica."""

from __future__ import annotations

import contextlib
import functools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import common
from evomem import Memory
from evomem.adapters.redis.connection import EmbeddedRedis
from evomem.core.hashing import word_features
from evomem.core.retrieval import (
    ServingInsight,
    candidates_from_queries,
    expand_neighbours,
    rank_insights,
    with_queries,
)
from evomem.errors import TransientError
from evomem.runtime import prepare_replicas
from evomem.settings import Settings
from evomem.testing.serve import service_process

Task = tuple[str, str]


def exact_recall(mem: Memory, tasks: Sequence[Task]) -> dict[str, Any]:
    """Served insights against the exact ones: the same similar queries (Qdrant scores sparse
    vectors exhaustively over the inverted index: no approximation) and, with the evidence search
    on, the same evidence queries (the index's search again), then the query graph, every query's
    whole evidence and every candidate's state read from Redis, the system of record, and Eq. 7-10
    over all of it. ``recall`` is the share of the exact top-B that was served;
    ``same_order`` the share of tasks served exactly the exact list."""
    r, graph = mem.retriever, mem.runtime.graph
    exact_n = hit_n = same = inherited = 0
    for ns, text in tasks:
        s = r.resolve(ns)
        served = [i.id for i in r.retrieve(text, ns, record=False).insights]
        vector = r.embedder.embed([text])[0]
        hits = r.index.search_queries(vector, ns, s.top_k)
        expansion = expand_neighbours(
            [h.id for h in hits], functools.partial(graph.neighbours, ns), s.hops, [h.score for h in hits]
        )
        if s.evidence_search:
            about = r.about_vector(vector, word_features(text))
            found = [h.id for h in hits]
            more = r.index.search_evidence(vector, ns, s.evidence_search, s.top_k, found, about)
            expansion = with_queries(expansion, {h.id: h.score for h in more})
        points = graph.query_points([(ns, q) for q in expansion.expanded])
        supports = {q: p.supports for (_, q), p in points.items()}
        harms = {q: p.harms for (_, q), p in points.items()}
        named = {i for ids in supports.values() for i in ids}
        nodes = graph.insight_points([(ns, i) for i in named])
        serving = [
            ServingInsight(p.id, p.text, p.version, p.inherits) for p in nodes.values() if p.state == "active"
        ]
        candidates = candidates_from_queries(supports, harms, serving)
        ranked = rank_insights(
            candidates,
            expansion.expanded,
            s.lambda_,
            s.budget,
            weights=expansion.weights,
            scoring=s.scoring,
            power=s.similarity_power,
            relevance=common.relevance_of(text) if s.relevance_power > 0 else None,
            relevance_power=s.relevance_power,
            refine=common.relevance_of(text, graph, ns, by_idf=True) if s.relevance == "idf" else None,
        )
        exact = [i.id for i in ranked]
        exact_n += len(exact)
        hit_n += len(set(exact) & set(served))
        same += exact == served
        inherited += len(set(served) - named)  # served through Ω⁺ inheritance: not in this reference
    return {
        "tasks": len(tasks),
        "recall": round(hit_n / exact_n, 4) if exact_n else None,
        "same_order": round(same / len(tasks), 4) if tasks else None,
        "served_by_inheritance": inherited,
    }


def process_memory_mb(pid: int) -> dict[str, float]:
    """VmRSS (resident now), RssAnon (the heap: what no page cache can give back), RssFile (mapped
    files, shared with the page cache) and VmHWM (the peak) of a process, in MB."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[name] = round(int(value.split()[0]) / 1024, 1)
    return out


@contextlib.contextmanager
def redis_up(data_dir: Path) -> Iterator[str]:
    """The embedded Redis of ``data_dir`` for the time of the block (a large AOF can outlast the
    start timeout: the replay goes on in the server, so wait for it)."""
    server = EmbeddedRedis(data_dir)
    try:
        url = server.acquire()
    except TransientError:
        deadline = time.monotonic() + 900
        while not server.running():
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # nothing to wait on but the server's own replay
        url = server.acquire()
    try:
        yield url
    finally:
        server.release()


Drive = Callable[[str, int, list[Task], int], dict[str, Any]]


def service_point(
    settings: Settings,
    tasks: list[Task],
    warmup: int,
    tokens: dict[str, str],
    drive: Drive,
    overrides: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """`evomem serve` on the loaded store (its replica and its cursor in Redis as the load left
    them): start-up until it listens, ``tasks`` at concurrency 1 (``drive``: the load generator),
    its memory after; then the copy ``serve --workers 2`` makes for its second process."""
    data_dir = settings.data_dir
    with redis_up(data_dir) as url:
        env = common.child_env(overrides)  # bench.http --set
        env.update(
            EVOMEM_DATA_DIR=str(data_dir),
            EVOMEM_REDIS_URL=url,
            EVOMEM_HTTP_PORT="0",
            EVOMEM_TOKENS=";".join(f"{tok}={ns}" for ns, tok in tokens.items()),
        )
        t0 = time.perf_counter()
        with service_process(["-m", "evomem.cli", "serve"], env) as service:
            start_s = time.perf_counter() - t0
            memory_started = process_memory_mb(service.proc.pid)
            cache = wait_warm(service.host, service.port)
            warm_s = time.perf_counter() - t0 - start_s
            memory_warm = process_memory_mb(service.proc.pid)
            raw = drive(service.host, service.port, tasks, warmup)
            memory = process_memory_mb(service.proc.pid)
        replicas = prepare_replicas(settings.model_copy(update={"redis_url": url}), 2)
    return {
        "start_s": round(start_s, 3),
        **common.summarise(raw["latencies_ns"]),
        "requests": len(raw["latencies_ns"]),
        "errors": sum(n for st, n in raw["statuses"].items() if int(st) != 200),
        "memory_mb_started": memory_started,
        # the word-set cache warmed in the background after it listens (EVOMEM_TEXT_CACHE_WARM);
        # the requests are sent once it has: waited for ``warm_wait_s``
        "warm_wait_s": round(warm_s, 3),
        "text_cache": cache,
        "memory_mb_warm": memory_warm,
        "memory_mb": memory,
        "replica_copy_s": replicas.get("copy_s"),
        "replica_first_open_s": replicas.get("first_catch_up_s"),
        "store_mb": round(_size(data_dir / "qdrant") / 2**20, 1),
    }


def wait_warm(host: str, port: int, timeout_s: float = 1800) -> dict[str, Any]:
    """Poll ``/healthz`` until the service's word-set cache is no longer warming; its last state. A
    503 while it warms (a Redis call that waited past its bound while the warm-up held the GIL
    marks Redis suspect until a ping answers) is asked again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=30) as r:
                cache: dict[str, Any] = json.loads(r.read()).get("text_cache") or {}
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        if not cache.get("warming") or time.monotonic() > deadline:
            return cache
        time.sleep(0.5)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


__all__ = ["exact_recall", "process_memory_mb", "redis_up", "service_point", "wait_warm"]
