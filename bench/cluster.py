"""What a Redis Cluster costs against one server, measured in one run: ``report()`` latency,
in-process consolidation throughput and ``retrieve()`` latency on the embedded Redis (a unix
socket), on one redis-server over loopback TCP (the fair baseline of a cluster), on a local
cluster of three masters and three replicas (loopback TCP), and on that cluster with
``REDIS_WAIT_REPLICAS=1``. The same events in the same order on each.

Figures are printed and merged into ``bench/results.json`` under ``"cluster"``. On a shared 2-core
machine the six cluster nodes compete with the benchmark for the cores: compare the rows of one
run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_OUT, machine_info, merge_results, summarise
from evomem import Memory, Settings
from evomem.adapters.redis.local_cluster import SERVER, LocalCluster, free_ports, wait_until
from evomem.runtime import connect_redis
from schemas import TaskEvent

NAMESPACES = [f"team-{i}" for i in range(8)]


def _events(rng: random.Random, n: int) -> list[TaskEvent]:
    """New lessons in several namespaces, then tasks that resemble them (retrievals find them)."""
    return [
        TaskEvent(
            namespace=NAMESPACES[i % len(NAMESPACES)],
            query=f"task {i}: verify claim {rng.randint(0, 10**6)} about entity {rng.randint(0, 50)}",
            status=rng.choice(["resolved", "failed"]),
            proposed_insight=f"Lesson {uuid.UUID(int=rng.getrandbits(128))}." if rng.random() < 0.3 else None,
        )
        for i in range(n)
    ]


def run(name: str, settings: Settings, events: list[TaskEvent], queries: int) -> dict[str, Any]:
    with Memory.open(settings) as mem:
        report_ns = []
        for e in events:
            t0 = time.perf_counter_ns()
            mem.report(e)
            report_ns.append(time.perf_counter_ns() - t0)
        started = time.perf_counter()
        done = mem.consolidate()
        consolidate_s = time.perf_counter() - started
        retrieve_ns = []
        for i in range(queries):
            ns = NAMESPACES[i % len(NAMESPACES)]
            t1 = time.perf_counter_ns()
            mem.retrieve(f"verify claim about entity {i % 50}", ns)
            retrieve_ns.append(time.perf_counter_ns() - t1)
    row: dict[str, Any] = {
        "report": summarise(report_ns),
        "consolidate_events_per_s": round(done.applied / consolidate_s, 1),
        "applied": done.applied,
        "retrieve": summarise(retrieve_ns),
    }
    print(
        f"{name:<24} report p50 {row['report']['p50_ms']:.3f} ms p99 {row['report']['p99_ms']:.3f} ms | "
        f"consolidate {row['consolidate_events_per_s']:.0f} events/s | "
        f"retrieve p50 {row['retrieve']['p50_ms']:.3f} ms",
        file=sys.stderr,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=3000)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.events, args.queries = min(args.events, 200), min(args.queries, 50)
    load_start = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure
    events = _events(random.Random(7), args.events)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows["one_server"] = run(
            "one server (embedded)", Settings(data_dir=root / "one", embedder="hashing"), events, args.queries
        )
        (port,) = free_ports(1)
        (root / "tcp").mkdir()
        server = subprocess.Popen(
            [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root / "tcp"),
             "--appendonly", "yes", "--save", ""],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            tcp = f"redis://127.0.0.1:{port}"
            wait_until(lambda: bool(connect_redis(Settings(redis_url=tcp)).ping()), 30, "redis-server")
            rows["one_server_tcp"] = run(
                "one server (TCP)",
                Settings(data_dir=root / "t", redis_url=tcp, embedder="hashing"),
                events,
                args.queries,
            )
        finally:
            server.terminate()
            server.wait()
        cluster = LocalCluster(root / "cluster").start()
        try:
            url = cluster.url
            rows["cluster"] = run(
                "cluster (3+3)",
                Settings(data_dir=root / "c", redis_url=url, embedder="hashing"),
                events,
                args.queries,
            )
            flushed = connect_redis(Settings(redis_url=url))  # the same events again: not replays
            flushed.flushdb()
            flushed.close()
            rows["cluster_wait_1"] = run(
                "cluster, WAIT 1 replica",
                Settings(data_dir=root / "w", redis_url=url, redis_wait_replicas=1, embedder="hashing"),
                events,
                args.queries,
            )
        finally:
            cluster.stop()
    one = rows["one_server_tcp"]
    for key in ("cluster", "cluster_wait_1"):
        rows[key]["vs_one_server_tcp"] = {
            "report_p50": round(rows[key]["report"]["p50_ms"] / one["report"]["p50_ms"], 2),
            "consolidate_throughput": round(
                rows[key]["consolidate_events_per_s"] / one["consolidate_events_per_s"], 2
            ),
            "retrieve_p50": round(rows[key]["retrieve"]["p50_ms"] / one["retrieve"]["p50_ms"], 2),
        }
    options = {k: v for k, v in vars(args).items() if k != "out"}
    merge_results(
        args.out,
        "cluster",
        {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "command": "make bench-cluster",
            "options": options,
            "machine": machine_info(),
            "load_average_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
            "note": "one run on a shared 2-core machine, the cluster's six nodes included; compare within it",
            **rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
