"""The growth benchmark: does the cost of a task stay flat as the memory learns?

A memory built the way a fleet builds it, in one process through the public SDK on the embedded
stack: per task ``retrieve()``, then ``report()`` with the outcome, sometimes explicit verdicts and
sometimes a proposed insight; ``consolidate()`` every 200 tasks; 10 tenants; the rule controller;
the hashing embedder (bench/world.py). At each checkpoint: tasks/s and ms/task per phase, tasks/s
over the first and the last 5,000 tasks, resident memory of this process and of redis-server,
retrieve p50/p99 over a separate sample. Then the hot insight (bench/hot.py). The figures are
merged under "growth" in bench/results.json; bench/README.md explains them.

    python -m bench.growth [--tasks 10000,100000] [--hot-evidence 100000] [--hot-reps 30] ...
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from bench import hot
from bench.common import embedded_settings, machine_info, merge_results, summarise
from bench.probes import Progress, ProjectionTimer, cpu_s, redis_pid, redis_used_memory_mb, rss_mb
from bench.report import checks, format_table, profile_summary
from bench.world import Agent, Task, World
from evomem import ConsolidationReport, Memory, Settings
from evomem.timings import recording

RESULTS_KEY = "growth"
RESULTS_SCHEMA = 1
DEFAULT_TASKS = (10_000, 100_000)
DEFAULT_OUT = Path("bench/results.json")
PHASES = ("retrieve", "report", "consolidate", "project", "apply", "other")
PAIR_BLOCK = 50  # sample tasks in a row on one memory in the paired retrieve measurement
_EVENTS = uuid.UUID("9a3f6c1e-2b7d-4e58-8c0a-6d1f4b2e9c73")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Cumulative clocks after ``tasks`` tasks; a window is the difference of two snapshots."""

    tasks: int
    wall_s: float  # build time, pauses for measurement excluded
    retrieve_s: float
    report_s: float
    consolidate_s: float
    project_s: float
    cpu_s: float  # this process's CPU time, all threads, pauses excluded
    redis_cpu_s: float | None  # redis-server's, pauses excluded


