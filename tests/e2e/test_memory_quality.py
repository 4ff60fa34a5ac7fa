"""The memory serves the insight a task taught when that task returns, among look-alike tasks.

One namespace, templated look-alike tasks ("explain <topic>", every query sharing the template
word), each teaching one proposed insight and consolidated before the next, with the rule controller
and no verdicts — a new user's first hour without an LLM. Asked again, verbatim or lightly
paraphrased, the memory must rank the insight that task taught first. Before credit needed a reason
and similarity counted, the insights learnt first were credited by every later task and served to
everyone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evomem import Memory, Settings

TOPICS = [
    "photosynthesis",
    "the french revolution",
    "black holes",
    "tcp congestion control",
    "the krebs cycle",
    "inflation",
    "plate tectonics",
    "public key cryptography",
    "the immune system",
    "supply and demand",
    "quantum entanglement",
    "the roman empire",
    "neural networks",
    "climate change",
    "the water cycle",
    "general relativity",
    "dna replication",
    "the cold war",
    "compound interest",
    "volcanoes",
    "the printing press",
    "natural selection",
    "blockchains",
    "the renaissance",
    "operating system schedulers",
    "hash tables",
    "the big bang",
    "ocean tides",
    "vaccines",
    "the industrial revolution",
    "garbage collection",
    "electric motors",
]


def lesson(topic: str) -> str:
    return f"To explain {topic}, begin with what {topic} is for and give one worked example of {topic}."


def taught_first(memory: Memory) -> tuple[int, int]:
    """Teach every topic in turn, then ask each again: (verbatim hits, paraphrase hits)."""
    for topic in TOPICS:
        r = memory.retrieve(f"explain {topic}", "school")
        memory.report(r, status="resolved", proposed_insight=lesson(topic))
        memory.consolidate()
    by_text = {n.text: n.id for n in memory.insights("school")}
    verbatim = paraphrase = 0
    for topic in TOPICS:
        want = by_text[lesson(topic)]
        again = memory.retrieve(f"explain {topic}", "school").insights
        reworded = memory.retrieve(f"could you explain {topic} to me briefly?", "school").insights
        verbatim += bool(again) and again[0].id == want
        paraphrase += bool(reworded) and reworded[0].id == want
    return verbatim, paraphrase


def _open(tmp_path: Path, redis_url: str, **overrides: Any) -> Memory:
    mem = Memory.open(
        Settings(data_dir=tmp_path / "data", redis_url=redis_url, controller="rules", **overrides)
    )
    assert isinstance(mem, Memory)
    return mem


def test_a_returning_task_is_served_the_insight_it_taught_first(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    with _open(tmp_path, redis_url) as memory:
        verbatim, paraphrase = taught_first(memory)
    assert verbatim >= 0.9 * len(TOPICS), f"verbatim: {verbatim} of {len(TOPICS)}"
    assert paraphrase >= 0.9 * len(TOPICS), f"paraphrase: {paraphrase} of {len(TOPICS)}"


# without text relevance, which by itself puts most taught insights back first (next test)
@pytest.mark.parametrize("overrides", [{"rules_credit": "all", "relevance_power": 0.0}], ids=["credit-all"])
def test_crediting_every_served_insight_lets_the_first_ones_win_everywhere(
    tmp_path: Path, redis_url: str, redis_client: Any, overrides: dict[str, Any]
) -> None:
    """The old behaviour, kept for comparison: with every served insight credited, the insights learnt
    first gather the evidence of every later task and outrank what each task taught."""
    with _open(tmp_path, redis_url, **overrides) as memory:
        verbatim, _ = taught_first(memory)
    assert verbatim < 0.5 * len(TOPICS)


def test_text_relevance_holds_the_taught_insight_first_even_when_every_served_one_is_credited(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    """The insight a task taught is about that task; ranked with its text's relevance it stays first
    on the same task even when the first insights gather every later task's credit."""
    with _open(tmp_path, redis_url, rules_credit="all") as memory:
        verbatim, _ = taught_first(memory)
    assert verbatim >= 0.9 * len(TOPICS), f"verbatim: {verbatim} of {len(TOPICS)}"
