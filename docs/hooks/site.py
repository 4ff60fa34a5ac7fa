"""The documentation site's generated pages, built by MkDocs (``hooks:`` in mkdocs.yml) at every build.

The reference pages come from the code itself: the settings from ``evomem.Settings``, the command
line from ``evomem.cli.build_parser()``, the HTTP API from ``evomem.service.api.openapi()``, the Python
API from what ``evomem`` exports (rendered by mkdocstrings from its docstrings); the
benchmark page and its plots from ``bench/results.json``; the lab notes' index from ``docs/lab/``.
Nothing generated is written into the source tree. tests/unit/test_docs.py imports this file too.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from evomem.settings import SECTION_TITLES as _SECTION_TITLES
from evomem.settings import SECTIONS as _SECTIONS
from evomem.settings import env_names as _env_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "bench" / "results.json"
QUALITY_PLOT = ROOT / "bench" / "quality.png"


def _checkout_importable() -> None:
    """bench/ is not installed: the checkout's root goes on sys.path when pages are made (MkDocs
    restores sys.path after loading a hook, so doing it at import time would not last)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


#: The sections of ``Settings``, in the order the settings page shows them (evomem/settings.py).
SECTIONS = _SECTIONS
OTHER = "other"
SECTION_TITLES = {**_SECTION_TITLES, OTHER: "Other"}

# --------------------------------------------------------------------------------------- settings


def env_names(name: str, field: Any) -> list[str]:
    """The environment variables a field is read from, the ``EVOMEM_`` one first."""
    return list(_env_names(name))