class Build:
    """The fleet's loop over one memory: tasks, reports, consolidation every ``every`` tasks."""

    def __init__(
        self, mem: Memory, world: World, agent: Agent, *, seed: int, every: int, window: int
    ) -> None:
        self.mem, self.world, self.agent, self.seed, self.every = mem, world, agent, seed, every
        self.projection = ProjectionTimer(mem)
        self.done = 0
        self.retrieve_ns = self.report_ns = self.consolidate_ns = 0
        self.redis_pid = redis_pid(mem)
        self.redis_cpu_offset = 0.0  # the CPU of the servers closed by ``keep_copy``
        self.paused_s = self.paused_cpu_s = self.paused_redis_cpu_s = 0.0
        self.started = time.perf_counter()
        self.recent_retrieve_ns: deque[int] = deque(maxlen=window)
        self.served = 0
        self.consolidation = ConsolidationReport()
        self.snapshots: dict[int, Snapshot] = {0: self.snapshot()}

    def wall_s(self) -> float:
        return time.perf_counter() - self.started - self.paused_s

    def _redis_cpu_s(self) -> float | None:
        if self.redis_pid is None or (used := cpu_s(self.redis_pid)) is None:
            return None
        return used + self.redis_cpu_offset

    def keep_copy(self, settings: Settings, to: Path) -> None:
        """Close the memory, copy its stores to ``to`` and open it again: the memory as it is now,
        for the paired measurement at the end (``paired_retrieval``). Run it inside ``paused()``.
        The clocks carry over: the projection timer's total and redis-server's CPU time (the server
        is a new process after the reopening)."""
        redis_before = self._redis_cpu_s()
        projected_ns, projections = self.projection.ns, self.projection.calls
        self.mem.close()
        shutil.copytree(settings.data_dir, to)
        mem = Memory.open(settings)
        assert isinstance(mem, Memory)
        self.mem = mem
        self.projection = ProjectionTimer(mem)
        self.projection.ns, self.projection.calls = projected_ns, projections
        self.redis_pid = redis_pid(mem)
        after = cpu_s(self.redis_pid) if self.redis_pid is not None else None
        if redis_before is not None and after is not None:
            self.redis_cpu_offset = redis_before - after

    def snapshot(self) -> Snapshot:
        redis_cpu = self._redis_cpu_s()
        return Snapshot(
            self.done,
            self.wall_s(),
            self.retrieve_ns / 1e9,
            self.report_ns / 1e9,
            self.consolidate_ns / 1e9,
            self.projection.ns / 1e9,
            time.process_time() - self.paused_cpu_s,
            None if redis_cpu is None else redis_cpu - self.paused_redis_cpu_s,
        )

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave what happens inside (the checkpoint's own measurements) out of every clock."""
        wall, cpu, redis_cpu = time.perf_counter(), time.process_time(), self._redis_cpu_s()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - wall
            self.paused_cpu_s += time.process_time() - cpu
            redis_after = self._redis_cpu_s()
            if redis_cpu is not None and redis_after is not None:
                self.paused_redis_cpu_s += redis_after - redis_cpu

    def task(self) -> None:
        task = self.world.task()
        tenant = self.world.tenants[task.tenant]
        clock = time.perf_counter_ns
        t0 = clock()
        retrieval = self.mem.retrieve(task.text, task.namespace)
        t1 = clock()
        self.served += len(retrieval.insights)
        outcome = self.agent.outcome(tenant, task, [(i.id, i.text) for i in retrieval.insights])
        n = self.done + 1
        t2 = clock()
        self.mem.report(
            retrieval,
            status="resolved" if outcome.resolved else "failed",
            event_id=str(uuid.uuid5(_EVENTS, f"{self.seed}:{n}")),
            agent_id=f"agent-{n % 64:02d}",
            trajectory=[
                f"read: {task.text}",
                f"used {len(retrieval.insights)} insight(s) from memory",
                "answered" if outcome.resolved else "answered wrongly",
            ],
            final_answer="done" if outcome.resolved else "wrong",
            insight_feedback=outcome.verdicts or None,
            proposed_insight=outcome.proposal,
        )
        t3 = clock()
        self.retrieve_ns += t1 - t0
        self.report_ns += t3 - t2
        self.recent_retrieve_ns.append(t1 - t0)
        self.done = n

    def consolidate(self) -> None:
        t0 = time.perf_counter_ns()
        report = self.mem.consolidate()
        self.consolidate_ns += time.perf_counter_ns() - t0
        self.consolidation.merge(report)


def window(a: Snapshot, b: Snapshot, projection_known: bool) -> dict[str, Any]:
    """Tasks/s over tasks a.tasks+1 .. b.tasks, and what each phase cost per task in between.
    ``apply`` is consolidation without projection (read events, decide, Lua); ``other`` is the
    benchmark's own work (the task generator, the simulated agent) and bookkeeping."""
    tasks = b.tasks - a.tasks
    seconds = b.wall_s - a.wall_s
    phase_s = {
        "retrieve": b.retrieve_s - a.retrieve_s,
        "report": b.report_s - a.report_s,
        "consolidate": b.consolidate_s - a.consolidate_s,
        "project": b.project_s - a.project_s,
    }
    phase_s["apply"] = phase_s["consolidate"] - phase_s["project"]
    phase_s["other"] = seconds - phase_s["retrieve"] - phase_s["report"] - phase_s["consolidate"]
    ms = {k: round(1000 * v / tasks, 4) if tasks else None for k, v in phase_s.items()}
    if not projection_known:
        ms["project"] = ms["apply"] = None
    cpu = {"python": b.cpu_s - a.cpu_s}
    if a.redis_cpu_s is not None and b.redis_cpu_s is not None:
        cpu["redis"] = b.redis_cpu_s - a.redis_cpu_s
    cpu_ms = {k: round(1000 * v / tasks, 4) if tasks else None for k, v in cpu.items()}
    cpu_total = sum(cpu.values())
    return {
        "from_task": a.tasks + 1,
        "to_task": b.tasks,
        "tasks": tasks,
        "seconds": round(seconds, 3),
        "tasks_per_s": round(tasks / seconds, 2) if seconds > 0 else None,
        "ms_per_task": ms,
        # the rate the loop would reach if this phase were all it did
        "phase_tasks_per_s": {k: round(1000 / v, 1) if v else None for k, v in ms.items() if k != "other"},
        # CPU time per task of both processes: what a task costs, whatever else runs on the machine
        "cpu_ms_per_task": {**cpu_ms, "total": round(1000 * cpu_total / tasks, 4) if tasks else None},
        "cpu_tasks_per_s": round(tasks / cpu_total, 2) if cpu_total > 0 else None,
    }


def memory_facts(mem: Memory) -> dict[str, Any]:
    """Nodes and evidence, through the SDK (reads every insight: done after the RSS is taken)."""
    stats = mem.stats()["namespaces"]
    positive: list[int] = []
    negative_max = 0
    for ns in stats:
        for node in mem.insights(ns, "active"):
            positive.append(len(node.positive))
            negative_max = max(negative_max, len(node.negative))
    gc.collect()
    pos = np.asarray(positive or [0])
    return {
        "queries": sum(s["queries"] for s in stats.values()),
        "insights": sum(s["insights"] for s in stats.values()),
        "active": sum(s["active"] for s in stats.values()),
        "archived": sum(s["archived"] for s in stats.values()),
        "positive_p50_active": float(np.percentile(pos, 50)),
        "positive_p99_active": float(np.percentile(pos, 99)),
        "positive_max": int(pos.max()),
        "positive_total_active": int(pos.sum()),
        "insights_ge_1000_positive": int((pos >= 1000).sum()),
        "negative_max_active": negative_max,
    }


def checkpoint(build: Build, first_window: int, window_size: int, sample: Sequence[Task]) -> dict[str, Any]:
    mem = build.mem
    n = build.done
    snaps = build.snapshots
    known = build.projection.available and build.projection.calls > 0
    py = rss_mb()
    pid = redis_pid(mem)
    redis_rss = rss_mb(pid) if pid is not None else {}
    samples = []
    served = 0
    expanded = []
    stages: dict[str, int] = {}  # the retriever's own stage timings, summed over the sample
    for t in sample:
        t0 = time.perf_counter_ns()
        with recording(stages):
            r = mem.retriever.retrieve(t.text, t.namespace, record=False)
        samples.append(time.perf_counter_ns() - t0)
        served += len(r.insights)
        expanded.append(r.expanded)
    return {
        "tasks": n,
        "build_s": round(snaps[n].wall_s, 2),
        "cumulative": window(snaps[0], snaps[n], known),
        "first_window": window(snaps[0], snaps[first_window], known),
        "last_window": window(snaps[n - window_size], snaps[n], known),
        "retrieve_sample": {
            **summarise(samples),
            "n": len(samples),
            "served_mean": round(served / max(len(samples), 1), 2),
            # |Q̃|: the similar queries and their neighbours (Eq. 3-4)
            "expanded_mean": round(float(np.mean(expanded)), 1) if expanded else None,
            "expanded_p99": float(np.percentile(expanded, 99)) if expanded else None,
            # where a retrieval's time goes (evomem.timings), mean ms per retrieval
            "stages_mean_ms": {k: round(v / 1e6 / max(len(samples), 1), 4) for k, v in stages.items()},
        },
        "retrieve_in_build_last_window": summarise(list(build.recent_retrieve_ns)),
        "served_mean_in_build": round(build.served / max(n, 1), 3),
        "rss_mb": {
            "python": py["rss"],
            "python_peak": py["peak"],
            "python_anon": py["anon"],
            "python_file": py["file"],
            "redis": redis_rss.get("rss"),
        },
        "redis_used_memory_mb": redis_used_memory_mb(mem),
        "projection_timed": known,
        "consolidation": build.consolidation.as_dict(),
        "memory": memory_facts(mem),
    }


@dataclass
class Span:
    """Tasks ``[start, end)`` of the build, profiled apart (``--profile-windows``)."""

    name: str
    start: int
    end: int
    profiler: cProfile.Profile = field(default_factory=cProfile.Profile)


def window_spans(total: int, window: int, tasks: int) -> list[Span]:
    """The ``tasks`` right after the first throughput window and right before the last one: the
    profiles of the memory as it starts and as it ends, taken beside the timed windows (which stay
    unprofiled, so their rates are the plain build's)."""
    if tasks <= 0 or total < 2 * window + 2 * tasks:
        return []
    return [
        Span("after the first window", window, window + tasks),
        Span("before the last window", total - window - tasks, total - window),
    ]


def run_build(
    settings: Settings,
    checkpoints: list[int],
    args: argparse.Namespace,
    err: TextIO,
    profiler: cProfile.Profile | None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The build, with a checkpoint at each size, and the paired measurement of the first and last
    sizes (None without ``args.pair`` or with one checkpoint)."""
    total = checkpoints[-1]
    win = min(args.window, checkpoints[0])
    boundaries = {c - win for c in checkpoints} | {win, *checkpoints}
    mem = Memory.open(settings)
    assert isinstance(mem, Memory)  # settings.url is None: the memory itself, not a service client
    results = []
    paired = None
    # the memory of the first checkpoint, kept to be measured beside the last one's at the end
    first_copy = settings.data_dir.parent / f"{settings.data_dir.name}-at-{checkpoints[0]}"
    pair = args.pair and len(checkpoints) >= 2
    world = World(args.tenants, args.seed)
    sample = World(args.tenants, args.seed + 1_000).distinct_tasks(args.sample)
    build = Build(mem, world, Agent(args.seed), seed=args.seed, every=args.consolidate_every, window=win)
    spans = window_spans(total, win, args.profile_windows)
    try:
        bar = Progress(err, "build", total, not args.no_progress)
        if profiler:
            profiler.enable()
        while build.done < total:
            for span in spans:
                if build.done == span.start:
                    span.profiler.enable()
            build.task()
            n = build.done
            if n % args.consolidate_every == 0 or n in checkpoints:
                build.consolidate()
            for span in spans:
                if n == span.end:
                    span.profiler.disable()
            if n in boundaries or n % args.consolidate_every == 0:
                build.snapshots[n] = build.snapshot()
            bar.update(n)
            if n in checkpoints:
                if profiler:
                    profiler.disable()
                bar.close()
                with build.paused():
                    results.append(checkpoint(build, win, win, sample))
                    report_checkpoint(results[-1], err)
                    if pair and n == checkpoints[0]:
                        shutil.rmtree(first_copy, ignore_errors=True)
                        build.keep_copy(settings, first_copy)
                    elif pair and n == total:
                        small = settings.model_copy(update={"data_dir": first_copy})
                        empty = settings.model_copy(update={"data_dir": first_copy.with_name("empty")})
                        paired = {
                            "retrieve": paired_retrieval(
                                (checkpoints[0], small), (total, build.mem), sample, args.seed, err
                            ),
                            "throughput": paired_throughput(build, empty, args, win, err),
                        }
                if profiler and n < total:
                    profiler.enable()
    finally:
        build.mem.close()
        shutil.rmtree(first_copy, ignore_errors=True)
        shutil.rmtree(first_copy.with_name("empty"), ignore_errors=True)
    if spans:
        results[-1]["profiled_spans"] = []
        for sp in spans:
            text, table = profile_summary(sp.profiler, 40)
            results[-1]["profiled_spans"].append(
                {"name": sp.name, "tasks": [sp.start, sp.end], "top_cumulative": table}
            )
            err.write(f"\ncProfile of tasks {sp.start:,}-{sp.end:,} ({sp.name}):\n{text}")
    return results, paired


def paired_throughput(
    grown: Build, empty_settings: Settings, args: argparse.Namespace, window: int, err: TextIO
) -> dict[str, Any]:
    """The throughput of the first ``window`` tasks into an empty memory (the same world and seed
    as the build's first window) and of ``window`` more tasks on the grown memory, measured together:
    blocks of ``consolidate_every`` tasks and a consolidation, alternating between the two. The
    build's own first and last windows are minutes apart on a machine whose speed drifts."""
    shutil.rmtree(empty_settings.data_dir, ignore_errors=True)
    mem = Memory.open(empty_settings)
    assert isinstance(mem, Memory)
    world, agent = World(args.tenants, args.seed), Agent(args.seed)
    every = args.consolidate_every
    sides = {"empty": Build(mem, world, agent, seed=args.seed, every=every, window=window), "grown": grown}
    start = {name: b.done for name, b in sides.items()}
    wall = dict.fromkeys(sides, 0.0)
    cpu = dict.fromkeys(sides, 0.0)
    redis_cpu: dict[str, float | None] = dict.fromkeys(sides, 0.0)
    try:
        block = 0
        while sides["empty"].done < window:
            for name in ("empty", "grown") if block % 2 == 0 else ("grown", "empty"):
                b = sides[name]
                tasks = min(every, window - (b.done - start[name]))
                r0, c0, t0 = b._redis_cpu_s(), time.process_time(), time.perf_counter()
                for _ in range(tasks):
                    b.task()
                b.consolidate()
                wall[name] += time.perf_counter() - t0
                cpu[name] += time.process_time() - c0
                r1 = b._redis_cpu_s()
                used = redis_cpu[name]
                redis_cpu[name] = None if used is None or r0 is None or r1 is None else used + r1 - r0
            block += 1
    finally:
        mem.close()
        shutil.rmtree(empty_settings.data_dir, ignore_errors=True)
    per: dict[str, dict[str, Any]] = {}
    for name, b in sides.items():
        done = b.done - start[name]
        used = redis_cpu[name]
        total_cpu = cpu[name] + (used or 0.0)
        per[name] = {
            "from_task": start[name] + 1,
            "to_task": b.done,
            "seconds": round(wall[name], 3),
            "tasks_per_s": round(done / wall[name], 2),
            "cpu_ms_per_task": {
                "python": round(1000 * cpu[name] / done, 4),
                "redis": None if used is None else round(1000 * used / done, 4),
            },
            "cpu_tasks_per_s": round(done / total_cpu, 2) if total_cpu > 0 else None,
        }
    ratio = per["grown"]["tasks_per_s"] / per["empty"]["tasks_per_s"]
    cpu_rates = (per["grown"]["cpu_tasks_per_s"], per["empty"]["cpu_tasks_per_s"])
    err.write(
        f"  paired: {per['grown']['tasks_per_s']} tasks/s over tasks {per['grown']['from_task']:,}-"
        f"{per['grown']['to_task']:,} against {per['empty']['tasks_per_s']} over an empty memory's first "
        f"{window:,}, measured together: {ratio:.3f}\n"
    )
    return {
        "window": window,
        "block": every,
        **per,
        "ratio": round(ratio, 3),
        "cpu_ratio": round(cpu_rates[0] / cpu_rates[1], 3) if all(cpu_rates) else None,
    }


def paired_retrieval(
    earlier: tuple[int, Settings],
    current: tuple[int, Memory],
    sample: Sequence[Task],
    seed: int,
    err: TextIO,
    block: int = PAIR_BLOCK,
) -> dict[str, Any]:
    """Retrieve p50 of the memory as it was at an earlier checkpoint (reopened from its copy) and as
    it is now, measured together, after a pass on each to warm it. A checkpoint's own sample is
    taken when it is reached, minutes apart on a machine whose speed drifts; here both sizes meet
    the same moments. The sample goes in blocks of ``block`` tasks, each block on one memory and
    then on the other (which goes first drawn per block), so that each memory runs ``block``
    retrievals in a row with its own data in the caches. A second pass alternates the memories
    task by task, which evicts each one's data between its own retrievals: its ratio is printed
    beside (``per_task``), as a bound on what the order does to the figure."""
    (small_tasks, small_settings), (large_tasks, large) = earlier, current
    small = Memory.open(small_settings)
    assert isinstance(small, Memory)
    mems = {small_tasks: small, large_tasks: large}
    rng = random.Random(seed)

    def measure(step: int) -> tuple[dict[int, list[int]], dict[int, dict[str, int]]]:
        times: dict[int, list[int]] = {n: [] for n in mems}
        stages: dict[int, dict[str, int]] = {n: {} for n in mems}
        for i in range(0, len(sample), step):
            order = list(mems)
            rng.shuffle(order)
            for n in order:
                for t in sample[i : i + step]:
                    t0 = time.perf_counter_ns()
                    with recording(stages[n]):
                        mems[n].retriever.retrieve(t.text, t.namespace, record=False)
                    times[n].append(time.perf_counter_ns() - t0)
        return times, stages

    try:
        for m in mems.values():
            for t in sample:
                m.retriever.retrieve(t.text, t.namespace, record=False)
        times, stages = measure(max(block, 1))
        per_task, _ = measure(1)
    finally:
        small.close()
    per: dict[str, dict[str, Any]] = {
        str(n): {
            **summarise(times[n]),
            "n": len(times[n]),
            "stages_mean_ms": {k: round(v / 1e6 / max(len(sample), 1), 4) for k, v in stages[n].items()},
        }
        for n in mems
    }
    ratio = per[str(large_tasks)]["p50_ms"] / per[str(small_tasks)]["p50_ms"]
    alternating = {str(n): summarise(per_task[n])["p50_ms"] for n in mems}
    alt_ratio = alternating[str(large_tasks)] / alternating[str(small_tasks)]
    err.write(
        f"  paired: retrieve p50 {per[str(large_tasks)]['p50_ms']} ms at {large_tasks:,} tasks against "
        f"{per[str(small_tasks)]['p50_ms']} ms at {small_tasks:,}, measured together in blocks of "
        f"{block}: {ratio:.3f}x (alternating task by task: {alternating[str(large_tasks)]} against "
        f"{alternating[str(small_tasks)]} ms, {alt_ratio:.3f}x)\n"
    )
    return {
        "small_tasks": small_tasks,
        "large_tasks": large_tasks,
        "block": block,
        "by_tasks": per,
        "p50_ratio": round(ratio, 3),
        "per_task": {"p50_ms": alternating, "p50_ratio": round(alt_ratio, 3)},
    }


def report_checkpoint(c: dict[str, Any], err: TextIO) -> None:
    ms = c["last_window"]["ms_per_task"]
    err.write(
        f"  checkpoint {c['tasks']:,}: {c['last_window']['tasks_per_s']} tasks/s over the last "
        f"{c['last_window']['tasks']:,} (first {c['first_window']['tasks_per_s']}), retrieve "
        f"{ms['retrieve']} ms, consolidate {ms['consolidate']} ms a task; sample p50 "
        f"{c['retrieve_sample']['p50_ms']} ms (stages {c['retrieve_sample']['stages_mean_ms']}); "
        f"RSS {c['rss_mb']['python']} + {c['rss_mb']['redis']} MB\n"
    )
    err.flush()


# --------------------------------------------------------------------------------------------------
# Command line.


def _tasks(text: str) -> list[int]:
    try:
        sizes = sorted(
            {
                int(s.strip().lower().replace("_", "").replace("k", "000"))
                for s in text.split(",")
                if s.strip()
            }
        )
    except ValueError:
        raise SystemExit(f"--tasks: not a list of integers: {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise SystemExit("--tasks: each checkpoint must be a positive number of tasks")
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks",
        default=",".join(map(str, DEFAULT_TASKS)),
        help="checkpoints, in tasks, comma-separated; the build runs to the largest (default: %(default)s)",
    )
    parser.add_argument(
        "--hot-evidence",
        type=int,
        default=100_000,
        help="evidence ids of the hot insight; 0 skips that part (default: %(default)s)",
    )
    parser.add_argument(
        "--hot-reps", type=int, default=30, help="KEEP rounds per insight (default: %(default)s)"
    )
    parser.add_argument("--tenants", type=int, default=10, help="namespaces (default: %(default)s)")
    parser.add_argument(
        "--consolidate-every",
        type=int,
        default=200,
        help="tasks between consolidate() calls (default: %(default)s)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=5_000,
        help="tasks in the first/last throughput windows (default: %(default)s)",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=500,
        help="distinct retrievals timed at each checkpoint (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=7, help="world seed (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file (default: %(default)s)")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="where the stores go (default: a temporary directory)"
    )
    parser.add_argument(
        "--no-pair",
        dest="pair",
        action="store_false",
        help="do not keep the first checkpoint's memory to measure its retrieve p50 beside the last one's",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the build; print the top functions")
    parser.add_argument(
        "--profile-windows",
        type=int,
        default=0,
        metavar="TASKS",
        help="cProfile TASKS tasks right after the first window and right before the last one, apart "
        "(the timed windows stay unprofiled); stored with the last checkpoint (default: 0, off)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when an acceptance check fails"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: checkpoints 1,000 and 2,000, windows of 1,000, a 2,000-id hot insight, 10 rounds",
    )


def _command_line() -> str:
    return shlex.join(["python", "-m", "bench.growth", *sys.argv[1:]])


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if args.quick:
        args.tasks, args.window, args.sample = "1000,2000", min(args.window, 1_000), min(args.sample, 100)
        args.hot_evidence, args.hot_reps = min(args.hot_evidence, 2_000), min(args.hot_reps, 10)
    points_at = _tasks(args.tasks)
    if min(args.consolidate_every, args.window, args.sample, args.tenants) < 1 or args.hot_evidence < 0:
        raise SystemExit("--consolidate-every, --window, --sample and --tenants must be positive")
    machine = machine_info()
    started = datetime.now(UTC)
    out.write(
        f"growth: {points_at[-1]:,} tasks (checkpoints {', '.join(f'{n:,}' for n in points_at)}), "
        f"{args.tenants} tenants, consolidate every {args.consolidate_every}, rules controller, hashing "
        f"embedder; hot insight {args.hot_evidence:,} ids; {machine['cores']} cores, load "
        f"{machine['loadavg_at_start']}\n"
    )
    out.flush()
    root = Path(tempfile.mkdtemp(prefix="evomem-growth-")) if args.data_dir is None else args.data_dir
    if args.profile and args.profile_windows:
        raise SystemExit("--profile and --profile-windows cannot run together (one profiler at a time)")
    profiler = cProfile.Profile() if args.profile else None
    hot_doc = None
    try:
        data = root / "build"
        shutil.rmtree(data, ignore_errors=True)
        settings = embedded_settings(data, controller="rules", embedder="hashing")
        points, paired = run_build(settings, points_at, args, err, profiler)
        shutil.rmtree(data, ignore_errors=True)
        if args.hot_evidence:
            data = root / "hot"
            shutil.rmtree(data, ignore_errors=True)
            mem = Memory.open(embedded_settings(data, controller="rules", embedder="hashing"))
            assert isinstance(mem, Memory)
            try:
                hot_doc = hot.measure(
                    mem, args.hot_evidence, args.hot_reps, args.seed, not args.no_progress, err
                )
            finally:
                mem.close()
            shutil.rmtree(data, ignore_errors=True)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    check_list = checks(points, hot_doc, paired)
    defaults = Settings.model_fields
    doc: dict[str, Any] = {
        "schema": RESULTS_SCHEMA,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": _command_line(),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "profiled": bool(args.profile),
        "machine": {
            **machine,
            "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "config": {
            "tenants": args.tenants,
            "consolidate_every": args.consolidate_every,
            "window": min(args.window, points_at[0]),
            "sample": args.sample,
            "controller": "rules",
            "embedder": "hashing",
            "top_k": defaults["top_k"].default,
            "hops": defaults["hops"].default,
            "budget": defaults["budget"].default,
            "lambda": defaults["lambda_"].default,
            "archive_policy": defaults["archive_policy"].default,
            "seed": args.seed,
        },
        "checkpoints": points,
        "paired": paired,
        "hot": hot_doc,
        "checks": check_list,
    }
    if profiler is not None:
        text, table = profile_summary(profiler, 40)
        doc["profile_top_cumulative"] = table
        out.write("\ncProfile of the build (sorted by cumulative time):\n" + text)
    merge_results(args.out, RESULTS_KEY, doc)
    out.write("\n" + format_table(points, hot_doc, check_list) + "\n")
    out.write(f"\nmerged under {RESULTS_KEY!r} in {args.out}\n")
    return 1 if args.check and not all(c["passed"] for c in check_list) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


__all__ = ["PHASES", "RESULTS_KEY", "Build", "add_arguments", "main", "run", "window"]


if __name__ == "__main__":
    raise SystemExit(main())
