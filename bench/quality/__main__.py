"""python -m bench.quality: the long-horizon memory quality benchmark (make bench-quality).

Simulated agent fleets work through seeded task streams with the real memory in the loop (embedded
redis-server and Qdrant Edge, one temporary DATA_DIR per run), for every (world, arm, seed), on a
pool of processes. Prints the worlds' parameters, a table per world, the issue's targets as
PASS/FAIL lines and the evidence behind each failure; merges the figures into bench/results.json
under "quality" and draws bench/quality.png. bench/README.md describes worlds, arms and measures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import multiprocessing
import os
import platform
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import evomem
from bench.common import merge_results
from bench.quality import summary
from bench.quality.arms import ARMS, DEFAULT_ARMS, append_only_arm, default_arm, default_scoring
from bench.quality.plot import MOVING_AVERAGE, plot
from bench.quality.run import CONSOLIDATE_EVERY, NAMESPACE, Job, run_job
from bench.quality.worlds import WORLDS, WorldSpec, field_values, parameter_changes
from evomem.settings import Settings

RESULTS_KEY = "quality"
RESULTS_SCHEMA = 1
DEFAULT_OUT = Path("bench/results.json")
DEFAULT_PLOT = Path("bench/quality.png")
DEFAULT_SEEDS = 5
DEFAULT_TASKS = 600
QUICK = {"seeds": 2, "tasks": 150}
#: Edits kept per (world, arm) in the results file's evidence (the most frequent kinds).
EVIDENCE_EDITS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seeds", type=int, default=DEFAULT_SEEDS, help=f"seeds per (world, arm) ({DEFAULT_SEEDS})"
    )
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (0)")
    parser.add_argument("--tasks", type=int, default=DEFAULT_TASKS, help=f"tasks per run ({DEFAULT_TASKS})")
    parser.add_argument(
        "--worlds", default=",".join(WORLDS), help="comma-separated, from: " + ", ".join(WORLDS)
    )
    parser.add_argument(
        "--arms", default=",".join(DEFAULT_ARMS), help="comma-separated, from: " + ", ".join(ARMS)
    )
    parser.add_argument(
        "--consolidate-every",
        type=int,
        default=CONSOLIDATE_EVERY,
        help=f"tasks between consolidations ({CONSOLIDATE_EVERY})",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a Settings field for every memory arm, after the arm's own (e.g. rules_credit=all)",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a world parameter for every world (e.g. judge_share=0.5; see the printed defaults)",
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes (2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 seeds, 150 tasks")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file (bench/results.json)")
    parser.add_argument("--no-results", action="store_true", help="do not write the results file")
    parser.add_argument(
        "--results-key",
        help="the results file's key for this run (default: quality, or quality_<embedder>); a run of "
        "some arms only keeps the full run's figures under their own key",
    )
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="the PNG (bench/quality.png)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _names(text: str, known: dict[str, Any], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"unknown {what}: {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    return names


def world_specs(args: argparse.Namespace) -> dict[str, WorldSpec]:
    """The chosen worlds, with the --param overrides applied to each."""
    changes = parameter_changes(args.param)
    return {w: dataclasses.replace(WORLDS[w], **changes) for w in _names(args.worlds, WORLDS, "worlds")}


# -- planning and running -----------------------------------------------------------------------
def plan(args: argparse.Namespace) -> tuple[list[Job], dict[Job, list[str]]]:
    """The jobs to run, and for each the worlds it stands for: an arm without a judge runs once for
    worlds that differ only in their judge (the mixed ones)."""
    extra = field_values(args.set)
    stands_for: dict[Job, list[str]] = {}
    canonical: dict[tuple[Any, ...], Job] = {}
    for world, spec in world_specs(args).items():
        for arm_name in _names(args.arms, ARMS, "arms"):
            arm = ARMS[arm_name]
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                job = Job(spec, arm, seed, args.tasks, args.consolidate_every, extra)
                if arm.judged or arm.llm:
                    stands_for[job] = [world]
                    continue
                blind = dataclasses.replace(spec, name="", description="", judge_error=0.0, judge_share=1.0)
                key = (blind, arm.name, seed)
                if key in canonical:
                    stands_for[canonical[key]].append(world)
                else:
                    canonical[key] = job
                    stands_for[job] = [world]
    # slowest first, so that the pool's two processes finish together
    order = sorted(stands_for, key=lambda j: (not j.arm.llm, not j.arm.memory))
    return order, stands_for


def cost(job: Job) -> float:
    """A run's expected share of the work, for the progress bar: the LLM arm's HTTP round trips make
    it slower, and a run without memory costs next to nothing."""
    return job.tasks * (0.02 if not job.arm.memory else 2.0 if job.arm.llm else 1.0)


def execute(
    jobs: Sequence[Job], workers: int, tick: Callable[[Job | None], None]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Run every job (in ``workers`` processes, each run with its own embedded stores)."""
    runs: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []

    def done(job: Job, result: dict[str, Any] | None, error: BaseException | None) -> None:
        if error is not None:
            failures.append(
                {"world": job.world.name, "arm": job.arm.name, "seed": str(job.seed), "error": repr(error)}
            )
        elif result is not None:
            runs.append(result)
        tick(job)

    tick(None)
    if workers <= 1:
        for job in jobs:
            try:
                done(job, run_job(job), None)
            except Exception as exc:
                done(job, None, exc)
        return runs, failures
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures: dict[Future[dict[str, Any]], Job] = {pool.submit(run_job, job): job for job in jobs}
        for future in as_completed(futures):
            error = future.exception()
            done(futures[future], None if error else future.result(), error)
    return runs, failures


