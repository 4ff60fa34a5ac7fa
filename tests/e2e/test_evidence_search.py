"""The insight about the task is served even when Eq. 2's nearest past tasks are look-alikes.

Templated tasks on other subjects can fill Eq. 2's k nearest past queries, so the query that taught
the insight about this task's subject is not among them and Eq. 7 never makes that insight a
candidate. The evidence search (``EVOMEM_EVIDENCE_SEARCH``, beyond the paper) adds the past queries
most similar to the task among the evidence of the insights nearest to its text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evomem import Memory, Settings
from evomem.core.hashing import HashingEmbedder, word_features, word_part

NS = "wiki"
TEMPLATE = "Write a short guide to {} for the team wiki, {}"
OTHERS = [
    "merge sort",
    "cache warming",
    "docker layers",
    "tcp keepalive",
    "oauth scopes",
    "cron jobs",
    "bloom filters",
    "rate limits",
    "feature flags",
    "log rotation",
    "dns caching",
    "unit tests",
]
LESSON = "For git bisect, mark a known good commit first and let the test script decide each step."


def lesson(topic: str) -> str:
    return f"For {topic}, note the expected behaviour before changing anything."


def serve(tmp_path: Path, redis_url: str, **overrides: Any) -> tuple[list[str], set[str], set[str]]:
    """The texts served for the task, the new query's neighbours once it is consolidated, and the
    past queries Eq. 2 finds for it."""
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=redis_url,
        controller="rules",
        similarity="cosine",  # Eq. 2 as the paper has it: the template's words count as much as any
        top_k=3,
        hops=0,  # in a namespace this small the query graph reaches every past task: Q̃ˢ is Eq. 2's alone
        **overrides,
    )
    with Memory.open(settings) as memory:
        taught = [(TEMPLATE.format("git bisect", "for the payments team"), LESSON)]
        taught += [(TEMPLATE.format(t, "for the mobile backend"), lesson(t)) for t in OTHERS]
        for text, proposal in taught:
            r = memory.retrieve(text, NS)
            memory.report(r, status="resolved", proposed_insight=proposal)
            memory.consolidate()
        task = TEMPLATE.format("git bisect", "for the mobile backend")
        eq2 = set(memory.retriever.similar_queries(NS, task, 3))
        r = memory.retrieve(task, NS)
        memory.report(r, status="resolved", query_id="the-task")
        report = memory.consolidate()
        assert (report.applied, report.dead_lettered) == (1, 0)
        linked = set(memory.graph.neighbours(NS, ["the-task"]).get("the-task", {}))
        return [i.text for i in r.insights], linked, eq2


@pytest.mark.parametrize("evidence_search", [0, 4])
def test_the_insight_about_the_task_is_served_when_look_alikes_fill_eq2(
    tmp_path: Path, redis_url: str, redis_client: Any, evidence_search: int
) -> None:
    served, linked, eq2 = serve(tmp_path, redis_url, evidence_search=evidence_search)
    if evidence_search:
        assert served[0] == LESSON, served
    else:  # the paper's Q̃ˢ: three look-alikes of other subjects, none of them evidence of the lesson
        assert LESSON not in served and len(served) == 3, served
    # the query graph links the task to Eq. 2's similar queries alone, the evidence search on or off:
    # the lesson's query was found through the lesson, not through the task
    assert linked == eq2 and len(eq2) == 3, (linked, eq2)


def test_the_evidence_search_finds_insights_by_the_task_words_alone(tmp_path: Path, redis_url: str) -> None:
    """With the hashing embedder the insights are found by the task's word 1-2-grams, the measure
    text relevance ranks by: an insight that shares only character n-grams with the task (other
    forms of its words) is not one the task is about; with a dense embedder the whole vector."""
    embedder = HashingEmbedder()
    task = "explain the retry budget"
    vector = embedder.embed([task])[0]
    words = word_features(task)
    part = word_part(vector, words)
    assert part and set(part) == words and all(part[d] == vector[d] for d in part)
    assert len(part) < len(vector)  # the character n-grams are left out
    shares_ngrams_only = embedder.embed(["explaining retries budgets"])[0]
    assert sum(shares_ngrams_only.get(d, 0.0) * w for d, w in vector.items()) > 0.3
    assert not set(shares_ngrams_only) & set(part)
    with Memory.open(Settings(data_dir=tmp_path / "data", redis_url=redis_url, controller="rules")) as memory:
        assert memory.retriever.about_vector(vector, words) == part
        assert memory.retriever.about_vector([0.6, 0.8], words) is None
