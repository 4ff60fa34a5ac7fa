"""What a growth run prints and how it is judged: the tables, issue 13's acceptance checks on the
run's own figures, and the summary of a profile."""

from __future__ import annotations

import cProfile
import io
import pstats
from typing import Any

# What the issue accepts (issue 13): rates and ratios within one run.
MIN_LAST_TO_FIRST_RATE = 2 / 3
MAX_RETRIEVE_P50_GROWTH = 1.5
MAX_HOT_TO_FRESH = 1.5


def _alternating(together: dict[str, Any]) -> str:
    per_task = together.get("per_task")
    return "" if per_task is None else f" (alternating task by task: ratio {per_task['p50_ratio']})"


def checks(
    points: list[dict[str, Any]], hot_doc: dict[str, Any] | None, paired: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The acceptance checks that this run's figures allow: throughput with one checkpoint,
    retrieve p50 growth with two or more, the hot/fresh ratios with the hot insight. Throughput and
    retrieve p50 come from ``paired`` when it has them (an empty memory's first window and tasks
    on the grown one, alternated; the first and last checkpoints' memories measured together); the
    figures of the build itself, taken minutes apart, are in the detail either way."""
    out: list[dict[str, Any]] = []
    if points:
        last = points[-1]
        first_rate = last["first_window"]["tasks_per_s"]
        last_rate = last["last_window"]["tasks_per_s"]
        ratio = last_rate / first_rate if first_rate and last_rate else None
        cpu_first = last["first_window"].get("cpu_tasks_per_s")
        cpu_last = last["last_window"].get("cpu_tasks_per_s")
        cpu_ratio = cpu_last / cpu_first if cpu_first and cpu_last else None
        apart = (
            f"tasks/s over tasks {last['last_window']['from_task']:,}-{last['tasks']:,}: "
            f"{last_rate} against {first_rate} over the first {last['first_window']['tasks']:,}, ratio "
            f"{'-' if ratio is None else f'{ratio:.3f}'}; by CPU time (this process + redis-server, "
            f"load-independent) {cpu_last} against {cpu_first}, ratio "
            f"{'-' if cpu_ratio is None else f'{cpu_ratio:.3f}'} (issue: the last 5,000 of 100,000)"
        )
        rates = (paired or {}).get("throughput")
        if rates is not None and rates["grown"]["from_task"] == last["tasks"] + 1:
            value = rates["ratio"]
            detail = (
                f"{rates['grown']['tasks_per_s']} tasks/s over tasks {rates['grown']['from_task']:,}-"
                f"{rates['grown']['to_task']:,} against {rates['empty']['tasks_per_s']} over an empty "
                f"memory's first {rates['window']:,}, measured together (blocks of {rates['block']} "
                f"alternating; by CPU time {rates['cpu_ratio']}); in the build: " + apart
            )
        else:
            value, detail = ratio, apart
        check = _check(
            "throughput_last_vs_first_window", value, MIN_LAST_TO_FIRST_RATE, at_least=True, detail=detail
        )
        check["in_build"] = None if ratio is None else round(ratio, 3)
        check["cpu_value"] = None if cpu_ratio is None else round(cpu_ratio, 3)
        out.append(check)
    if len(points) >= 2:
        small, large = points[0], points[-1]
        p_small, p_large = small["retrieve_sample"]["p50_ms"], large["retrieve_sample"]["p50_ms"]
        b_small = small.get("retrieve_in_build_last_window", {}).get("p50_ms")
        b_large = large.get("retrieve_in_build_last_window", {}).get("p50_ms")
        in_build = f"{b_large / b_small:.3f}" if b_small and b_large else "-"
        at_checkpoints = p_large / p_small if p_small else None
        apart = (
            f"retrieve p50 {p_large} ms at {large['tasks']:,} tasks against {p_small} ms at "
            f"{small['tasks']:,}, each sampled at its checkpoint, ratio "
            f"{'-' if at_checkpoints is None else f'{at_checkpoints:.3f}'}; the build's own retrievals "
            f"over the last window (between edits) {b_large} against {b_small} ms, ratio {in_build} "
            "(issue: 100,000 against 10,000)"
        )
        together = (paired or {}).get("retrieve")
        if together is not None and (together["small_tasks"], together["large_tasks"]) == (
            small["tasks"],
            large["tasks"],
        ):
            by = together["by_tasks"]
            p_small_now, p_large_now = by[str(small["tasks"])]["p50_ms"], by[str(large["tasks"])]["p50_ms"]
            value, detail = (
                together["p50_ratio"],
                f"retrieve p50 {p_large_now} ms at {large['tasks']:,} tasks against {p_small_now} ms at "
                f"{small['tasks']:,}, both memories measured together at the end in blocks of "
                f"{together.get('block', 1)} tasks{_alternating(together)}; " + apart,
            )
        else:
            value, detail = at_checkpoints, apart
        check = _check("retrieve_p50_growth", value, MAX_RETRIEVE_P50_GROWTH, detail=detail)
        check["at_checkpoints"] = None if at_checkpoints is None else round(at_checkpoints, 3)
        out.append(check)
    if hot_doc is not None:
        per = hot_doc["insights"]
        for what, key in (("KEEP", "keep"), ("retrieve", "retrieve")):
            hot_ms, fresh_ms = per["hot"][f"{key}_median_ms"], per["fresh"][f"{key}_median_ms"]
            out.append(
                _check(
                    f"hot_{key}_ratio",
                    hot_ms / fresh_ms if hot_ms and fresh_ms else None,
                    MAX_HOT_TO_FRESH,
                    detail=f"{what} median {hot_ms} ms on the insight with {hot_doc['evidence']:,} evidence "
                    f"ids against {fresh_ms} ms on a fresh one (issue: 100,000 ids)",
                )
            )
    return out


def _check(
    name: str, value: float | None, limit: float, *, detail: str, at_least: bool = False
) -> dict[str, Any]:
    passed = value is not None and (value >= limit if at_least else value <= limit)
    return {
        "name": name,
        "value": None if value is None else round(value, 3),
        "limit": round(limit, 3),
        "rule": ">=" if at_least else "<=",
        "passed": passed,
        "detail": detail,
    }


HOT_COLUMNS = ("retrieve", "retrieve_repeat", "report", "consolidate", "project", "keep")


def format_table(
    points: list[dict[str, Any]], hot_doc: dict[str, Any] | None, check_list: list[dict[str, Any]]
) -> str:
    lines: list[str] = []
    if points:
        lines += [*_throughput_table(points), "", *_latency_table(points)]
    if hot_doc is not None:
        lines += ["", *_hot_table(hot_doc)]
    if check_list:
        lines.append("")
        for c in check_list:
            verdict = "PASS" if c["passed"] else "FAIL"
            lines.append(
                f"{verdict} {c['name']}: {c['value']} (needs {c['rule']} {c['limit']}); {c['detail']}"
            )
    return "\n".join(lines)


def _throughput_table(points: list[dict[str, Any]]) -> list[str]:
    win = points[0]["first_window"]["tasks"]
    head = (
        f"{'tasks':>9} {'build s':>8} {'t/s first':>9} {'t/s last':>9} | ms/task over the last {win:,}: "
        f"{'retrieve':>8} {'report':>8} {'consol.':>8} {'(proj.)':>8} {'other':>8} | CPU ms/task"
    )
    lines = [head, "-" * len(head)]
    for c in points:
        ms = c["last_window"]["ms_per_task"]
        lines.append(
            f"{c['tasks']:>9,} {c['build_s']:>8.1f} {c['first_window']['tasks_per_s']:>9.1f} "
            f"{c['last_window']['tasks_per_s']:>9.1f} | {'':>{len(f'ms/task over the last {win:,}:')}} "
            + " ".join(_f(ms[k], 8) for k in ("retrieve", "report", "consolidate", "project", "other"))
            + f" | {_f(c['last_window']['cpu_ms_per_task']['total'], 11)}"
        )
    return lines


def _latency_table(points: list[dict[str, Any]]) -> list[str]:
    head = (
        f"{'tasks':>9} | retrieve sample {'p50':>6} {'p99':>6} ms {'|Q̃|':>6} | RSS MB: {'python':>7} "
        f"{'redis':>7} | {'queries':>8} {'active':>7} {'archived':>8} {'max |Ω⁺|':>9} {'≥1000':>5}"
    )
    lines = [head, "-" * len(head)]
    for c in points:
        s, m, rss = c["retrieve_sample"], c["memory"], c["rss_mb"]
        lines.append(
            f"{c['tasks']:>9,} | {'':>15} {s['p50_ms']:>6.2f} {s['p99_ms']:>6.2f}    "
            f"{_f(s['expanded_mean'], 6, 1)} | {'':>7} {_f(rss['python'], 7, 0)} {_f(rss['redis'], 7, 0)} | "
            f"{m['queries']:>8,} {m['active']:>7,} {m['archived']:>8,} {m['positive_max']:>9,} "
            f"{m['insights_ge_1000_positive']:>5}"
        )
    return lines


def _hot_table(hot_doc: dict[str, Any]) -> list[str]:
    lines = [
        f"hot insight: {hot_doc['evidence']:,} evidence ids against 1; medians of "
        f"{hot_doc['reps']} rounds, ms",
        f"  {'':<6} " + " ".join(f"{k.replace('retrieve_', ''):>11}" for k in HOT_COLUMNS),
    ]
    for name in ("hot", "fresh"):
        p = hot_doc["insights"][name]
        lines.append(
            f"  {name:<6} "
            + " ".join(_f(p[f"{k}_median_ms"], 11) for k in HOT_COLUMNS)
            + f"   served {p['served']}/{p['retrievals']}"
        )
    r = hot_doc["ratios_hot_to_fresh"]
    lines.append("  ratio  " + " ".join(_f(r.get(k), 11) for k in HOT_COLUMNS))
    return lines


def _f(value: float | None, width: int = 6, decimals: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{decimals}f}"


def profile_summary(profiler: cProfile.Profile, top: int) -> tuple[str, list[dict[str, Any]]]:
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("cumulative")
    stats.print_stats(top)
    rows = sorted(stats.get_stats_profile().func_profiles.items(), key=lambda kv: -kv[1].cumtime)[:top]
    table = [
        {
            "function": f"{fp.file_name}:{fp.line_number}({name})",
            "ncalls": fp.ncalls,
            "tottime_s": round(fp.tottime, 3),
            "cumtime_s": round(fp.cumtime, 3),
        }
        for name, fp in rows
    ]
    return text.getvalue(), table


__all__ = ["HOT_COLUMNS", "checks", "format_table", "profile_summary"]