class Progress:
    """A progress bar on stderr, by expected work (a line per tenth when stderr is not a terminal)."""

    def __init__(self, stream: TextIO, enabled: bool, jobs: Sequence[Job]) -> None:
        self.stream, self.enabled = stream, enabled
        self.tty = stream.isatty()
        self.started = time.perf_counter()
        self.shown = -1
        self.total, self.work = len(jobs), sum(cost(j) for j in jobs) or 1.0
        self.done, self.done_work = 0, 0.0

    def __call__(self, finished: Job | None) -> None:
        if finished is not None:
            self.done += 1
            self.done_work += cost(finished)
        if not self.enabled or self.total == 0:
            return
        elapsed = time.perf_counter() - self.started
        share = min(1.0, self.done_work / self.work)
        eta = f"~{elapsed / share * (1 - share):4.0f} s left" if share > 0 else ""
        bar = "#" * int(30 * share) + "." * (30 - int(30 * share))
        line = f"[{bar}] {self.done}/{self.total} runs  {elapsed:5.0f} s  {eta}"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
        elif int(10 * share) != self.shown:
            self.shown = int(10 * share)
            self.stream.write(line + "\n")
        self.stream.flush()


# -- reporting ----------------------------------------------------------------------------------
def describe(args: argparse.Namespace, worlds: list[str], arms: list[str]) -> list[str]:
    defaults = WorldSpec("", "")
    lines = [
        f"memory quality benchmark: {args.tasks} tasks per run, seeds {args.first_seed}.."
        f"{args.first_seed + args.seeds - 1}, consolidation every {args.consolidate_every} tasks, final "
        f"window the last {summary.FINAL_WINDOW:.0%}, namespace {NAMESPACE!r}",
        "world parameters, defaults: "
        + ", ".join(f"{k}={v}" for k, v in defaults.as_dict().items() if k not in ("name", "description")),
    ]
    for name in worlds:
        spec = world_specs(args)[name]
        changed = {
            k: v
            for k, v in spec.as_dict().items()
            if k not in ("name", "description") and v != getattr(defaults, k)
        }
        lines.append(
            f"  {name}: {spec.description}"
            + (f" [{', '.join(f'{k}={v}' for k, v in changed.items())}]" if changed else "")
        )
    s = Settings(data_dir=Path("."))
    lines.append(
        f"memory settings of every arm: top_k={s.top_k}, hops={s.hops}, budget={s.budget}, "
        f"lambda={s.lambda_}, archive_ratio={s.archive_ratio}, embedder=hashing; "
        f"default scoring: {default_scoring()}"
    )
    for name in arms:
        arm = ARMS[name]
        who = (
            "LLM controller + world's judge"
            if arm.llm
            else "explicit verdicts + rules"
            if arm.judged
            else "rules only"
            if arm.memory
            else "-"
        )
        lines.append(f"  arm {name:<26} {who:<32} {dict(arm.settings) or ''}")
    if args.set:
        lines.append(f"  every memory arm also: {', '.join(args.set)}")
    return lines


