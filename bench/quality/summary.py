"""From runs to figures: per (world, arm) means and spreads over seeds, the issue's targets as
PASS/FAIL lines, the printed table, and the evidence behind a failed target."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The final window: this share of the horizon, at its end.
FINAL_WINDOW = 0.2
#: Points of a stored success curve (means over bins of tasks, averaged over seeds).
CURVE_POINTS = 30
METRICS = (
    "final_success",
    "success",
    "pollution",
    "helpful_share",
    "wrongful_archives",
    "hit1_verbatim",
    "hit1_paraphrase",
    "served_verbatim",
    "served_paraphrase",
    "active",
    "archived",
    "prompt_tokens_per_event",
)


def run_metrics(run: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures of one run; None where a figure has nothing to count."""
    success: list[int] = run["success"]
    window = success[-max(1, round(FINAL_WINDOW * len(success))) :]
    hits = run["hits"]
    return {
        "final_success": _ratio(sum(window), len(window)),
        "success": _ratio(sum(success), len(success)),
        "pollution": _ratio(run["harmful_served"], run["served"]),
        "helpful_share": _ratio(run["helpful_served"], run["served"]),
        "wrongful_archives": _ratio(run.get("good_archived", 0), run.get("good_insights", 0)),
        "hit1_verbatim": _ratio(hits["verbatim"]["first"], hits["verbatim"]["n"]),
        "hit1_paraphrase": _ratio(hits["paraphrase"]["first"], hits["paraphrase"]["n"]),
        "served_verbatim": _ratio(hits["verbatim"]["served"], hits["verbatim"]["n"]),
        "served_paraphrase": _ratio(hits["paraphrase"]["served"], hits["paraphrase"]["n"]),
        "active": run.get("active"),
        "archived": run.get("archived"),
        "prompt_tokens_per_event": (run.get("llm") or {}).get("prompt_tokens_per_event"),
    }


