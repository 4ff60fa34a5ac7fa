"""A simulated agent fleet on embedded memories: maintained vs append-only vs no memory, offline.

Three task families, each with one true lesson (two wordings), harmful shortcuts and one
over-generalised rule that a judge can revise. Served lessons move an agent's success probability;
agents report outcomes, noisy verdicts and proposals, and the memory's edits decide what is served next.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evomem.errors import ConfigError, EvomemError
from evomem.ops.progress import Progress, add_flag, wanted
from evomem.results import EditRecord
from evomem.sdk import Memory
from evomem.settings import ArchivePolicy, OperationsMode, Settings
from schemas import InsightNode

ARM_DIRS = ("maintained", "append-only")
DEMO_NS = uuid.UUID("0b6a8e0e-4a8f-4c67-9d55-3f3f0c1d2e71")
JUDGE_RATE, JUDGE_ERROR = 0.35, 0.10  # share of tasks with explicit verdicts; how often wrong
PROPOSE_UNHELPED, PROPOSE_HELPED = 0.30, 0.08  # chance an agent proposes a lesson
PROPOSAL_MIX = (("true", 0.50), ("harmful", 0.85), ("overgeneral", 1.0))  # cumulative: 50%, 35%, 15%
HELP, HARM, OVERGENERAL, REFINED = 0.32, -0.20, -0.08, 0.28  # success-probability effects when served


@dataclass(frozen=True)
class Lesson:
    text: str
    kind: str  # true | harmful | overgeneral | refined
    effect: float  # change of the success probability when served
    revision: str | None = None  # what a judge rewrites an over-generalised lesson into


@dataclass(frozen=True)
class Family:
    namespace: str
    base: float
    templates: tuple[str, ...]
    slots: dict[str, tuple[str, ...]]
    lessons: tuple[Lesson, ...]

    def of(self, kind: str) -> list[Lesson]:
        return [x for x in self.lessons if x.kind == kind]


def _family(
    namespace: str,
    base: float,
    templates: tuple[str, ...],
    slots: dict[str, tuple[str, ...]],
    true: tuple[str, str],
    harmful: tuple[str, str],
    overgeneral: str,
    refined: str,
) -> Family:
    lessons = (
        *(Lesson(t, "true", HELP) for t in true),
        *(Lesson(t, "harmful", HARM) for t in harmful),
        Lesson(overgeneral, "overgeneral", OVERGENERAL, refined),
        Lesson(refined, "refined", REFINED),
    )
    return Family(namespace, base, templates, slots, lessons)


FAMILIES = (
    _family(
        "fever",
        0.50,
        (
            "Verify the claim: {person} {verb} {thing} in {year}.",
            "Fact-check: {person} is known for having {verb} {thing} ({year}).",
            "Is it true that {person} {verb} {thing} before {year}?",
        ),
        {
            "person": (
                "Ada Lovelace",
                "Nikola Tesla",
                "Marie Curie",
                "Alan Turing",
                "Grace Hopper",
                "Rosalind Franklin",
                "Niels Bohr",
                "Emmy Noether",
                "Carl Sagan",
                "Lise Meitner",
            ),
            "verb": ("invented", "discovered", "published", "won", "designed", "described"),
            "thing": (
                "the radio",
                "a new element",
                "the first compiler",
                "a Nobel Prize",
                "a calculating engine",
                "the double helix",
                "a symmetry theorem",
                "a lecture series",
            ),
            "year": ("1843", "1898", "1903", "1936", "1952", "1962", "1980"),
        },
        (
            "Find the sentence that names the claim's subject and compare every detail (dates, numbers, "
            "roles) before choosing SUPPORTS or REFUTES.",
            "Only decide SUPPORTS or REFUTES after quoting evidence about the claim's subject; with no "
            "such sentence, answer NOT ENOUGH INFO.",
        ),
        (
            "A claim that sounds plausible is usually true: answer SUPPORTS without searching.",
            "If the first search returns nothing, the claim is false: answer REFUTES.",
        ),
        "Claims that mention a year are usually wrong; answer REFUTES.",
        "When a claim mentions a year, check it against the year in the evidence and answer REFUTES "
        "only if they differ.",
    ),
    _family(
        "hotpotqa",
        0.40,
        (
            "Which {kind} did the {role} of {work} later {act}?",
            "What is the {attr} of the city where the {role} of {work} was born?",
            "Were the {role} of {work} and the {role2} of {work2} born in the same country?",
        ),
        {
            "kind": ("film", "company", "band", "university", "newspaper"),
            "role": ("director", "founder", "author", "lead singer", "architect"),
            "role2": ("composer", "editor", "producer", "captain"),
            "work": (
                "Blue Harbor",
                "The Glass Tower",
                "Northern Lights",
                "Iron Meadow",
                "Silent River",
                "Paper Moons",
            ),
            "work2": ("Red Canyon", "The Long Road", "Winter Garden", "Golden Hour"),
            "act": ("join", "found", "lead", "buy"),
            "attr": ("population", "elevation", "founding year", "mayor"),
        },
        (
            "Split the question into two hops: first find the bridge entity, then search for the asked "
            "attribute of that entity.",
            "Answer only once both hops have evidence; name the bridge entity in your reasoning before "
            "the final answer.",
        ),
        (
            "Answer from the first paragraph retrieved; a second search rarely changes the answer.",
            "For comparison questions, pick the entity mentioned first in the question.",
        ),
        "Always search for the second entity of the question first.",
        "For a bridge question, search first for the entity the question describes, then for the "
        "attribute asked about it.",
    ),
    _family(
        "blocksworld",
        0.45,
        (
            "Plan: {a} is on {b}, {c} is on the table; goal: {goal}.",
            "Blocksworld: start with {a} on {b} and {c} on {d}; reach {goal}.",
            "Rearrange the blocks so that {goal}, starting from {a} stacked on {c}.",
        ),
        {
            "a": ("block A", "block B", "block C", "block D", "block E"),
            "b": ("block F", "block G", "block H"),
            "c": ("block J", "block K", "block L"),
            "d": ("block M", "block N"),
            "goal": (
                "A is on B and B is on C",
                "C is on A",
                "D is on E and E is on the table",
                "B is on D and A is on B",
                "the tower reads E, C, A from the top",
                "every block is clear",
            ),
        },
        (
            "Before moving a block, clear everything stacked on it, and build the goal tower from the "
            "bottom up.",
            "Check each action's preconditions (the block is clear, the hand is empty) against the "
            "current state before issuing it.",
        ),
        (
            "Move the goal's top block first; the lower blocks can be fixed afterwards.",
            "Skip the precondition checks; illegal moves are simply ignored by the environment.",
        ),
        "Always put every block on the table first.",
        "Put a block on the table only when it sits on a block you still have to move; otherwise "
        "stack it straight onto its goal position.",
    ),
)
LESSONS = {x.text: x for f in FAMILIES for x in f.lessons}


@dataclass(frozen=True)
class Task:
    index: int
    family: Family
    query: str


def make_tasks(n: int, seed: int) -> list[Task]:
    rng = random.Random(f"evomem-demo:{seed}:tasks")
    tasks = []
    for i in range(n):
        fam = rng.choice(FAMILIES)
        query = rng.choice(fam.templates).format(**{k: rng.choice(v) for k, v in fam.slots.items()})
        tasks.append(Task(i, fam, query))
    return tasks


@dataclass
class Arm:
    name: str
    memory: Memory | None
    outcomes: list[bool] = field(default_factory=list)
    helped: int = 0  # tasks served at least one lesson that raises success
    harmed: int = 0  # tasks served at least one lesson that lowers it
    served: Counter[str] = field(default_factory=Counter)  # tasks each lesson text was served in
    operations: Counter[str] = field(default_factory=Counter)
    outcome_counts: Counter[str] = field(default_factory=Counter)
    phase_outcomes: Counter[str] = field(default_factory=Counter)
    applied: int = 0  # events consolidated: decided and applied
    dead_lettered: int = 0  # events whose judge's answers were unusable
    consolidate_s: float = 0.0


def skill(agent: int, agents: int) -> float:
    return 0.0 if agents < 2 else -0.06 + 0.12 * agent / (agents - 1)


def pick_proposal(family: Family, u_kind: float, u_word: float) -> str:
    options = family.of(next((k for k, upto in PROPOSAL_MIX if u_kind < upto), "overgeneral"))
    return options[int(u_word * len(options))].text


def run_task(arm: Arm, task: Task, agents: int, seed: int) -> None:
    """One agent attempts one task with what the memory serves, then reports (consolidated later)."""
    rng = random.Random(f"evomem-demo:{seed}:task:{task.index}")  # the same draws in every arm
    u_success, u_judge, u_propose, u_kind, u_word = (rng.random() for _ in range(5))
    agent, mem = task.index % agents, arm.memory
    retrieval = mem.retrieve(task.query, task.family.namespace) if mem is not None else None
    insights = retrieval.insights if retrieval is not None else ()
    served = [LESSONS.get(i.text) for i in insights]
    effects = [x.effect for x in served if x is not None]
    helped = any(e > 0 for e in effects)
    p = task.family.base + skill(agent, agents) + max([0.0, *effects]) + sum(e for e in effects if e < 0)
    success = u_success < min(0.97, max(0.03, p))
    arm.outcomes.append(success)
    arm.helped += helped
    arm.harmed += any(e < 0 for e in effects)
    arm.served.update({i.text for i in insights})
    if mem is None or retrieval is None:
        return
    verdicts: dict[str, Any] = {}
    if u_judge < JUDGE_RATE:  # a judge looked at the trajectory; it is wrong one time in ten
        for ins, lesson in zip(insights, served, strict=True):
            wrong = rng.random() < JUDGE_ERROR
            if lesson is not None and lesson.revision is not None and not wrong:
                verdicts[ins.id] = {"verdict": "partial", "revised_text": lesson.revision}
            elif lesson is not None:
                verdicts[ins.id] = "helpful" if (lesson.effect > 0) != wrong else "harmful"
    chance = PROPOSE_HELPED if helped else PROPOSE_UNHELPED
    proposal = pick_proposal(task.family, u_kind, u_word) if u_propose < chance else None
    mem.report(
        retrieval,
        status="resolved" if success else "failed",
        event_id=str(uuid.uuid5(DEMO_NS, f"{seed}:{task.index}")),
        agent_id=f"agent-{agent}",
        trajectory=[
            f"read: {task.query}",
            f"used {len(insights)} insight(s) from memory",
            "answered" if success else "answered wrongly",
        ],
        final_answer="ok" if success else "wrong",
        feedback=None if success else "the answer was wrong",
        insight_feedback=verdicts or None,
        proposed_insight=proposal,
    )


def consolidate(arm: Arm) -> None:
    """What a background worker does between batches: apply every pending report."""
    if arm.memory is not None:
        started = time.perf_counter()
        report = arm.memory.consolidate()
        arm.consolidate_s += time.perf_counter() - started
        arm.applied += report.applied
        arm.dead_lettered += report.dead_lettered
        arm.operations.update(report.operations)
        arm.outcome_counts.update(report.outcomes)
        arm.phase_outcomes.update(report.outcomes)


def rate(xs: Sequence[bool]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def all_insights(mem: Memory | None) -> list[InsightNode]:
    return [] if mem is None else [n for f in FAMILIES for n in mem.insights(f.namespace)]


OUTCOME_LABELS = (
    ("added", "added"),
    ("duplicate", "dup"),
    ("kept", "kept"),
    ("negative_evidence", "neg"),
    ("archived", "archived"),
    ("revised", "revised"),
)


def fmt_outcomes(counts: Counter[str]) -> str:
    return ", ".join(f"{label} {counts.get(key, 0)}" for key, label in OUTCOME_LABELS)


def timeline(node_id: str, history: Sequence[EditRecord]) -> tuple[list[str], Counter[str]]:
    """The node's edits as runs of one kind up to the edit that retired it (else the first six runs),
    and a count of the edits after those."""
    mine = [h for h in history if node_id in (h.insight_id, h.new_id)]
    runs: list[list[Any]] = []  # [step, count, retired]
    for h in mine:
        step = f"{h.op} {h.outcome}" + (" (feedback)" if h.decided_by == "feedback" else "")
        retired = h.outcome == "archived" or (h.outcome == "revised" and h.insight_id == node_id)
        if runs and runs[-1][0] == step and not retired:
            runs[-1][1] += 1
        else:
            runs.append([step, 1, retired])
    end = next((n + 1 for n, r in enumerate(runs) if r[2]), 0)
    runs = runs[:end] if 0 < end <= 14 else runs[:6]
    shown = sum(r[1] for r in runs)
    return [f"{st} ×{k}" if k > 1 else st for st, k, _ in runs], Counter(h.outcome for h in mine[shown:])


def story(node: InsightNode, maintained: Arm, baseline: Arm) -> dict[str, Any]:
    """What happened to one insight of the maintained memory, next to the same text in append-only."""
    assert maintained.memory is not None and baseline.memory is not None
    view = maintained.memory.insight(node.id)
    lesson = LESSONS.get(node.text)
    head, rest = timeline(node.id, view.history)
    twins = [n for n in baseline.memory.insights(node.namespace) if n.text == node.text]
    lineage = [maintained.memory.insight(i).node for i in view.lineage]
    m_served = maintained.served
    return {
        "id": node.id,
        "namespace": node.namespace,
        "text": node.text,
        "truth": f"{lesson.kind} lesson, {lesson.effect:+.2f} success when served" if lesson else "unknown",
        "state": node.state,
        "version": node.version,
        "positive": len(node.positive),
        "negative": len(node.negative),
        "edits": len(view.history),
        "timeline": head,
        "later": dict(rest),
        "lineage": [
            {
                "id": n.id,
                "text": n.text,
                "state": n.state,
                "served_maintained": m_served[n.text],
                "served_append_only": baseline.served[n.text],
            }
            for n in lineage
        ],
        "append_only": [
            {"state": n.state, "positive": len(n.positive), "negative": len(n.negative)} for n in twins
        ],
    }


def stories(maintained: Arm, baseline: Arm) -> list[dict[str, Any]]:
    """The most-evidenced harmful lesson that was archived, and the most-supported revision."""
    nodes = all_insights(maintained.memory)
    harmful = [n for n in nodes if not n.active and getattr(LESSONS.get(n.text), "kind", "") == "harmful"]
    revised = [n for n in nodes if n.revised_from is not None]
    picks = [
        max(pool, key=lambda n: (len(n.positive) + len(n.negative), n.id))
        for pool in (harmful, revised)
        if pool
    ]
    return [story(n, maintained, baseline) for n in picks]


def print_story(s: dict[str, Any]) -> None:
    print(f"\nThe story of insight {s['id'][:8]} ({s['namespace']}): “{s['text']}”")
    print(f"  the simulation's ground truth: {s['truth']}")
    print(
        f"  now {s['state']} (v{s['version']}) with {s['positive']} positive and {s['negative']} negative "
        f"evidence, after {s['edits']} edits:"
    )
    later = ", ".join(f"{k} {v}" for k, v in sorted(s["later"].items(), key=lambda kv: -kv[1]))
    print("    " + " → ".join(s["timeline"]) + (f" → then {later}" if later else ""))
    if len(s["lineage"]) > 1:
        print("  lineage (times served: maintained / append-only memory):")
        for n, node in enumerate(s["lineage"], 1):
            print(
                f"    {n}. [{node['state']}] {node['text']}  "
                f"({node['served_maintained']} / {node['served_append_only']})"
            )
    else:
        node = s["lineage"][0]
        print(
            f"  served in {node['served_maintained']} tasks by the maintained memory, "
            f"in {node['served_append_only']} by the append-only one"
        )
    for twin in s["append_only"]:
        print(
            f"  in the append-only memory the same text is {twin['state']} "
            f"with {twin['positive']} positive evidence"
        )


#: The model name the demo's LLM judge answers as: it has no price, so no cost is made up for it.
DEMO_LLM_MODEL = "evomem-demo-judge"


#: Time limits for a model on a shared CPU: one call of eight events can take a minute or more.
CPU_MODEL_LIMITS: tuple[tuple[str, Any], ...] = (
    ("llm_timeout_s", 300.0),
    ("batch_time_limit_s", 1200.0),
    ("claim_idle_ms", 1_500_000),
    ("visibility_timeout_s", 1500),
)


@dataclass(frozen=True)
class Judge:
    """The OpenAI-compatible endpoint that judges the maintained memory, and what it is."""

    url: str
    model: str = DEMO_LLM_MODEL
    label: str = "local test server"
    api_key: str = "local"  # local servers need none; the client insists on one
    tokenizer: str = "estimate"
    settings: tuple[tuple[str, Any], ...] = ()  # what this endpoint needs beyond the defaults


@contextmanager
def memories(
    root: Path, policy: ArchivePolicy, judge: Judge | None = None
) -> Iterator[tuple[Memory, Memory]]:
    """The maintained memory (every operation) and the append-only one, each with its own stores.
    With a ``judge`` the maintained memory's controller is the LLM one, against that endpoint (the
    other LLM settings, such as ``EVOMEM_LLM_CONCURRENCY``, come from the environment)."""
    modes: tuple[OperationsMode, OperationsMode] = ("all", "add+keep")
    with ExitStack() as stack:
        opened = []
        for sub, mode in zip(ARM_DIRS, modes, strict=True):
            llm: dict[str, Any] = {"controller": "rules"}
            if judge is not None and mode == "all":
                llm = {
                    "controller": "llm",
                    "llm_base_url": judge.url,
                    "llm_api_key": judge.api_key,
                    "llm_model": judge.model,
                    "llm_tokenizer": judge.tokenizer,
                    **dict(judge.settings),
                }
            settings = Settings(
                data_dir=root / sub,
                redis_url=None,
                qdrant_url=None,
                operations=mode,
                archive_policy=policy,
                embedder="hashing",
                **llm,
            )
            opened.append(stack.enter_context(Memory.open_local(settings)))
        yield opened[0], opened[1]


def simulate(
    args: argparse.Namespace, root: Path, say: Callable[[str], None], judge: Judge | None = None
) -> dict[str, Any]:
    tasks = make_tasks(args.tasks, args.seed)
    phases = max(1, min(args.phases, len(tasks)))
    bounds = [round(len(tasks) * k / phases) for k in range(phases + 1)]
    llm: dict[str, Any] | None = None
    with memories(root, args.archive_policy, judge) as (maintained, baseline):
        arms = [Arm("maintained", maintained), Arm("append-only", baseline), Arm("no memory", None)]
        say(
            f"{len(tasks)} tasks from 3 families, {args.agents} agents, seed {args.seed}; "
            f"consolidation every {args.batch} tasks; memories under {root}"
        )
        rates: dict[str, list[float]] = {a.name: [] for a in arms}
        show = wanted(getattr(args, "progress", None)) and not args.quiet
        for ph in range(phases):
            label = f"phase {ph + 1}/{phases}: tasks × memories"
            with Progress(
                None, label, (bounds[ph + 1] - bounds[ph]) * len(arms), show, transient=True
            ) as bar:
                for start in range(bounds[ph], bounds[ph + 1], args.batch):
                    batch = tasks[start : min(start + args.batch, bounds[ph + 1])]
                    for arm in arms:  # the same tasks and draws for each arm, batch by batch
                        for task in batch:
                            run_task(arm, task, args.agents, args.seed)
                        consolidate(arm)
                        bar.advance(len(batch))
            for arm in arms:
                rates[arm.name].append(rate(arm.outcomes[bounds[ph] : bounds[ph + 1]]))
            nodes = all_insights(maintained)
            say(
                f"phase {ph + 1}/{phases}  tasks {bounds[ph] + 1:>4}-{bounds[ph + 1]:<4} success: "
                + "   ".join(f"{a.name} {rates[a.name][-1]:5.1%}" for a in arms)
            )
            say(
                f"    maintained memory: {fmt_outcomes(arms[0].phase_outcomes)}; "
                f"{sum(n.active for n in nodes)} of {len(nodes)} insights active"
            )
            arms[0].phase_outcomes.clear()
        told = stories(arms[0], arms[1])
        summary_arms = {}
        for a in arms:
            nodes = all_insights(a.memory)
            summary_arms[a.name] = {
                "success_rate": rate(a.outcomes),
                "phases": rates[a.name],
                "served_helpful": a.helped / len(tasks),
                "served_harmful": a.harmed / len(tasks),
                "insights_active": sum(n.active for n in nodes),
                "insights_total": len(nodes),
                "operations": dict(a.operations),
                "outcomes": dict(a.outcome_counts),
            }
        if judge is not None:
            llm = {
                **maintained.runtime.llm_usage(),
                "endpoint": judge.label,
                "events_applied": arms[0].applied,
                "events_dead_lettered": arms[0].dead_lettered,
                "dead_letter_reasons": [d["reason"] for d in maintained.stream.dlq(3)],
                "events_per_s": round(arms[0].applied / arms[0].consolidate_s, 3)
                if arms[0].consolidate_s
                else None,
            }
    out = {
        "seed": args.seed,
        "tasks": len(tasks),
        "agents": args.agents,
        "batch": args.batch,
        "archive_policy": args.archive_policy,
        "arms": summary_arms,
        "stories": told,
    }
    if llm is not None:
        out["llm"] = llm
    return out


def print_table(summary: dict[str, Any]) -> None:
    print(
        f"\n{'memory':<13}{'success':>9}{'first phase':>13}{'last phase':>12}{'helpful served':>16}"
        f"{'harmful served':>16}{'active insights':>17}"
    )
    for name, a in summary["arms"].items():
        ins = f"{a['insights_active']} of {a['insights_total']}" if name != "no memory" else "-"
        print(
            f"{name:<13}{a['success_rate']:>9.1%}{a['phases'][0]:>13.1%}{a['phases'][-1]:>12.1%}"
            f"{a['served_helpful']:>16.1%}{a['served_harmful']:>16.1%}{ins:>17}"
        )
    for name in ("maintained", "append-only"):
        ops = summary["arms"][name]["operations"]
        print(
            f"{name} operations: "
            + ", ".join(f"{op} {ops.get(op, 0)}" for op in ("ADD", "KEEP", "ARCHIVE", "REVISE"))
        )
    llm = summary.get("llm")
    if llm is not None:
        print(
            f"maintained memory judged by the LLM controller ({llm['endpoint']}): {llm['calls']} calls for "
            f"{llm['events_judged']} events, {llm['prompt_tokens_per_event']} prompt and "
            f"{llm['completion_tokens_per_event']} completion tokens per event; "
            f"{llm['events_applied']} events applied, {llm['events_dead_lettered']} dead-lettered, "
            f"{llm['events_per_s']} events/s consolidated"
        )
        for reason in llm["dead_letter_reasons"]:
            print(f"  a dead letter's reason: {reason[:300]}")
    print(f"wall time {summary['wall_s']:.1f} s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=900, help="tasks in the run (default 900)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the simulated world (default 7)")
    parser.add_argument("--agents", type=int, default=8, help="agents in the fleet (skills differ a little)")
    parser.add_argument("--batch", type=int, default=24, help="tasks between consolidations (default 24)")
    parser.add_argument("--phases", type=int, default=5, help="progress lines (default 5)")
    parser.add_argument(
        "--archive-policy",
        choices=["evidence", "immediate"],
        default="evidence",
        help="of the maintained memory (default evidence)",
    )
    parser.add_argument("--data-dir", type=Path, help="keep the two memories here (default: a temporary dir)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary only")
    parser.add_argument(
        "--llm",
        action="store_true",
        help="judge the maintained memory with the LLM controller, on a local test server",
    )
    parser.add_argument(
        "--llm-url",
        help="judge the maintained memory with the LLM controller against this OpenAI-compatible endpoint",
    )
    parser.add_argument("--llm-model", help="the model to ask at --llm-url (default: the endpoint's first)")
    parser.add_argument(
        "--llm-local",
        action="store_true",
        help="judge with a real small model: llama.cpp's server on SmolLM2-135M-Instruct (make llm-local)",
    )
    parser.add_argument(
        "--llm-latency-ms",
        type=float,
        default=50.0,
        help="the local server's delay per request with --llm (default 50)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines or stories, just the table")
    add_flag(parser)


def open_judge(args: argparse.Namespace, stack: ExitStack, say: Callable[[str], None]) -> Judge | None:
    """The endpoint ``--llm``, ``--llm-local`` or ``--llm-url`` asks for, started if it is ours."""
    if args.llm_url:
        model = args.llm_model or first_model(args.llm_url)
        say(f"LLM controller: {model} at {args.llm_url}")
        return Judge(args.llm_url, model, f"{model} at {args.llm_url}", tokenizer="auto")
    if args.llm_local:
        from evomem.testing.local_llm import LocalLLMServer

        say("LLM controller: starting llama.cpp's server on SmolLM2-135M-Instruct …")
        server = stack.enter_context(LocalLLMServer())
        say(f"LLM controller: {server.alias} on llama.cpp at {server.url}")
        return Judge(server.url, server.alias, f"{server.alias} on llama.cpp", settings=CPU_MODEL_LIMITS)
    if args.llm:
        from evomem.testing.llm_server import LLMTestServer

        url = stack.enter_context(LLMTestServer(latency_s=args.llm_latency_ms / 1000)).url
        say(f"LLM controller: a local OpenAI-compatible test server at {url}")
        return Judge(url)
    return None


def first_model(url: str) -> str:
    """The first model an endpoint lists (a local server usually serves one)."""
    import httpx

    try:
        models = httpx.get(f"{url.rstrip('/')}/models", timeout=10).json()["data"]
        return str(models[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        raise ConfigError(f"{url} lists no model: give one with --llm-model") from None


def run(args: argparse.Namespace) -> int:
    if args.tasks < 1 or args.agents < 1 or args.batch < 1 or args.phases < 1:
        sys.stderr.write("evomem demo: --tasks, --agents, --batch and --phases must be positive\n")
        return 2
    say: Callable[[str], None] = (lambda _msg: None) if args.quiet or args.json else print
    started = time.perf_counter()
    with ExitStack() as stack:
        if args.data_dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evomem-demo-")))
        else:
            root = args.data_dir.resolve()
            if any((root / sub).is_dir() and any((root / sub).iterdir()) for sub in ARM_DIRS):
                sys.stderr.write(f"evomem demo: {root} already holds a demo run; pick an empty --data-dir\n")
                return 2
            if root.exists() and (not root.is_dir() or any(p.name not in ARM_DIRS for p in root.iterdir())):
                # never write beside what a user keeps there (a project, a home directory)
                sys.stderr.write(f"evomem demo: {root} is not empty; pick an empty or new --data-dir\n")
                return 2
        try:
            judge = open_judge(args, stack, say)
        except EvomemError as exc:
            sys.stderr.write(f"evomem demo: {exc}\n")
            return 2
        summary = simulate(args, root, say, judge)
    summary["wall_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for s in summary["stories"] if not args.quiet else []:
        print_story(s)
    print_table(summary)
    if args.data_dir is not None:
        print(f"memories kept under {root} (EVOMEM_DATA_DIR={root / 'maintained'} evomem inspect -n fever)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evomem demo", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