def machine(loadavg_start: tuple[float, ...]) -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "evomem": evomem.__version__,
        "loadavg_at_start": list(loadavg_start),
        "loadavg_at_end": list(os.getloadavg()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.tasks = QUICK["seeds"], QUICK["tasks"]
    if args.seeds < 1 or args.tasks < 10 or args.consolidate_every < 1:
        parser.error("--seeds must be ≥ 1, --tasks ≥ 10, --consolidate-every ≥ 1")
    with scrubbed_environment() as ignored:
        return _main(args, argv, ignored)


@contextlib.contextmanager
def scrubbed_environment() -> Iterator[list[str]]:
    """The arms are the configurations under test: no EVOMEM_*/OPENAI_* variable of this shell may
    change them, here or in the pool's processes. Restored afterwards."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(("EVOMEM_", "OPENAI_"))}
    try:
        yield sorted(saved)
    finally:
        os.environ.update(saved)


def _main(args: argparse.Namespace, argv: Sequence[str] | None, leaked: list[str]) -> int:
    worlds, arms = _names(args.worlds, WORLDS, "worlds"), _names(args.arms, ARMS, "arms")
    print("\n".join(describe(args, worlds, arms)))
    if leaked:
        print(f"ignored from the environment: {', '.join(leaked)}")
    loadavg, started = os.getloadavg(), time.perf_counter()
    jobs, stands_for = plan(args)
    raw, failures = execute(jobs, max(1, args.jobs), Progress(sys.stderr, not args.no_progress, jobs))
    by_job = {(r["world"], r["arm"], r["seed"]): r for r in raw}
    runs = []
    for job in jobs:
        result = by_job.get((job.world.name, job.arm.name, job.seed))
        if result is not None:
            runs += [{**result, "world": world} for world in stands_for[job]]
    duration = time.perf_counter() - started
    figures = summary.aggregate(runs)
    figures = {w: {a: figures[w][a] for a in arms if a in figures.get(w, {})} for w in worlds if w in figures}
    specs = world_specs(args)
    print(summary.table(figures, {w: specs[w].description for w in worlds}))
    if lifecycle := summary.lifecycle_lines(figures):
        print("\n" + "\n".join(lifecycle))
    checks = summary.targets(
        figures,
        {w: specs[w].judge_error for w in worlds},
        default_arm(),
        append_only_arm(),
        f"nojudge/{default_scoring()}",
    )
    print(
        "\ntargets (issue 8), for the default configuration "
        + default_arm()
        + ", in the worlds whose judge errs 10% of the time:"
    )
    print("\n".join(summary.target_lines(checks)) or "  (none: the arms they compare were not run)")
    evidence = print_evidence(runs, checks)
    for f in failures:
        print(f"RUN FAILED: {f['world']} {f['arm']} seed {f['seed']}: {f['error']}")
    print(
        f"\n{len(raw)} runs ({len(runs)} with the judge-free ones shared) in {duration:.0f} s "
        f"on {args.jobs} processes"
    )
    curves = summary.curves(runs)
    if not args.no_plot:
        title = (
            f"success over time, mean of {args.seeds} seeds, moving average of {MOVING_AVERAGE} tasks "
            "(grey: the final window)"
        )
        if plot({w: curves[w] for w in figures}, args.plot, title, summary.FINAL_WINDOW):
            print(f"plot: {args.plot}")
        else:
            print("no plot: matplotlib is not installed (pip install -e '.[bench]')")
    if not args.no_results:
        section = {
            "schema": RESULTS_SCHEMA,
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": "python -m bench.quality " + shlex.join(sys.argv[1:] if argv is None else list(argv)),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "duration_s": round(duration, 1),
            "machine": machine(loadavg),
            "parameters": {
                "consolidate_every": args.consolidate_every,
                "final_window": summary.FINAL_WINDOW,
                "moving_average": MOVING_AVERAGE,
                "namespace": NAMESPACE,
                "default_scoring": default_scoring(),
            },
            "worlds": {w: specs[w].as_dict() for w in worlds},
            "arms": {
                a: {"settings": dict(ARMS[a].settings), "judged": ARMS[a].judged, "llm": ARMS[a].llm}
                for a in arms
            },
            "default_arm": default_arm(),
            "append_only_arm": append_only_arm(),
            "figures": figures,
            "curves": {w: {a: summary.binned(c) for a, c in curves[w].items()} for w in figures},
            "targets": checks,
            "evidence": evidence,
            "failures": failures,
        }
        # a run on another embedder than the arms' hashing keeps its own key beside the reference run
        embedder = dict(field_values(args.set)).get("embedder", "hashing")
        key = args.results_key or (RESULTS_KEY if embedder == "hashing" else f"{RESULTS_KEY}_{embedder}")
        section["embedder"] = embedder
        merge_results(args.out, key, section)
        print(f"results: {args.out} (key {key!r})")
    return 1 if failures else 0


def print_evidence(runs: Sequence[dict[str, Any]], checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """For every world with a failed target: what the arms it compares served most and which edits
    they made (their first seed), so that an ordering can be explained from the data. Returns the
    same evidence for every (world, arm), shortened, for results.json."""
    failed: dict[str, list[str]] = {}
    for c in checks:
        if not c["pass"] and c["scope"] == "target":
            for arm in c["arms"]:
                if arm not in failed.setdefault(c["world"], []):
                    failed[c["world"]].append(arm)
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(runs, key=lambda r: r["seed"], reverse=True):
        first[(r["world"], r["arm"])] = r
    if failed:
        print("\nevidence for the failed targets (first seed of each arm):")
    for world, arms in failed.items():
        print(f"\n{world}")
        for arm in arms:
            if (world, arm) in first:
                print("\n".join(summary.evidence_lines(first[(world, arm)])))
    out: dict[str, Any] = {}
    for (world, arm), r in first.items():
        if "top_served" not in r:
            continue  # no memory, nothing served
        out.setdefault(world, {})[arm] = {
            "seed": r["seed"],
            "top_served": [
                {
                    k: row[k]
                    for k in ("lesson", "kind", "served", "harmful_where_served", "states", "positive")
                }
                for row in r["top_served"][:3]
            ],
            "edits": dict(Counter(r["edits"]).most_common(EVIDENCE_EDITS)),
            "missed_for": r["missed_for"],
            "good_archived_by": r["good_archived_by"],
        }
    return out


if __name__ == "__main__":
    raise SystemExit(main())