def spread(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Mean, standard deviation, min and max over the seeds that have the figure."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": round(statistics.fmean(xs), 4),
        "std": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0,
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
        "n": len(xs),
    }


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """world → arm → metric → spread over seeds (plus pooled repeat-query counts and edit totals)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["world"], run["arm"]), []).append(run)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (world, arm), rs in groups.items():
        per_seed = [run_metrics(r) for r in rs]
        figures: dict[str, Any] = {m: spread(p[m] for p in per_seed) for m in METRICS}
        for kind in ("verbatim", "paraphrase"):
            figures[f"returns_{kind}"] = {
                k: sum(r["hits"][kind][k] for r in rs) for k in ("first", "served", "n")
            }
        figures["missed_for"] = dict(sum((Counter(r["missed_for"]) for r in rs), Counter()))
        figures["seeds"] = sorted(r["seed"] for r in rs)
        figures["operations"] = dict(sum((Counter(r["operations"]) for r in rs), Counter()))
        figures["outcomes"] = dict(sum((Counter(r["outcomes"]) for r in rs), Counter()))
        figures["good_archived_by"] = dict(
            sum((Counter(r.get("good_archived_by", {})) for r in rs), Counter())
        )
        figures["dead_lettered"] = sum(r["dead_lettered"] for r in rs)
        figures["unknown_served"] = sum(r["unknown_served"] for r in rs)
        figures["seconds"] = spread(r["seconds"] for r in rs)
        out.setdefault(world, {})[arm] = figures
    return out


def curves(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """world → arm → success per task, averaged over seeds (the plot's input)."""
    sums: dict[tuple[str, str], list[list[int]]] = {}
    for run in runs:
        sums.setdefault((run["world"], run["arm"]), []).append(run["success"])
    out: dict[str, dict[str, list[float]]] = {}
    for (world, arm), series in sums.items():
        n = min(len(s) for s in series)
        out.setdefault(world, {})[arm] = [statistics.fmean(s[i] for s in series) for i in range(n)]
    return out


def binned(curve: Sequence[float], points: int = CURVE_POINTS) -> list[float]:
    """The curve as ``points`` bin means (for results.json)."""
    n = len(curve)
    edges = [round(n * k / points) for k in range(points + 1)]
    return [round(statistics.fmean(curve[a:b]), 4) for a, b in itertools.pairwise(edges) if b > a]


# -- the targets ------------------------------------------------------------------------
#: The judge of the targets: "with a 10%-wrong judge, the default configuration ..." (issue 8).
TARGET_JUDGE_ERROR = 0.10


def targets(
    figures: Mapping[str, Mapping[str, Mapping[str, Any]]],
    judge_error: Mapping[str, float],
    default: str,
    append_only: str,
    no_judge: str,
) -> list[dict[str, Any]]:
    """The acceptance targets, world by world. They are the default configuration's with a 10%-wrong
    judge: in each world whose judge errs 10% of the time it ends >= 15 points above add+keep,
    serves at most a third of its pollution, ranks the lesson a returning query taught first for
    >= 90% of the returns (verbatim and paraphrased), and archives at most 5% of the good insights
    (``scope`` "target", a PASS/FAIL line). The same bounds are also reported where the targets do
    not apply (``scope`` "reported", never a PASS or a FAIL): under a judge that is never wrong or
    wrong 30% of the time, and for the rule controller without any judge."""
    out: list[dict[str, Any]] = []

    def mean(world: str, arm: str, metric: str) -> float | None:
        value = figures.get(world, {}).get(arm, {}).get(metric, {}).get("mean")
        return None if value is None else float(value)

    def check(
        name: str, world: str, arms: list[str], value: float | None, bound: float, le: bool, scope: str
    ) -> None:
        ok = value is not None and (value <= bound if le else value >= bound)
        out.append(
            {
                "target": name,
                "world": world,
                "arms": arms,
                "value": value,
                "bound": bound,
                "pass": ok,
                "scope": scope,
            }
        )

    for world in figures:
        scope = "target" if abs(judge_error.get(world, 0.0) - TARGET_JUDGE_ERROR) < 1e-9 else "reported"
        if scope == "target":
            d, a = mean(world, default, "final_success"), mean(world, append_only, "final_success")
            gain = None if d is None or a is None else d - a
            check(
                "final-window success − add+keep ≥ 0.15",
                world,
                [default, append_only],
                gain,
                0.15,
                False,
                scope,
            )
            dp, ap = mean(world, default, "pollution"), mean(world, append_only, "pollution")
            ratio = None if dp is None or ap is None else (dp / ap if ap > 0 else (0.0 if dp == 0 else None))
            check("pollution ÷ add+keep's ≤ 1/3", world, [default, append_only], ratio, 1 / 3, True, scope)
        value = mean(world, default, "wrongful_archives")
        check("good insights archived ≤ 5%", world, [default], value, 0.05, True, scope)
        for arm in (default, no_judge):
            for kind in ("verbatim", "paraphrase"):
                check(
                    f"repeat-query hit@1 ({kind}) ≥ 0.9",
                    world,
                    [arm],
                    mean(world, arm, f"hit1_{kind}"),
                    0.9,
                    False,
                    scope if arm == default else "reported",
                )
    return out


def target_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The targets as PASS/FAIL lines, then the figures reported beside them against the same bounds."""

    def line(t: Mapping[str, Any], mark: str) -> str:
        value = "n/a" if t["value"] is None else f"{t['value']:.3f}"
        arms = " vs ".join(t["arms"])
        return f"{mark:<7} {t['world']:<12} {t['target']:<38} {value:>7}  ({arms})"

    lines = [line(t, "PASS" if t["pass"] else "FAIL") for t in results if t["scope"] == "target"]
    reported = [t for t in results if t["scope"] == "reported"]
    if reported:
        lines.append(
            "reported against the same bounds, not targets (another judge than the targets', or no judge):"
        )
        lines += [line(t, "within" if t["pass"] else "outside") for t in reported]
    return lines


# -- the table ----------------------------------------------------------------------------------
COLUMNS = (
    ("final_success", "final"),
    ("success", "overall"),
    ("pollution", "polluted"),
    ("helpful_share", "helpful"),
    ("wrongful_archives", "good arch"),
    ("hit1_verbatim", "hit1 same"),
    ("hit1_paraphrase", "hit1 para"),
    ("served_verbatim", "topB same"),
    ("served_paraphrase", "topB para"),
    ("active", "active"),
    ("archived", "archived"),
    ("prompt_tokens_per_event", "tok/event"),
)


def table(figures: Mapping[str, Mapping[str, Mapping[str, Any]]], worlds: Mapping[str, str]) -> str:
    """Per world, one row per arm: mean ± std over seeds (counts and tokens: the mean)."""
    lines = [
        "final: success in the final window; overall: over the run; polluted / helpful: share of served "
        "insights that harmed / helped where served; good arch: share of good insights archived; hit1: the "
        "lesson a returning query taught ranked first (same text / paraphrased); topB: served at all"
    ]
    for world, arms in figures.items():
        lines.append(f"\n{world}: {worlds.get(world, '')}")
        head = f"{'arm':<26}" + "".join(f"{label:>10}" for _, label in COLUMNS)
        lines += [head, "-" * len(head)]
        for arm, f in arms.items():
            cells = []
            for metric, _ in COLUMNS:
                s = f[metric]
                if s["mean"] is None:
                    cells.append("-")
                elif metric in ("active", "archived", "prompt_tokens_per_event"):
                    cells.append(f"{s['mean']:.0f}")
                else:
                    cells.append(f"{s['mean']:.2f}±{s['std']:.2f}")
            lines.append(f"{arm:<26}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


#: What the staleness and review-gate arms did, summed over seeds (``ConsolidationReport.outcomes``).
LIFECYCLE = ("stale", "held", "review_approved", "review_rejected", "review_wrong")


def lifecycle_lines(figures: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Per world, the arms that archived stale insights or held edits: how many, summed over seeds."""
    lines = []
    for world, arms in figures.items():
        for arm, f in arms.items():
            out = f.get("outcomes", {})
            if any(out.get(k) for k in LIFECYCLE):
                counts = ", ".join(f"{k.replace('review_', '')} {out.get(k, 0)}" for k in LIFECYCLE)
                lines.append(f"  {world:<12} {arm:<26} {counts}")
    if lines:
        lines.insert(0, "staleness and review (summed over seeds; wrong: the reviewer's wrong decisions):")
    return lines


# -- evidence -----------------------------------------------------------------------------------
def evidence_lines(run: Mapping[str, Any], edits_shown: int = 10) -> list[str]:
    """What one run served most and which edits it made, by the ground-truth kind of the insight."""
    lines = [f"  {run['arm']} (seed {run['seed']}): most served lessons"]
    for row in run.get("top_served", []):
        lines.append(
            f"    {row['served']:>5}× {row['kind']:<9} of {row['home']:<26} harmful where served "
            f"{row['harmful_where_served']:>4}; {row['nodes']} node(s) {row['states']}, "
            f"|Ω⁺| {row['positive']}, |Ω⁻| {row['negative']}: “{row['text'][:70]}”"
        )
    edits = Counter(run.get("edits", {}))
    if edits:
        lines.append("    edits (insight kind | op | outcome | decided by), most frequent:")
        lines += [f"      {n:>5}  {key}" for key, n in edits.most_common(edits_shown)]
    missed = Counter(run.get("missed_for", {}))
    if missed:
        lines.append(
            "    when a taught lesson came back and was not ranked first, first was: "
            + ", ".join(f"{k} {n}" for k, n in missed.most_common())
        )
    if run.get("good_insights"):
        lines.append(
            f"    good insights archived: {run['good_archived']} of {run['good_insights']}, "
            f"by {run.get('good_archived_by') or '-'}"
        )
    return lines


def _ratio(a: float, b: float) -> float | None:
    return None if not b else a / b


__all__ = [
    "FINAL_WINDOW",
    "LIFECYCLE",
    "METRICS",
    "aggregate",
    "binned",
    "curves",
    "evidence_lines",
    "lifecycle_lines",
    "run_metrics",
    "spread",
    "table",
    "target_lines",
    "targets",
]
