"""python -m bench.quality.trace: one run of the quality benchmark, traced task by task.

Where a target fails, the figures say how much and this says why: in the final window, was the
topic's current right lesson learnt, active, ranked at all, served; and every harmful serving of the
run by the kind of its lesson (a wrong one, a right one gone stale after drift, an over-general one
on a sibling topic) and by whether the memory had archived a node of that lesson before. With
``--misses``, each return of a taught query whose lesson was not ranked first is printed as it
happens: the ranking to a budget of 12 (lesson, score, Eq. 9's counts, best similarity) and every
node of the taught lesson with the past queries of its evidence (+ support, - harm, their status,
and whether the query is the very text asked). It runs the benchmark's own loop (``run.run_job``)
with an observer, so it sees what the arm sees.

    python -m bench.quality.trace [--world mixed-j10] [--arm all-evidence/weighted] [--seed 0]
                                  [--tasks 600] [--set FIELD=VALUE] [--param FIELD=VALUE] [--misses]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from bench.quality.arms import ARMS, default_arm
from bench.quality.run import NAMESPACE, Job, run_job
from bench.quality.summary import FINAL_WINDOW
from bench.quality.worlds import WORLDS, Lesson, Task, World, field_values, parameter_changes
from evomem import Memory

#: How deep a traced task looks for the right lesson in the ranking: far past the budget.
DEPTH = 100
#: How much of the ranking a printed miss shows.
MISS_DEPTH = 12


class Trace:
    """What the observer counts."""

    def __init__(self, world: World, tasks: int, misses: TextIO | None = None) -> None:
        self.world = world
        self.misses = misses  # where each miss of a returning query is printed (None: not printed)
        self.final_from = tasks - max(1, round(FINAL_WINDOW * tasks))  # as summary cuts it
        self.right: Counter[str] = Counter()  # final window: where the topic's right lesson stood
        self.harmful: Counter[str] = Counter()  # the whole run: harmful servings by kind

    def observe(self, task: Task, served: Sequence[Lesson | None], mem: Memory, taught: str | None) -> None:
        world = self.world
        nodes = mem.insights(NAMESPACE)
        first = served[0] if served else None
        if self.misses is not None and taught is not None and (first is None or first.key != taught):
            self._print_miss(task, taught, mem, nodes)
        for lesson in served:
            if lesson is None or world.effect(lesson, task.topic, task.index) >= 0:
                continue
            kind: str = lesson.kind
            home = lesson.home
            if (
                lesson.kind in ("right", "general")
                and home is not None
                and world.is_drifted(home, task.index)
            ):
                kind += " gone stale"
            if lesson.kind == "general" and lesson.home != task.topic:
                kind += " on a sibling"
            before = any(self._lesson_key(n.text) == lesson.key and not n.active for n in nodes)
            self.harmful[kind + (", a node of it archived before" if before else "")] += 1
        if task.index >= self.final_from:
            self.right[self._where_right(task, served, mem, nodes)] += 1

    def _print_miss(self, task: Task, taught: str, mem: Memory, nodes: Any) -> None:
        out = self.misses
        assert out is not None
        deep = mem.retriever.retrieve(task.query, NAMESPACE, budget=MISS_DEPTH, record=False)
        out.write(f"task {task.index}, topic {task.topic}: {task.query!r} taught {taught}, not first\n")
        for i in deep.insights:
            key = self._lesson_key(i.text) or "?"
            mark = "   <- taught" if key == taught else ""
            out.write(
                f"    {key:14s} score {i.score:.4f}  support {i.support}  conflict {i.conflict}  "
                f"similarity {i.similarity:.2f}{mark}\n"
            )
        if not any(self._lesson_key(i.text) == taught for i in deep.insights):
            out.write(f"    (the taught lesson is not in the first {MISS_DEPTH}: no candidate, or r <= 0)\n")
        for node in nodes:
            if self._lesson_key(node.text) != taught:
                continue
            sizes = f"|Ω⁺| {len(node.positive)}, |Ω⁻| {len(node.negative)}"
            out.write(f"    node {node.id} {node.state}: {sizes}\n")
            queries = mem.graph.queries(NAMESPACE, set(node.positive) | set(node.negative))
            for qid in sorted(queries, key=lambda q: (q not in node.positive, q)):
                q = queries[qid]
                same = "  (this very text)" if q.text == task.query else ""
                sign = "+" if qid in node.positive else "-"
                out.write(f"      {sign} {q.status:8s} {q.text[:72]!r}{same}\n")

    def _lesson_key(self, text: str) -> str | None:
        lesson = self.world.by_text.get(text)
        return lesson.key if lesson is not None else None

    def _where_right(self, task: Task, served: Sequence[Lesson | None], mem: Memory, nodes: Any) -> str:
        right = self.world.current_right(task.topic, task.index)
        mine = [n for n in nodes if self._lesson_key(n.text) == right.key]
        if not mine:
            return "not learnt yet"
        if not any(n.active for n in mine):
            return "archived"
        keys = [x.key if x is not None else None for x in served]
        if right.key in keys:
            return f"served, rank {keys.index(right.key) + 1}"
        deep = mem.retriever.retrieve(task.query, NAMESPACE, budget=DEPTH, record=False)
        ranks = [r for r, i in enumerate(deep.insights, 1) if self._lesson_key(i.text) == right.key]
        if not ranks:
            return "active, not ranked (no candidate of Eq. 7, or r <= 0)"
        return f"ranked {min(ranks[0], 10)}{'+' if ranks[0] >= 10 else ''}, not served"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.trace", description=__doc__)
    parser.add_argument("--world", default="mixed-j10", choices=sorted(WORLDS))
    parser.add_argument("--arm", default=default_arm(), choices=[a for a, s in ARMS.items() if s.memory])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a Settings field")
    parser.add_argument("--param", action="append", default=[], metavar="FIELD=VALUE", help="world parameter")
    parser.add_argument(
        "--misses", action="store_true", help="print each return whose taught lesson was not ranked first"
    )
    args = parser.parse_args(argv)
    spec = dataclasses.replace(WORLDS[args.world], **parameter_changes(args.param))
    job = Job(spec, ARMS[args.arm], args.seed, args.tasks, extra=field_values(args.set))
    trace = Trace(World(job.world, job.seed, job.tasks), job.tasks, sys.stdout if args.misses else None)
    result = run_job(job, observe=trace.observe)
    window = result["success"][trace.final_from :]
    out = sys.stdout
    out.write(f"{args.world} / {args.arm} / seed {args.seed}: final-window success ")
    out.write(f"{sum(window) / max(len(window), 1):.3f} over {len(window)} tasks\n")
    out.write("the topic's current right lesson, final window:\n")
    for what, n in trace.right.most_common():
        out.write(f"  {n:4d}  {what}\n")
    out.write(f"harmful servings, whole run ({sum(trace.harmful.values())}):\n")
    for what, n in trace.harmful.most_common():
        out.write(f"  {n:4d}  {what}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
