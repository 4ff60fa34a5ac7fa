"""Pipeline benchmarks: consolidation throughput with the rule controller for 1, 2 and 4 worker
processes, report() latency, and report-to-served latency (publish → worker → projector → served).

Runs on its own embedded Redis under a temporary directory, with real ``evomem worker`` processes.
Figures are printed and merged into ``bench/results.json`` under the key ``"pipeline"``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine_info, merge_results
from evomem import Memory, keys
from evomem.adapters.redis.connection import Client, EmbeddedRedis, connect
from evomem.adapters.redis.graph import RedisGraphStore
from evomem.core.editing import added_insight_id
from evomem.runtime import open_worker
from evomem.settings import Settings
from schemas import TaskEvent

RESULTS = Path("bench/results.json")
WORKER_ENV = {"EVOMEM_PUMP_INTERVAL_S": "0.05", "EVOMEM_BATCH_WAIT_MS": "50", "EVOMEM_EMBEDDER": "hashing"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=20_000, help="events per throughput run")
    p.add_argument("--processes", default="1,2,4", help="worker process counts to measure")
    p.add_argument("--reports", type=int, default=2_000, help="report() calls timed")
    p.add_argument("--served", type=int, default=200, help="report-to-served round trips timed")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")


def _events(rng: random.Random, namespace: str, hot: list[str], n: int) -> list[TaskEvent]:
    """What a fleet reports: verdicts on a few hot insights, sometimes a new lesson."""
    out = []
    for i in range(n):
        named = rng.sample(hot, min(len(hot), rng.randint(1, 3)))
        proposed = f"Lesson {uuid.UUID(int=rng.getrandbits(128))}." if rng.random() < 0.1 else None
        out.append(
            TaskEvent(
                namespace=namespace,
                query=f"task {i}: verify claim {rng.randint(0, 10**6)}",
                status=rng.choice(["resolved", "failed"]),
                proposed_insight=proposed,
                insight_feedback={h: rng.choice(["helpful", "helpful", "harmful"]) for h in named},
            )
        )
    return out


def _publish(client: Client, events: list[TaskEvent]) -> None:
    pipe = client.pipeline(transaction=False)
    for e in events:
        pipe.xadd(keys.EVENTS_STREAM, {"event": e.model_dump_json()})
    pipe.execute()


def _applied(client: Client, namespace: str = "bench") -> int:
    """Events applied in ``namespace``: their markers (``keys.applied``) counted."""
    return sum(1 for _ in client.scan_iter(match=keys.applied(namespace, "*"), count=5000))


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    if not ordered:
        return {"n": 0}

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50_ms": round(pick(0.50), 3),
        "p99_ms": round(pick(0.99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "n": len(ordered),
    }


class _Workers:
    def __init__(self, url: str, logs: Path) -> None:
        self.env = {**os.environ, **WORKER_ENV, "EVOMEM_REDIS_URL": url}
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, n: int) -> None:
        for i in range(n):
            with open(self.logs / f"worker-{len(self.procs)}-{i}.log", "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "evomem.cli", "worker", "-c", "1"],
                        env=self.env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.procs.clear()


def _throughput(
    url: str, client: Client, workdir: Path, processes: int, n: int, hot: list[str], seed: int
) -> dict[str, Any]:
    workers = _Workers(url, workdir)
    workers.start(processes)
    try:
        before = _applied(client)
        _publish(client, _events(random.Random(seed), "bench", hot, processes))  # warm-up: workers are up
        if not _wait(lambda: _applied(client) >= before + processes, 120):
            # the work directory goes with the run: the logs' ends are the error's
            tails = "\n".join(
                p.read_text(errors="replace")[-2000:] for p in sorted(workdir.glob("worker-*.log"))
            )
            raise RuntimeError(f"workers did not start; their logs end with:\n{tails}")
        events = _events(random.Random(seed + 1), "bench", hot, n)
        start_count = _applied(client)
        started = time.perf_counter()
        _publish(client, events)
        if not _wait(lambda: _applied(client) >= start_count + n, 600):
            raise RuntimeError("consolidation did not finish")
        elapsed = time.perf_counter() - started
    finally:
        workers.stop()
    rate = n / elapsed
    return {
        "processes": processes,
        "events": n,
        "seconds": round(elapsed, 3),
        "events_per_s": round(rate, 1),
        "events_per_s_per_process": round(rate / processes, 1),
    }


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.events, args.reports, args.served, args.processes = 300, 200, 20, "1,2"
    counts = [int(x) for x in args.processes.split(",") if x.strip()]
    out: dict[str, Any] = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(["python -m bench.pipeline", *sys.argv[1:]]),
        "machine": machine_info(),
        "cores": os.cpu_count(),
        "quick": bool(args.quick),
    }
    with tempfile.TemporaryDirectory(prefix="evomem-bench-") as tmp:
        workdir = Path(tmp)
        server = EmbeddedRedis(workdir / "data")
        url = server.ensure()
        settings = Settings(data_dir=workdir / "data", redis_url=url, embedder="hashing")
        client = connect(url)
        try:
            worker = open_worker(settings, client)
            _publish(
                client,
                [
                    TaskEvent(
                        namespace="bench",
                        query=f"seed {i}",
                        status="resolved",
                        proposed_insight=f"Hot insight {i}.",
                    )
                    for i in range(10)
                ],
            )
            worker.drain(60)
            hot = sorted(RedisGraphStore(client).insight_ids("bench"))

            # one consumer in this process, no Celery: what the library does per process
            events = _events(random.Random(1), "bench", hot, args.events)
            _publish(client, events)
            started = time.perf_counter()
            report = worker.drain(600, block_ms=0)
            elapsed = time.perf_counter() - started
            out["in_process"] = {
                "events": report.events,
                "seconds": round(elapsed, 3),
                "events_per_s": round(report.events / elapsed, 1),
            }
            print(
                f"in-process consumer      {out['in_process']['events_per_s']:>9.0f} events/s "
                f"({report.events} events)",
                flush=True,
            )

            out["throughput"] = []
            for n, k in enumerate(counts):
                row = _throughput(url, client, workdir, k, args.events, hot, seed=10 + n)
                out["throughput"].append(row)
                print(
                    f"{k} worker process(es)     {row['events_per_s']:>9.0f} events/s "
                    f"({row['events_per_s_per_process']:.0f} per process)",
                    flush=True,
                )
            worker.close()

            out["report"], out["report_to_served"] = _latencies(
                settings, url, workdir, args.reports, args.served
            )
            print(
                f"report()                 p50 {out['report']['p50_ms']:.3f} ms, "
                f"p99 {out['report']['p99_ms']:.3f} ms"
            )
            rs = out["report_to_served"]
            print(f"not served within 10 s: {rs.get('not_served_within_10s', 0)}")
            print(
                f"report → served          p50 {rs.get('p50_ms', float('nan')):.1f} ms, "
                f"p99 {rs.get('p99_ms', float('nan')):.1f} ms "
                f"(2 worker processes, projector following)"
            )
        finally:
            server.stop()
    merge_results(args.out, "pipeline", out)
    print(f'written to {args.out} under "pipeline"')
    return 0


def _latencies(
    settings: Settings, url: str, workdir: Path, reports: int, served: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    workers = _Workers(url, workdir)
    workers.start(2)
    try:
        with Memory.open_local(settings) as mem:
            mem.follow()
            samples = []
            for i in range(reports):
                t = time.perf_counter_ns()
                mem.report(None, namespace="latency", query=f"timing task {i}", status="resolved")
                samples.append((time.perf_counter_ns() - t) / 1e6)
            report_stats = _percentiles(samples)
            assert mem.index is not None
            index = mem.index
            _wait(lambda: mem.stream.info()["lag"] == 0 and mem.stream.info()["pending"] == 0, 300)
            projector = mem.projector
            assert projector is not None
            _wait(lambda: projector.lag() == 0, 600)  # a fresh index first catches up with the whole feed
            samples = []
            misses = 0
            for i in range(served):
                event = TaskEvent(
                    namespace="served",
                    query=f"Verify claim number {i} about trucks",
                    status="resolved",
                    proposed_insight=f"Served lesson {i} {uuid.uuid4()}.",
                )
                expected = added_insight_id(event.namespace, str(event.event_id))
                t = time.perf_counter_ns()
                mem.report(event)
                if not _wait(lambda e=expected: bool(index.versions("insight", "served", [e])), 30):  # type: ignore[misc]
                    raise RuntimeError("an event was never projected")

                def served_now(e: str = expected, q: str = event.query) -> bool:
                    return e in {
                        x.id
                        for x in mem.retrieve(
                            q,
                            "served",
                            budget=100,
                        ).insights
                    }

                if not _wait(served_now, 10):  # the query node may land in its shard a moment later
                    misses += 1  # projected but not served: counted, reported, not hidden
                    continue
                samples.append((time.perf_counter_ns() - t) / 1e6)
            return report_stats, {**_percentiles(samples), "not_served_within_10s": misses}
    finally:
        workers.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
