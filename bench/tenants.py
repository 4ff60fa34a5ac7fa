"""The tenant-count benchmark: the same tasks spread over 1, 10, 1,000 and 10,000 namespaces.

Each spread runs in a process of its own on a fresh embedded stack (the SDK, the rule controller,
the hashing embedder): every task is retrieved and reported with a proposed insight, then the whole
batch is consolidated (the events applied, the index projected and flushed). Then a sample of the
tasks is retrieved again, each in its namespace, against the memory they made. Reported per spread:
consolidation events/s, report and both retrieve latencies (p50/p99), files under ``DATA_DIR``,
the process's RSS and open file descriptors, and how the index holds the namespaces (shared or
promoted). ``--check`` holds the run to issue 36's acceptance.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import psutil

from bench.common import DEFAULT_OUT, child_env, embedded_settings, machine_info, merge_results, summarise
from bench.world import World

RESULTS_KEY = "tenants"
RESULTS_SCHEMA = 1
SPREADS = (1, 10, 1_000, 10_000)
QUICK_SPREADS = (1, 10, 100, 500)


def task_texts(n: int, seed: int) -> list[str]:
    """``n`` task texts of the growth benchmark's fleet (its ten tenants' domains, repeats and all)."""
    world = World(10, seed)
    return [world.task().text for _ in range(n)]


def namespace_of(task: int, spread: int) -> str:
    return f"t{task % spread:05d}"


def count_files(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def redis_processes(data_dir: Path) -> list[psutil.Process]:
    """The embedded redis-server of ``data_dir`` (a daemon of its own, named by its socket's path)."""
    where = str(data_dir)
    return [p for p in psutil.process_iter(["cmdline"]) if where in " ".join(p.info["cmdline"] or ())]


def cpu_seconds(procs: Sequence[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def run_one(data_dir: Path, tasks: int, spread: int, sample: int, seed: int) -> dict[str, Any]:
    """One spread, in this process: the figures of ``spread`` namespaces sharing ``tasks`` tasks."""
    from evomem import Memory

    texts = task_texts(tasks, seed)
    settings = embedded_settings(data_dir, controller="rules", embedder="hashing")
    mem = Memory.open(settings)
    assert isinstance(mem, Memory)
    clock = time.perf_counter_ns
    try:
        first: list[int] = []
        reports: list[int] = []
        for i, text in enumerate(texts):
            ns = namespace_of(i, spread)
            t0 = clock()
            r = mem.retrieve(text, namespace=ns)
            t1 = clock()
            mem.report(
                r,
                status="resolved" if i % 3 else "failed",
                trajectory=["looked it up", "answered"],
                final_answer="done",
                proposed_insight=f"For {text[:48]}: check the record first.",
            )
            t2 = clock()
            first.append(t1 - t0)
            reports.append(t2 - t1)
        redis = redis_processes(data_dir)
        t0, cpu0, rcpu0 = clock(), time.process_time(), cpu_seconds(redis)
        counts = mem.consolidate()
        projector = mem.runtime.projector
        assert projector is not None
        projector.checkpoint()  # everything flushed: what a batch costs the index, durably
        consolidate_s = (clock() - t0) / 1e9
        consolidate_cpu_s = time.process_time() - cpu0 + cpu_seconds(redis) - rcpu0
        step = max(1, tasks // sample)
        again = []
        served = 0
        for i in range(0, tasks, step):
            t0 = clock()
            r = mem.retrieve(texts[i], namespace=namespace_of(i, spread))
            again.append(clock() - t0)
            served += len(r.insights)
        index = mem.runtime.index
        tiers = index.tiers() if index is not None and hasattr(index, "tiers") else {}
        proc = psutil.Process()
        files = count_files(data_dir)
        return {
            "namespaces": spread,
            "tasks": tasks,
            "events_applied": counts.applied,
            "consolidate_s": round(consolidate_s, 3),
            "consolidation_events_per_s": round(tasks / consolidate_s, 1),
            # CPU seconds of this process and its redis-server: what the load of others cannot move
            "consolidate_cpu_s": round(consolidate_cpu_s, 3),
            "consolidation_events_per_cpu_s": round(tasks / consolidate_cpu_s, 1),
            "loadavg": round(os.getloadavg()[0], 2),
            "retrieve_first": summarise(first),
            "report": summarise(reports),
            "retrieve": summarise(again),
            "retrieve_sample": len(again),
            "served_per_retrieve": round(served / len(again), 3),
            "files": files,
            "files_per_namespace": round(files / spread, 3),
            "rss_mb": round(proc.memory_info().rss / 2**20, 1),
            "open_fds": proc.num_fds(),
            "threads": proc.num_threads(),
            "tiers": tiers,
        }
    finally:
        mem.close()


def checks(rows: dict[int, dict[str, Any]], spreads: Sequence[int]) -> list[dict[str, Any]]:
    """Issue 36's acceptance, on the spreads this run has (the largest for the consolidation and
    files, the one of 1,000, or the nearest below it, for retrieval)."""
    one = rows.get(1)
    if one is None:
        return []
    out = []
    largest = rows[max(spreads)]
    ratio = largest["consolidation_events_per_s"] / one["consolidation_events_per_s"]
    out.append(
        {
            "name": f"consolidation at {largest['namespaces']:,} namespaces ≥ 0.5× one namespace",
            "value": round(ratio, 3),
            "passed": ratio >= 0.5,
        }
    )
    if largest.get("consolidation_events_per_cpu_s") and one.get("consolidation_events_per_cpu_s"):
        by_cpu = largest["consolidation_events_per_cpu_s"] / one["consolidation_events_per_cpu_s"]
        out[-1]["by_cpu"] = round(by_cpu, 3)  # the same ratio in CPU seconds: load-independent
    out.append(
        {
            "name": f"files a namespace at {largest['namespaces']:,} namespaces ≤ 5",
            "value": largest["files_per_namespace"],
            "passed": largest["files_per_namespace"] <= 5,
        }
    )
    mid = max((s for s in spreads if 1 < s <= 1_000), default=None)
    if mid is not None:
        r = rows[mid]["retrieve"]["p50_ms"] / one["retrieve"]["p50_ms"]
        out.append(
            {
                "name": f"retrieve p50 at {mid:,} namespaces ≤ 1.5× one namespace",
                "value": round(r, 3),
                "passed": r <= 1.5,
            }
        )
    return out


def format_table(rows: dict[int, dict[str, Any]], check_list: list[dict[str, Any]]) -> str:
    one = rows.get(1)
    lines = [
        "| namespaces | consolidation events/s | ×1 ns | events/CPU-s | ×1 ns | report p50/p99 ms "
        "| retrieve p50/p99 ms "
        "| files | files/ns | RSS MB | fds | shared / promoted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for spread, r in sorted(rows.items()):
        rel = r["consolidation_events_per_s"] / one["consolidation_events_per_s"] if one else float("nan")
        t = r["tiers"]
        per_cpu = r.get("consolidation_events_per_cpu_s", float("nan"))
        rel_cpu = per_cpu / one.get("consolidation_events_per_cpu_s", float("nan")) if one else float("nan")
        lines.append(
            f"| {spread:,} | {r['consolidation_events_per_s']:,.1f} | ×{rel:.2f} "
            f"| {per_cpu:,.1f} | ×{rel_cpu:.2f} "
            f"| {r['report']['p50_ms']:.2f} / {r['report']['p99_ms']:.2f} "
            f"| {r['retrieve']['p50_ms']:.2f} / {r['retrieve']['p99_ms']:.2f} "
            f"| {r['files']:,} | {r['files_per_namespace']:.3f} | {r['rss_mb']:.0f} | {r['open_fds']} "
            f"| {t.get('shared_namespaces', '-')} / {t.get('promoted_namespaces', '-')} |"
        )
    lines.append("")
    lines += [
        f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['value']}"
        + (f" (by CPU seconds {c['by_cpu']})" if "by_cpu" in c else "")
        for c in check_list
    ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks, the same in every spread")
    parser.add_argument(
        "--spreads", default=",".join(map(str, SPREADS)), help="namespace counts, comma-separated"
    )
    parser.add_argument("--sample", type=int, default=1_000, help="tasks retrieved again after consolidation")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 500 tasks, 1/10/100/500 namespaces"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 unless issue 36's acceptance holds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a spread, in this process
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.one is not None:  # the child: one spread, its figures as JSON on stdout
        doc = run_one(args.data_dir, args.tasks, args.one, args.sample, args.seed)
        out.write(json.dumps(doc) + "\n")
        return 0
    if args.quick:
        args.tasks, args.sample, args.spreads = 500, 100, ",".join(map(str, QUICK_SPREADS))
    spreads = [int(s) for s in args.spreads.split(",") if s]
    if any(s < 1 or s > args.tasks for s in spreads) or args.sample < 1:
        raise SystemExit("every spread is between 1 and --tasks, and --sample is positive")
    machine = machine_info()
    started = datetime.now(UTC)
    out.write(
        f"tenants: {args.tasks:,} tasks over {', '.join(f'{s:,}' for s in spreads)} namespaces; "
        f"{machine['cores']} cores, load {machine['loadavg_at_start']}\n"
    )
    out.flush()
    rows: dict[int, dict[str, Any]] = {}
    root = Path(tempfile.mkdtemp(prefix="evomem-tenants-"))
    try:
        for spread in spreads:
            data = root / str(spread)
            cmd = [sys.executable, "-m", "bench.tenants", "--one", str(spread), "--data-dir", str(data)]
            cmd += ["--tasks", str(args.tasks), "--sample", str(args.sample), "--seed", str(args.seed)]
            done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                raise SystemExit(f"the run of {spread} namespaces failed ({done.returncode})")
            rows[spread] = json.loads(done.stdout.strip().splitlines()[-1])
            r = rows[spread]
            out.write(
                f"  {spread:>6,} namespaces: {r['consolidation_events_per_s']:,.1f} events/s "
                f"({r['consolidation_events_per_cpu_s']:,.1f} a CPU second), load {r['loadavg']}, "
                f"retrieve p50 "
                f"{r['retrieve']['p50_ms']:.2f} ms, {r['files']:,} files, {r['rss_mb']:.0f} MB, "
                f"{r['open_fds']} fds\n"
            )
            out.flush()
            shutil.rmtree(data, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    check_list = checks(rows, spreads)
    doc = {
        "schema": RESULTS_SCHEMA,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": shlex.join(["python", "-m", "bench.tenants", *sys.argv[1:]]),
        "machine": {**machine, "loadavg_at_end": list(os.getloadavg())},
        "config": {"tasks": args.tasks, "spreads": spreads, "sample": args.sample, "seed": args.seed},
        "spreads": {str(k): v for k, v in sorted(rows.items())},
        "checks": check_list,
    }
    merge_results(args.out, RESULTS_KEY, doc)
    out.write("\n" + format_table(rows, check_list) + "\n")
    out.write(f"\nmerged under {RESULTS_KEY!r} in {args.out}\n")
    return 1 if args.check and not all(c["passed"] for c in check_list) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tenants", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
