"""The documentation's generated pages hold what the code holds: every setting, command, route and
benchmark section, and a README short enough to be a front door."""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

from evomem.settings import Settings, section_of

ROOT = Path(__file__).resolve().parents[2]


def _load_site() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evomem_docs_site", ROOT / "docs" / "hooks" / "site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


site = _load_site()
MISSING_DESCRIPTIONS = [
    name for name, f in Settings.model_fields.items() if not (f.description or "").strip()
]


def test_the_readme_is_at_most_15_kb() -> None:
    assert (ROOT / "README.md").stat().st_size <= 15 * 1024


def test_every_setting_has_a_description() -> None:
    assert MISSING_DESCRIPTIONS == [], f"settings without a description: {', '.join(MISSING_DESCRIPTIONS)}"


def test_every_setting_has_a_known_section() -> None:
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra
        tag = extra.get("section") if isinstance(extra, dict) else None
        assert tag in site.SECTIONS, f"{name}: section {tag!r} is none of {site.SECTIONS}"
        assert site.section_of(field) == tag == section_of(name)
    assert site.settings_by_section().get(site.OTHER) is None


def test_the_settings_page_lists_every_setting_under_its_section() -> None:
    page = site.settings_page()
    headings = [m.start() for m in re.finditer(r"^## ", page, re.M)] + [len(page)]
    blocks = {page[a:b].split("\n", 1)[0][3:]: page[a:b] for a, b in itertools.pairwise(headings)}
    for name, field in Settings.model_fields.items():
        env = site.env_names(name, field)[0]
        title = site.SECTION_TITLES[site.section_of(field)]
        assert f"| `{env}`" in blocks[title], f"{env} is not on the settings page under {title}"
    assert "| `EVOMEM_LAMBDA`" in page
    assert "(also `OPENAI_API_KEY`)" in page


def test_the_cli_page_covers_every_command() -> None:
    from evomem.cli import build_parser

    page = site.cli_page()
    for name, sub in site._subcommands(build_parser()).items():
        assert f"## `evomem {name}`" in page
        for deeper in site._subcommands(sub):
            assert f"`evomem {name} {deeper}`" in page
    assert "--log-level" in page
    demo = page.split("## `evomem demo`")[1].split("\n## ")[0]
    assert "--tasks" in demo, "a delegated command shows the options of the parser it hands on to"


def test_the_http_page_covers_every_route_and_schema() -> None:
    from evomem.service.api import openapi

    doc = openapi()
    page = site.http_page()
    for path, ops in doc["paths"].items():
        for method in ops:
            assert f"## `{method.upper()} {path}`" in page
    for name in doc["components"]["schemas"]:
        assert f"### {name}" in page
    assert "`413`" in page


def test_the_benchmark_page_gives_each_sections_date_and_machine() -> None:
    results = {
        "retrieval": {
            "timestamp": "2026-12-06T11:55:34+00:00",
            "command": "python -m bench.retrieval",
            "machine": {"cpu": "Some CPU", "cores": 2, "python": "3.11.7", "loadavg_at_start": [0.5, 0, 0]},
            "scenarios": [{"name": "retrieve", "n_queries": 10000, "p50_ms": 4.74}],
        },
        "pipeline": {"cores": 2, "throughput": [{"processes": 1, "events_per_s": 811.3}]},
        "somethingnew": {"date": "2026-12-07"},
    }
    page, plots = site.benchmark_pages(results)
    assert "2026-12-06T11:55:34+00:00" in page and "Some CPU, 2 cores" in page
    assert "load average 0.50" in page and "4.74" in page
    pipeline = page.split("## Consolidation workers")[1]
    assert "**When:** not recorded" in pipeline and "2 cores, otherwise not recorded" in pipeline
    assert "`somethingnew`: 2026-12-07" in page
    assert plots == {}


def test_the_shipped_results_give_every_section_a_date() -> None:
    import json

    results = json.loads((ROOT / "bench" / "results.json").read_text())
    page, plots = site.benchmark_pages(results)
    for key, section in results.items():
        when = section.get("timestamp") or section.get("date")
        if when:
            assert str(when) in page, key
    for name, svg in plots.items():
        assert ET.fromstring(svg).tag.endswith("svg"), name
        assert f"]({name})" in page


def test_a_line_chart_is_an_svg_with_a_line_per_series() -> None:
    svg = site.line_chart(
        {"a": [(1, 1.0), (16, 3.0), (64, 2.0)], "b": [(1, 0.5), (64, 1.5)]},
        title="t",
        xlabel="x",
        ylabel="y",
        logx=True,
    )
    root = ET.fromstring(svg)
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2
    assert site.line_chart({}, title="t", xlabel="x", ylabel="y") == ""


def test_new_guides_and_lab_notes_join_the_nav_by_themselves(tmp_path: Path) -> None:
    (tmp_path / "guides").mkdir()
    (tmp_path / "lab").mkdir()
    for name in ("sdk.md", "zeta.md"):
        (tmp_path / "guides" / name).write_text("# x\n")
    (tmp_path / "lab" / "2026-12-01-old.md").write_text("# Old note\n")
    (tmp_path / "lab" / "2026-12-07-new.md").write_text("# New note\n")
    (tmp_path / "lab" / "index.md").write_text("# Lab\n")
    nav: list[object] = [{"Guides": ["guides/sdk.md"]}, {"Lab notes": ["lab/index.md"]}]
    site.extend_nav(nav, tmp_path)
    assert nav == [
        {"Guides": ["guides/sdk.md", "guides/zeta.md"]},
        {"Lab notes": ["lab/index.md", "lab/2026-12-07-new.md", "lab/2026-12-01-old.md"]},
    ]


def test_every_lab_note_is_dated_and_titled() -> None:
    for path in (ROOT / "docs" / "lab").glob("*.md"):
        if path.name == "index.md":
            continue
        assert re.match(r"^\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", path.name), path.name
        assert path.read_text().startswith("# "), path.name
    index = site.lab_index()
    assert index.count("](2026-") == len([p for p in (ROOT / "docs" / "lab").glob("2*.md")])


def test_the_python_page_documents_every_public_name() -> None:
    import evomem

    page = site.python_page()
    for name in evomem.__all__:
        if not name.startswith("_"):
            assert re.search(rf"^::: [\w.]*\b{name}$", page, re.M), name
