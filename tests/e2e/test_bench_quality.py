"""The memory quality benchmark (python -m bench.quality) at a tiny size: it runs the real memory
per arm, prints a table and the targets, and merges a "quality" section with the documented keys
into the results file. No figure is asserted beyond its range: the worlds are random."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from bench.quality import summary
from bench.quality.judge import explicit_verdict, llm_judge
from bench.quality.worlds import WORLDS, World, parameter_changes
from evomem import Memory, Settings
from evomem.testing.llm_server import LLMTestServer


def test_world_parameters_are_typed_as_their_defaults_and_an_unknown_one_is_named() -> None:
    assert parameter_changes(["topics=24", "judge_share=0.5", "overgeneral=yes", "drift_at=none"]) == {
        "topics": 24,
        "judge_share": 0.5,
        "overgeneral": True,
        "drift_at": None,
    }
    with pytest.raises(SystemExit, match="no world parameter 'bogus'; known: topics, "):
        parameter_changes(["bogus=1"])
    with pytest.raises(SystemExit, match="--param takes FIELD=VALUE, not 'topics'"):
        parameter_changes(["topics"])


def test_a_judge_gives_partial_verdicts_to_over_general_lessons_and_errs_at_its_rate() -> None:
    world = World(WORLDS["mixed-j30"], 3, 400)
    task = world.tasks[0]
    home = world.lessons[f"general:{task.topic}"]
    verdicts = [explicit_verdict(world, t, home) for t in world.tasks if t.topic == task.topic]
    assert {"verdict": "partial", "revised_text": world.lessons[f"right:{task.topic}"].texts[0]} in verdicts
    right = [world.judge_errs(t, world.lessons[f"right:{t.topic}"]) for t in world.tasks]
    assert 0.2 < sum(right) / len(right) < 0.4  # 30% wrong, on 400 draws


def test_the_llm_test_server_takes_a_judge_of_its_callers(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """A caller's judge decides what the LLM controller applies: here it adds a proposal, then
    archives it when it is served again."""
    world = World(WORLDS["lookalike"], 0, 10)
    calls: list[dict[str, object]] = []

    def judge(doc: dict[str, object], insights: dict[int, str]) -> dict[str, object]:
        calls.append(doc)
        entry = llm_judge(world)(doc, insights)  # the benchmark's own judge gives the shape
        edits = [{**e, "operation": "ARCHIVE", "revised_insight_text": None} for e in entry["insight_edits"]]
        add = doc.get("proposed_insight")
        return {
            **entry,
            "insight_edits": edits,
            "add_new_insight": {"decision": bool(add), "new_insight_text": add},
        }

    with LLMTestServer(judge=judge) as server:
        llm: dict[str, Any] = {
            "controller": "llm",
            "llm_base_url": server.url,
            "llm_api_key": "local",
            "llm_tokenizer": "estimate",
        }
        mine = Settings(
            data_dir=settings.data_dir, redis_url=settings.redis_url, archive_policy="immediate", **llm
        )
        with Memory.open(mine) as mem:
            query = world.tasks[0].query
            mem.report(mem.retrieve(query, "q"), status="resolved", proposed_insight="Read the logs first.")
            mem.consolidate()
            served = mem.retrieve(query, "q")
            assert [i.text for i in served.insights] == ["Read the logs first."]
            mem.report(served, status="resolved")
            mem.consolidate()
            assert mem.insight(served.insights[0].id).state == "archived"
    assert len(calls) == 2


def test_the_targets_are_checked_with_a_10_percent_wrong_judge_and_the_rest_is_reported() -> None:
    """Issue 8's targets are the default configuration's "with a 10%-wrong judge": a world whose judge
    errs otherwise, and the rule controller alone, are reported against the same bounds and never
    pass or fail."""

    def arm(final: float, pollution: float, archived: float, hit: float) -> dict[str, Any]:
        values = {
            "final_success": final,
            "pollution": pollution,
            "wrongful_archives": archived,
            "hit1_verbatim": hit,
            "hit1_paraphrase": hit,
        }
        return {k: {"mean": v} for k, v in values.items()}

    world = {
        "default": arm(0.70, 0.05, 0.01, 0.95),
        "append": arm(0.50, 0.20, 0.0, 0.9),
        "rules": arm(0.5, 0.1, 0, 0.8),
    }
    noisy = {
        "default": arm(0.55, 0.10, 0.16, 0.85),
        "append": arm(0.35, 0.30, 0.0, 0.9),
        "rules": arm(0.5, 0.1, 0, 0.8),
    }
    checks = summary.targets(
        {"ten": world, "thirty": noisy}, {"ten": 0.10, "thirty": 0.30}, "default", "append", "rules"
    )
    scoped = {(c["world"], c["target"], c["arms"][0]): c["scope"] for c in checks}
    assert {k[1] for k, scope in scoped.items() if scope == "target"} == {
        "final-window success − add+keep ≥ 0.15",
        "pollution ÷ add+keep's ≤ 1/3",
        "good insights archived ≤ 5%",
        "repeat-query hit@1 (verbatim) ≥ 0.9",
        "repeat-query hit@1 (paraphrase) ≥ 0.9",
    }
    assert all(w == "ten" and a == "default" for (w, _, a), scope in scoped.items() if scope == "target")
    assert scoped[("thirty", "repeat-query hit@1 (verbatim) ≥ 0.9", "default")] == "reported"
    assert scoped[("ten", "repeat-query hit@1 (verbatim) ≥ 0.9", "rules")] == "reported"
    assert all(c["pass"] for c in checks if c["scope"] == "target")
    lines = summary.target_lines(checks)
    assert sum(line.startswith("PASS") for line in lines) == 5
    assert not any(line.startswith("FAIL") for line in lines)
    assert any(line.startswith("outside") and "thirty" in line and "archived" in line for line in lines)


def test_the_continued_acceptance_world_prints_where_each_taught_lesson_stands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.quality import taught

    assert taught.main(["--topics", "6", "--tasks", "12", "--seeds", "1", "--consolidate-every", "4"]) == 0
    printed = capsys.readouterr().out
    mean = next(line for line in printed.splitlines() if line.startswith("mean:"))
    # right after the teaching, each topic's own lesson is first (the acceptance test's property)
    assert "first verbatim 1.000 →" in mean and "first paraphrased 1.000 →" in mean