def section_of(field: Any) -> str:
    extra = field.json_schema_extra
    section = extra.get("section") if isinstance(extra, Mapping) else None
    return section if isinstance(section, str) and section else OTHER


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _type_text(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    args = [a for a in get_args(annotation) if a is not type(None)]
    if args and len(args) < len(get_args(annotation)):  # Optional[...]
        return _type_text(args[0] if len(args) == 1 else args)
    name = getattr(annotation, "__name__", None) or str(annotation)
    return {"SecretStr": "secret", "str": "text", "Path": "path"}.get(name, name)


def _bounds(field: Any) -> str:
    parts = []
    for m in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(m, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def _default_text(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        return "computed at start"
    default = field.default
    if default is PydanticUndefined:
        return "required"
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def settings_by_section() -> dict[str, list[tuple[str, Any]]]:
    from evomem.settings import Settings

    groups: dict[str, list[tuple[str, Any]]] = {s: [] for s in (*SECTIONS, OTHER)}
    for name, field in Settings.model_fields.items():
        section = section_of(field)
        groups.setdefault(section, []).append((name, field))
    return {s: fields for s, fields in groups.items() if fields}


def settings_page() -> str:
    groups = settings_by_section()
    total = sum(len(v) for v in groups.values())
    out = [
        "# Settings",
        "",
        "Generated at build time from `evomem.Settings` (evomem/settings.py): every field, its environment",
        f"variable, default and description, grouped by the field's section. {total} settings.",
        "",
        "Every setting is an environment variable with the prefix `EVOMEM_`, read into one typed, frozen",
        "object when `Settings()` (or `Memory.open()`) is called; `Memory.open(Settings(...))` takes one",
        "built in code. `evomem settings show` prints the effective values; a namespace may override a",
        "few of them at run time ([tenancy](../guides/tenancy.md)).",
        "",
    ]
    for section, fields in groups.items():
        out += [f"## {SECTION_TITLES.get(section, section.title())}", ""]
        out += ["| variable | default | type | meaning |", "|---|---|---|---|"]
        for name, field in fields:
            names = env_names(name, field)
            var = f"`{names[0]}`" + "".join(f" (also `{n}`)" for n in names[1:])
            kind = _type_text(field.annotation)
            bounds = _bounds(field)
            if bounds:
                kind += f" ({bounds})"
            meaning = _cell(field.description or "")
            out.append(f"| {var} | {_default_text(field)} | {kind} | {meaning} |")
        out.append("")
    return "\n".join(out)


# -------------------------------------------------------------------------------------------- CLI


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or default == [] else f"`{default}`"
        choices = f" (one of {', '.join(f'`{c}`' for c in action.choices)})" if action.choices else ""
        what = _cell(action.help % vars(action)) if action.help else ""
        rows.append(f"| {name} | {what}{choices} | {shown} |")
    return rows


def _fixed_width(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=96)
    for sub in _subcommands(parser).values():
        _fixed_width(sub)


#: Commands whose parser only hands its arguments on (``delegated``), and the module whose
#: ``add_arguments`` builds the real one.
DELEGATED = {"evomem demo": "evomem.demo", "evomem bench": "bench.retrieval"}


def _delegated_parser(parser: argparse.ArgumentParser, path: str) -> argparse.ArgumentParser:
    if not parser.get_default("delegated") or path not in DELEGATED:
        return parser
    import importlib

    _checkout_importable()
    real = argparse.ArgumentParser(
        prog=path, formatter_class=lambda prog: argparse.HelpFormatter(prog, width=96)
    )
    importlib.import_module(DELEGATED[path]).add_arguments(real)
    return real


def _cli_section(parser: argparse.ArgumentParser, path: str, help_text: str, depth: int) -> list[str]:
    parser = _delegated_parser(parser, path)
    out = [f"{'#' * depth} `{path}`", ""]
    if help_text:
        out += [help_text[0].upper() + help_text[1:] + ("" if help_text.endswith(".") else "."), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = _argument_rows(parser)
    if rows:
        out += ["| argument | what | default |", "|---|---|---|", *rows, ""]
    helps = _help_of(parser)
    for name, sub in _subcommands(parser).items():
        out += _cli_section(sub, f"{path} {name}", helps.get(name, ""), min(depth + 1, 4))
    return out


def cli_page() -> str:
    from evomem.cli import build_parser

    parser = build_parser()
    _fixed_width(parser)
    out = [
        "# Command line",
        "",
        "Generated at build time from the `evomem` command's own parser (`evomem.cli.build_parser()`).",
        "Every command also answers `--help`. [The command line guide](../guides/cli.md) shows them in use.",
        "",
    ]
    out += _cli_section(parser, "evomem", parser.description or "", 2)
    return "\n".join(out)


# ------------------------------------------------------------------------------------- Python API


def python_page() -> str:
    """mkdocstrings directives for every name ``evomem`` exports (``evomem.__all__``), grouped."""
    import evomem
    from evomem.errors import EvomemError

    names = [n for n in evomem.__all__ if not n.startswith("_")]
    objects = {n: getattr(evomem, n) for n in names}
    errors = [n for n, o in objects.items() if isinstance(o, type) and issubclass(o, EvomemError)]
    entry = [n for n in ("Memory", "AsyncMemory") if n in objects]
    config = [n for n in ("Settings", "TaskEvent") if n in objects]
    results = [n for n in names if n not in {*errors, *entry, *config}]
    errors.sort(key=lambda n: (n != "EvomemError", n))
    out = [
        "# Python API",
        "",
        "Generated at build time from the docstrings of what `evomem` exports (`evomem.__all__`).",
        "[The SDK guide](../guides/sdk.md) shows it in use; DESIGN's public surface (`Memory.open`,",
        "`retrieve`, `report`, `consolidate`, `insight`) is the contract these names keep.",
        "",
    ]
    groups = (
        ("Opening a memory", entry),
        ("Results", results),
        ("Events and settings", config),
        ("Errors", errors),
    )
    for title, group in groups:
        if not group:
            continue
        out += [f"## {title}", ""]
        for name in group:
            # a name evomem re-exports from a package beside it is documented where it is defined
            module = getattr(objects[name], "__module__", "") or ""
            path = f"evomem.{name}" if module.split(".")[0] == "evomem" else f"{module}.{name}"
            out.append(f"::: {path}")
            if name == "Settings":
                out += ["    options:", "      members: false"]
            out.append("")
        if title == "Opening a memory":
            out += [
                "`Memory` holds one of two backends, which answer the same calls with the same results:",
                "",
                "::: evomem.sdk.local.LocalBackend",
                "",
                "::: evomem.sdk.remote.RemoteBackend",
                "",
            ]
        if title == "Events and settings":
            out += [
                "Every settings field, its variable and default: [the settings reference](settings.md).",
                "",
            ]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------- HTTP


def _ref_name(schema: Mapping[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _schema_type(schema: Mapping[str, Any]) -> str:
    name = _ref_name(schema)
    if name:
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return f"object of {_schema_type(schema['additionalProperties'])}"
    return str(kind)


def http_page() -> str:
    from evomem.service.api import openapi

    doc = openapi()
    info = doc.get("info", {})
    out = [
        "# HTTP API",
        "",
        "Generated at build time from the service's OpenAPI document (`evomem.service.api.openapi()`,",
        "served as `GET /openapi.json`). [The HTTP guide](../guides/http.md) says how the service runs",
        "and behaves.",
        "",
        f"OpenAPI {doc.get('openapi', '?')}, {info.get('title', 'evomem')} {info.get('version', '')}.",
        "",
    ]
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            out += [f"## `{method.upper()} {path}`", ""]
            if op.get("summary"):
                out += [_cell(op["summary"]).capitalize() + ".", ""]
            if op.get("description"):
                out += [op["description"], ""]
            if op.get("security"):
                out += ["Needs `Authorization: Bearer TOKEN` when the service has tokens.", ""]
            body = op.get("requestBody")
            if body:
                for ctype, content in body.get("content", {}).items():
                    required = " (required)" if body.get("required") else ""
                    out += [
                        f"Request body{required}: `{ctype}`, {_schema_type(content.get('schema', {}))}.",
                        "",
                    ]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for status, resp in op.get("responses", {}).items():
                contents = resp.get("content", {})
                shape = ", ".join(_schema_type(c.get("schema", {})) for c in contents.values()) or "–"
                out.append(f"| `{status}` | {_cell(resp.get('description', ''))} | {shape} |")
            out.append("")
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
    for name, schema in schemas.items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        if props:
            needed = set(schema.get("required", ()))
            out += ["| field | type | required | meaning |", "|---|---|---|---|"]
            for prop, sub in props.items():
                desc = _cell(sub.get("description", "") or sub.get("title", ""))
                mark = "yes" if prop in needed else ""
                out.append(f"| `{prop}` | {_schema_type(sub)} | {mark} | {desc} |")
            out.append("")
        elif "enum" in schema or "type" in schema:
            out += [f"Type: {_schema_type(schema)}.", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------- benchmarks

_PALETTE = ("#1f6feb", "#d1242f", "#2da44e", "#9a6700", "#8250df", "#57606a")


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    width: int = 760,
    height: int = 320,
) -> str:
    """A small SVG line chart: one polyline per series, axes with five ticks, a legend."""
    points = [p for s in series.values() for p in s]
    if not points:
        return ""

    def fx(x: float) -> float:
        return math.log10(x) if logx else x

    xs = [fx(x) for x, _ in points]
    ys = [y for _, y in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    left, right, top, bottom = 64, 180, 36, 48
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (fx(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" font-family="sans-serif" font-size="12" role="img">',
        f"<title>{html.escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#444"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#444"/>',
    ]
    for i in range(5):
        yv = y0 + (y1 - y0) * i / 4
        parts.append(
            f'<text x="{left - 6}" y="{py(yv) + 4:.1f}" text-anchor="end">{_tick(yv)}</text>'
            f'<line x1="{left}" y1="{py(yv):.1f}" x2="{left + pw}" y2="{py(yv):.1f}" stroke="#ddd"/>'
        )
    xticks = sorted({x for x, _ in points}) if len({x for x, _ in points}) <= 8 else None
    if xticks is None:
        xticks = [(10 ** (x0 + (x1 - x0) * i / 4)) if logx else x0 + (x1 - x0) * i / 4 for i in range(5)]
    for xv in xticks:
        parts.append(f'<text x="{px(xv):.1f}" y="{top + ph + 16}" text-anchor="middle">{_tick(xv)}</text>')
    parts.append(
        f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{html.escape(xlabel)}</text>'
    )
    parts.append(
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(ylabel)}</text>'
    )
    for i, (name, pts) in enumerate(series.items()):
        color = _PALETTE[i % len(_PALETTE)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        for x, y in pts if len(pts) <= 12 else ():
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = top + 4 + 18 * i
        lx = left + pw + 14
        parts.append(
            f'<rect x="{lx}" y="{ly}" width="12" height="4" fill="{color}"/>'
            f'<text x="{lx + 18}" y="{ly + 6}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k" if abs(v) < 1e6 else f"{v / 1e6:g}M"
    return f"{v:.3g}"


def _when(section: Mapping[str, Any]) -> str:
    for key in ("timestamp", "written_at", "date"):
        if section.get(key):
            return str(section[key])
    return "not recorded"


def _machine(section: Mapping[str, Any]) -> str:
    m = section.get("machine")
    if not isinstance(m, Mapping):
        cores = section.get("cores")
        return f"{cores} cores, otherwise not recorded" if cores else "not recorded"
    load = m.get("loadavg_at_start")
    load_text = f", load average {load[0]:.2f} at start" if isinstance(load, list) and load else ""
    cpu, cores, python = m.get("cpu", "CPU not recorded"), m.get("cores", "?"), m.get("python", "?")
    return f"{cpu}, {cores} cores, Python {python}{load_text}"


def _provenance(section: Mapping[str, Any]) -> list[str]:
    out = [f"- **When:** {_when(section)}", f"- **Machine:** {_machine(section)}"]
    if section.get("command"):
        out.append(f"- **Command:** `{' '.join(str(section['command']).split())}`")
    if section.get("note"):
        out.append(f"- **Note:** {section['note']}")
    return [*out, ""]


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return "–" if v is None else str(v)


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(_fmt(c)) for c in row) + " |" for row in rows]
    return [*out, ""]


def benchmark_pages(results: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The benchmarks page and its SVG plots (file name → SVG), from the results file's sections."""
    plots: dict[str, str] = {}
    rows: list[tuple[Any, ...]]
    out = [
        "# Benchmarks: current figures",
        "",
        "Generated at build time from `bench/results.json`, which each suite rewrites when it runs",
        "(`make bench`, `make bench-quality`, `make bench-growth`, `make bench-cluster`). Each section says",
        "when its figures were taken and on what machine, as far as the file records it. Figures depend on",
        "the machine and its load: compare them as ratios within one run. How to run and read the suites:",
        "[Running the benchmarks](running.md); how the figures came to be what they are:",
        "[the lab notes](../lab/index.md).",
        "",
    ]
    r = results.get("retrieval")
    if isinstance(r, Mapping):
        out += ["## Retrieval in process (`python -m bench.retrieval`)", "", *_provenance(r)]
        out += _table(
            ["scenario", "queries", "insights", "scoring", "p50 ms", "p99 ms"],
            [
                (
                    s.get("name"),
                    s.get("n_queries"),
                    s.get("n_insights"),
                    s.get("scoring"),
                    s.get("p50_ms"),
                    s.get("p99_ms"),
                )
                for s in r.get("scenarios", [])
            ],
        )
    for key, title in (("http", "with the defaults"), ("http_aligned", "with a4d006e's retrieval settings")):
        h = results.get(key)
        if not isinstance(h, Mapping):
            continue
        out += [f"## The HTTP service {title} (`python -m bench.http`, key `{key}`)", "", *_provenance(h)]
        levels = [lv for lv in h.get("levels", []) if isinstance(lv, Mapping)]
        out += _table(
            ["mode", "variant", "concurrency", "p50 ms", "p99 ms", "QPS", "server CPU ms/request"],
            [
                (
                    lv.get("mode"),
                    lv.get("variant"),
                    lv.get("concurrency"),
                    lv.get("p50_ms"),
                    lv.get("p99_ms"),
                    lv.get("qps"),
                    lv.get("server_cpu_ms_per_request"),
                )
                for lv in levels
            ],
        )
        series: dict[str, list[tuple[float, float]]] = {}
        for lv in levels:
            if lv.get("mode") != "in_process" and lv.get("qps") is not None:
                series.setdefault(str(lv.get("variant")), []).append(
                    (float(lv["concurrency"]), float(lv["qps"]))
                )
        if series:
            name = f"{key}-qps.svg"
            plots[name] = line_chart(
                series,
                title=f"QPS by concurrency ({key}, {_when(h)[:10]})",
                xlabel="concurrent clients",
                ylabel="requests per second",
                logx=True,
            )
            out += [f"![QPS by concurrency]({name})", ""]
    s = results.get("scale")
    if isinstance(s, Mapping):
        out += [
            "## Retrieval as the memory grows (`python -m bench.http --scale`, key `scale`)",
            "",
            *_provenance(s),
        ]
        pts = [p for p in s.get("points", []) if isinstance(p, Mapping)]
        out += _table(
            ["queries", "insights", "p50 ms", "p99 ms", "repeat p50 ms"],
            [
                (
                    p.get("n_queries"),
                    p.get("n_insights"),
                    p.get("p50_ms"),
                    p.get("p99_ms"),
                    (p.get("repeat") or {}).get("p50_ms"),
                )
                for p in pts
            ],
        )
        if pts:
            plots["scale-p50.svg"] = line_chart(
                {
                    "p50": [
                        (float(p["n_insights"]), float(p["p50_ms"]))
                        for p in pts
                        if p.get("p50_ms") is not None
                    ]
                },
                title=f"Retrieve p50 by insights ({_when(s)[:10]})",
                xlabel="insights",
                ylabel="ms",
                logx=True,
            )
            out += ["![Retrieve p50 by insights](scale-p50.svg)", ""]
    p = results.get("pipeline")
    if isinstance(p, Mapping):
        out += ["## Consolidation workers (`python -m bench.pipeline`)", "", *_provenance(p)]
        rows = [
            (t.get("processes"), t.get("events"), t.get("events_per_s"), t.get("events_per_s_per_process"))
            for t in p.get("throughput", [])
        ]
        out += _table(["worker processes", "events", "events/s", "events/s per process"], rows)
        inp = p.get("in_process", {})
        rep = p.get("report", {})
        served = p.get("report_to_served", {})
        out += _table(
            ["measure", "value"],
            [
                ("in-process consolidation, events/s", inp.get("events_per_s")),
                ("report() p50 ms", rep.get("p50_ms")),
                ("report() p99 ms", rep.get("p99_ms")),
                ("report to served p50 ms", served.get("p50_ms")),
            ],
        )
    llm = results.get("llm")
    if isinstance(llm, Mapping):
        out += ["## The LLM controller (`python -m bench.llm`)", "", *_provenance(llm)]
        pt = llm.get("prompt_tokens", {})
        out += _table(
            ["measure", "value", "target"],
            [
                ("prompt tokens per event, 1 event a call", pt.get("per_event_at_1_per_call"), ""),
                ("prompt tokens per event, 8 events a call", pt.get("per_event_at_8_per_call"), ""),
                ("saving", pt.get("saving"), f"≥ {pt.get('target_saving')}"),
                (
                    "events/s speed-up, 64 calls in flight against 1",
                    llm.get("throughput", {}).get("speedup_64_vs_1"),
                    f"≥ {llm.get('throughput', {}).get('target_speedup')}",
                ),
            ],
        )
    g = results.get("growth")
    if isinstance(g, Mapping):
        out += [
            "## Growth: cost per task as the memory learns (`python -m bench.growth`)",
            "",
            *_provenance(g),
        ]
        out += _table(
            ["check", "value", "rule", "limit", "passed"],
            [
                (c.get("name"), c.get("value"), c.get("rule"), c.get("limit"), c.get("passed"))
                for c in g.get("checks", [])
            ],
        )
        cps = [c for c in g.get("checkpoints", []) if isinstance(c, Mapping)]
        if cps:
            out += _table(
                ["tasks", "tasks/s (whole build)", "retrieve p50 ms at the checkpoint"],
                [
                    (
                        c.get("tasks"),
                        (c.get("cumulative") or {}).get("tasks_per_s"),
                        (c.get("retrieve_sample") or {}).get("p50_ms"),
                    )
                    for c in cps
                ],
            )
    q = results.get("quality")
    if isinstance(q, Mapping):
        out += ["## Memory quality (`make bench-quality`)", "", *_provenance(q)]
        targets = [t for t in q.get("targets", []) if isinstance(t, Mapping)]
        out += _table(
            ["world", "target", "arms", "value", "bound", "scope", "passed"],
            [
                (
                    t.get("world"),
                    t.get("target"),
                    " vs ".join(t.get("arms", [])),
                    t.get("value"),
                    t.get("bound"),
                    t.get("scope"),
                    t.get("pass"),
                )
                for t in targets
            ],
        )
        curves = q.get("curves", {})
        tasks = (q.get("options") or {}).get("tasks")
        default_arm = q.get("default_arm", "all-evidence/weighted")
        shown = [a for a in (default_arm, q.get("append_only_arm", "add+keep/weighted"), "none") if a]
        for world, arms in curves.items() if isinstance(curves, Mapping) else ():
            series = {}
            for arm in shown:
                ys = arms.get(arm) if isinstance(arms, Mapping) else None
                if ys:
                    step = float(tasks) / len(ys) if isinstance(tasks, int) and tasks > 0 else 1.0
                    series[arm] = [((i + 1) * step, float(y)) for i, y in enumerate(ys) if y is not None]
            if series:
                name = f"quality-{re.sub(r'[^a-z0-9]+', '-', world.lower())}.svg"
                plots[name] = line_chart(
                    series,
                    title=f"Success over the run, world {world} ({_when(q)[:10]})",
                    xlabel="tasks (success: mean over each bin of tasks and the seeds)",
                    ylabel="success rate",
                )
                out += [f"![Success over the run, {world}]({name})", ""]
        if QUALITY_PLOT.exists():
            out += [
                "The suite's own plot (`bench/quality.png`, drawn by `make bench-quality` with matplotlib):",
                "",
                "![bench/quality.png](quality.png)",
                "",
            ]
    c = results.get("cluster")
    if isinstance(c, Mapping):
        out += ["## A Redis Cluster against one server (`make bench-cluster`)", "", *_provenance(c)]
        rows = []
        for key in ("one_server", "one_server_tcp", "cluster", "cluster_wait_1"):
            part = c.get(key)
            if isinstance(part, Mapping):
                rows.append(
                    (
                        key,
                        (part.get("report") or {}).get("p50_ms"),
                        part.get("consolidate_events_per_s"),
                        (part.get("retrieve") or {}).get("p50_ms"),
                    )
                )
        out += _table(["setup", "report() p50 ms", "consolidation events/s", "retrieve() p50 ms"], rows)
    ca = results.get("caches")
    if isinstance(ca, Mapping):
        out += ["## The tenancy caches (`python -m bench.caches`)", "", *_provenance(ca)]
        for key in ("namespace_settings", "tokens"):
            rows = [
                (e.get("entries"), e.get("hit_rate"), e.get("us_per_call"))
                for e in ca.get(key, [])
                if isinstance(e, Mapping)
            ]
            if rows:
                out += [f"`{key}`:", "", *_table(["entries", "hit rate", "µs a lookup"], rows)]
    om = results.get("redis_om")
    if isinstance(om, Mapping):
        out += ["## redis-om where it would fit (`bench/redis_om_fit.py`)", "", *_provenance(om)]
        rows = [(f"get: {k}", v) for k, v in (om.get("get_us") or {}).items()]
        rows += [(f"save: {k}", v) for k, v in (om.get("save_us") or {}).items()]
        out += _table(["µs a call", "value"], rows)
    known = {
        "retrieval",
        "http",
        "http_aligned",
        "scale",
        "pipeline",
        "llm",
        "growth",
        "quality",
        "cluster",
        "caches",
        "redis_om",
    }
    others = [k for k in results if k not in known]
    if others:
        out += [
            "## Other suites in the file",
            "",
            *[f"- `{k}`: {_when(results[k]) if isinstance(results[k], Mapping) else ''}" for k in others],
            "",
        ]
    return "\n".join(out), plots


# -------------------------------------------------------------------------------------- lab notes

_LAB_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-(.+)\.md$")


def lab_notes(folder: Path = DOCS / "lab") -> list[tuple[str, str, str]]:
    """(date, title, file name) of every dated lab note, newest first."""
    notes = []
    for path in folder.glob("*.md"):
        m = _LAB_NAME.match(path.name)
        if not m:
            continue
        title = m.group(2).replace("-", " ")
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                title = line[2:].strip()
                break
        notes.append((m.group(1), title, path.name))
    return sorted(notes, key=lambda n: (n[0], n[2]), reverse=True)


def lab_index() -> str:
    out = [
        "# Lab notes",
        "",
        "Dated notes of what was run, the command and what was seen: the decisions behind the defaults,",
        "the measurements, and the changes tried and not kept. A note is never edited to update a figure;",
        "a later run gets a note of its own. Newest first; this list is generated from `docs/lab/`.",
        "",
        "| date | note |",
        "|---|---|",
    ]
    out += [f"| {date} | [{_cell(title)}]({name}) |" for date, title, name in lab_notes()]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ MkDocs hooks


def _listed(nav: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(nav, str):
        found.add(nav)
    elif isinstance(nav, list):
        for item in nav:
            found |= _listed(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            found |= _listed(value)
    return found


def _section(nav: list[Any], title: str) -> list[Any] | None:
    for item in nav:
        if isinstance(item, dict) and isinstance(item.get(title), list):
            return item[title]  # type: ignore[no-any-return]
    return None


def extend_nav(nav: list[Any], docs: Path = DOCS) -> None:
    """Add the guides and lab notes that mkdocs.yml does not list to their sections (guides by title,
    lab notes newest first), so a new page needs no edit of the nav to appear."""
    listed = _listed(nav)
    guides = _section(nav, "Guides")
    if guides is not None:
        for path in sorted((docs / "guides").glob("*.md")):
            rel = f"guides/{path.name}"
            if rel not in listed:
                guides.append(rel)
    lab = _section(nav, "Lab notes")
    if lab is not None:
        for _date, _title, name in lab_notes(docs / "lab"):
            if f"lab/{name}" not in listed:
                lab.append(f"lab/{name}")


def generated_pages() -> dict[str, str | bytes]:
    """Every generated file of the site, by its path under docs/."""
    _checkout_importable()
    pages: dict[str, str | bytes] = {
        "reference/settings.md": settings_page(),
        "reference/cli.md": cli_page(),
        "reference/http.md": http_page(),
        "reference/python.md": python_page(),
        "lab/index.md": lab_index(),
    }
    results = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    page, plots = benchmark_pages(results)
    pages["benchmarks/index.md"] = page
    pages.update({f"benchmarks/{name}": svg for name, svg in plots.items()})
    if QUALITY_PLOT.exists():
        pages["benchmarks/quality.png"] = QUALITY_PLOT.read_bytes()
    return pages


def on_config(config: Any) -> Any:
    if isinstance(config.get("nav"), list):
        extend_nav(config["nav"])
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, content in generated_pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files
