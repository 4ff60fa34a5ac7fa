"""What a dense embedder costs the pipeline: ``python -m bench.embed_cost``.

Per embedder, on the embedded stack in one process (the retrieval side, its projector and an
in-process consolidation, as ``Memory.open`` runs them):

- **consolidation rate** of events that carry a retrieval id (the task's vector was computed at
  retrieval and travels with the retrieval record to the query node, so no projector embeds it
  again: only the new insight texts are embedded, as passages, in one batch) and, beside it, of
  events that carry none (their task is embedded when it reaches the index): the worker's rate
  (it embeds nothing), then the projection's, with the texts it embedded per event;
- **another index replica** (its own store, embedder and cache, as a second retrieval process has)
  projecting those events: the tasks it wrote with their carried vector, the texts it embedded;
- **retrieve p50 at ``--past`` past queries** against the embedder's own p50 for one new text, and
  the p50 of each stage of the retrieval;
- **start-up**: opening the memory (the model loaded) and the first retrieval.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_OUT, embedded_settings, machine_info, merge_results, summarise
from evomem import Memory
from evomem.core.embedding import CachedEmbedder
from evomem.pipeline.project import Projector
from evomem.runtime import make_embedder, open_index, open_worker, resolve_embedder
from evomem.timings import recording

KEY = "embed_cost"
SUBJECTS = ["invoice", "password", "shipment", "refund", "contract", "license", "server", "garden"]
VERBS = ["renew", "cancel", "track", "reset", "sign", "audit", "restart", "water", "export", "merge"]


def task(n: int) -> str:
    return (
        f"{VERBS[n % len(VERBS)]} the {SUBJECTS[(n // len(VERBS)) % len(SUBJECTS)]} number {n} "
        f"for customer {n * 7919 % 10007}"
    )


def consolidation_rate(
    mem: Memory, namespace: str, n: int, with_retrieval: bool, start: int
) -> tuple[float, float, float]:
    for i in range(start, start + n):
        if with_retrieval:
            r = mem.retrieve(task(i), namespace)
            mem.report(r, status="resolved", proposed_insight=f"lesson {i}: {task(i)} with the form")
        else:
            mem.report(
                namespace=namespace,
                query=task(i),
                status="resolved",
                proposed_insight=f"lesson {i}: {task(i)} by hand",
            )
    # the consolidation worker as `evomem worker` runs it (open_worker: no index, no embedder) ...
    worker = open_worker(mem.settings, client=mem.runtime.redis, consumer="bench-worker")
    t0 = time.perf_counter()
    applied = 0
    while applied < n:
        applied += worker.run_batch(block_ms=0).applied
    worked = time.perf_counter() - t0
    # ... then the retrieval side's projector brings the index up to date (it embeds what is new)
    projector = mem.runtime.projector
    assert projector is not None
    embedded = projector.embedded
    t1 = time.perf_counter()
    mem.consolidate()
    projected = time.perf_counter() - t1
    return n / worked, n / projected, (projector.embedded - embedded) / n


def replica_projection(mem: Memory, root: Path, events: int) -> dict[str, Any]:
    """Another retrieval process's index replica, built from the change feed with its own embedder
    (an empty cache): the tasks that came with their vector are not embedded."""
    settings = mem.settings.model_copy(update={"index_dir": root / "replica"})
    index = open_index(settings)
    try:
        projector = Projector(mem.runtime.graph, index, make_embedder(settings))
        t0 = time.perf_counter()
        projector.run_once()
        took = time.perf_counter() - t0
    finally:
        index.close()
    return {
        "events": events,
        "events_per_s": round(events / took, 1),
        "queries_with_carried_vector": projector.carried,
        "texts_embedded": projector.embedded,
    }


def run(embedder: str, root: Path, events: int, past: int) -> dict[str, Any]:
    settings = embedded_settings(root / embedder, embedder=embedder)
    t0 = time.perf_counter()
    with Memory.open_local(settings) as mem:
        opened = time.perf_counter() - t0
        t1 = time.perf_counter()
        mem.retrieve("a first task", "warm")
        first = time.perf_counter() - t1
        name = resolve_embedder(settings)
        emb = mem.runtime.embedder
        before = emb.stats() if isinstance(emb, CachedEmbedder) else None
        with_id = consolidation_rate(mem, "a", events, True, 0)
        after = emb.stats() if isinstance(emb, CachedEmbedder) else None
        without_id = consolidation_rate(mem, "b", events, False, 10_000)
        replica = replica_projection(mem, root / f"{embedder}-replica", 2 * events)
        # past queries, reported without retrieval (cheaper to seed), then retrievals of new tasks
        for i in range(0, past, 500):
            for j in range(i, min(i + 500, past)):
                mem.report(namespace="c", query=task(20_000 + j), status="resolved")
            mem.consolidate()
        lat = []
        stages: dict[str, list[int]] = {}
        for i in range(200):
            q = task(50_000 + i)
            into: dict[str, int] = {}
            t = time.perf_counter_ns()
            with recording(into):
                mem.retrieve(q, "c")
            lat.append(time.perf_counter_ns() - t)
            for k, v in into.items():
                stages.setdefault(k, []).append(v)
        again = []
        for i in range(50):  # tasks asked before: their vectors are kept (a dense embedder's cache)
            q = task(50_000 + i)
            t = time.perf_counter_ns()
            mem.retrieve(q, "c")
            again.append(time.perf_counter_ns() - t)
        inner: Any = emb.inner if isinstance(emb, CachedEmbedder) else emb
        one = []
        for i in range(100):
            t = time.perf_counter_ns()
            inner.embed([task(90_000 + i)])
            one.append(time.perf_counter_ns() - t)
    out: dict[str, Any] = {
        "embedder": name,
        "worker_events_per_s_with_retrieval_id": round(with_id[0], 1),
        "worker_events_per_s_without_retrieval_id": round(without_id[0], 1),
        "projected_events_per_s_with_retrieval_id": round(with_id[1], 1),
        "projected_events_per_s_without_retrieval_id": round(without_id[1], 1),
        "projected_texts_embedded_per_event_with_retrieval_id": round(with_id[2], 2),
        "projected_texts_embedded_per_event_without_retrieval_id": round(without_id[2], 2),
        "replica": replica,
        "past_queries": past,
        "retrieve": summarise(lat),
        "retrieve_stages_p50_ms": {k: round(statistics.median(v) / 1e6, 3) for k, v in stages.items()},
        # per retrieval, what it cost beyond embedding the task (the same requests' embed stage)
        "retrieve_beyond_embed_p50_ms": round(
            statistics.median(t - e for t, e in zip(lat, stages.get("embed", [0] * len(lat)), strict=True))
            / 1e6,
            3,
        ),
        "retrieve_asked_again": summarise(again),
        "embed_one_text": summarise(one),
        "open_s": round(opened, 3),
        "first_retrieve_s": round(first, 3),
    }
    if before is not None and after is not None:
        # the retrievals embedded each task once (a miss); consolidating them embedded no task again
        out["cache_during_retrieve_and_consolidate"] = {k: after[k] - before[k] for k in ("hits", "misses")}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.embed_cost", description=__doc__)
    ap.add_argument("--events", type=int, default=400)
    ap.add_argument("--past", type=int, default=10_000)
    ap.add_argument("--embedders", default="hashing,auto")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 40 events, 200 past queries")
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.past = 40, 200
    results = {}
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="evomem-embed-cost-") as tmp:
        for e in args.embedders.split(","):
            r = results[e] = run(e, Path(tmp), args.events, args.past)
            print(
                f"{e:>8} ({r['embedder']}): worker {r['worker_events_per_s_with_retrieval_id']} events/s "
                f"with a retrieval id, {r['worker_events_per_s_without_retrieval_id']} without; projected "
                f"{r['projected_events_per_s_with_retrieval_id']} / "
                f"{r['projected_events_per_s_without_retrieval_id']} events/s; retrieve p50 "
                f"{r['retrieve']['p50_ms']} ms at {args.past} past queries, the embedder's one text p50 "
                f"{r['embed_one_text']['p50_ms']} ms; open {r['open_s']} s, first retrieve "
                f"{r['first_retrieve_s']} s; projected texts embedded per event "
                f"{r['projected_texts_embedded_per_event_with_retrieval_id']} with an id, "
                f"{r['projected_texts_embedded_per_event_without_retrieval_id']} without; another replica "
                f"{r['replica']}; retrieve stages p50 {r['retrieve_stages_p50_ms']}, beyond the embed stage "
                f"p50 {r['retrieve_beyond_embed_p50_ms']} ms; asked again p50 "
                f"{r['retrieve_asked_again']['p50_ms']} ms; load average {os.getloadavg()[0]:.1f}"
                + (
                    f"; cache {r['cache_during_retrieve_and_consolidate']}"
                    if "cache_during_retrieve_and_consolidate" in r
                    else ""
                ),
                flush=True,
            )
    if not args.no_save:
        merge_results(
            args.out,
            KEY,
            {"command": "python -m bench.embed_cost", "machine": machine_info(), "results": results},
        )


if __name__ == "__main__":
    main()
