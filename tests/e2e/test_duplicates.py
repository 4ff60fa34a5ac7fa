"""No twins: a new insight text that nearly repeats an active insight of its namespace joins it.

Namespace-wide (not only the insights retrieved for the event), for every controller, in whatever
process consolidates: the search runs against the system of record (``evomem.core.duplicates``).
"""

from __future__ import annotations

from typing import Any

import pytest

from evomem import Memory
from evomem.core import duplicates

NS = "fever"
ORIGINAL = "Always check the year in the claim against the year in the evidence before answering."
REWORDED = "Always check the year stated in the claim against the year in the evidence before answering."
DIFFERENT = "Split a comparison question into its two entities and look each one up separately."


def test_the_buckets_find_a_rewording_and_keep_unrelated_texts_apart() -> None:
    assert set(duplicates.bands(ORIGINAL)) & set(duplicates.bands(REWORDED))
    assert not set(duplicates.bands(ORIGINAL)) & set(duplicates.bands(DIFFERENT))
    assert duplicates.similarity(duplicates.vector(ORIGINAL), duplicates.vector(REWORDED)) >= 0.9
    assert duplicates.bands("the a of") == []  # no words to hash: no bucket, never a false twin


def test_a_proposal_repeating_an_insight_that_was_not_retrieved_joins_it_with_its_query(
    memory: Memory,
) -> None:
    memory.report(
        None, namespace=NS, query="Verify: Mohra is a truck", status="resolved", proposed_insight=ORIGINAL
    )
    memory.consolidate()
    (first,) = memory.insights(NS)
    # reported without a retrieval: the first insight is not among the event's retrieved insights
    memory.report(
        None, namespace=NS, query="Who composed the opera Aida?", status="resolved", proposed_insight=REWORDED
    )
    report = memory.consolidate()
    assert dict(report.outcomes) == {"duplicate": 1}
    (node,) = memory.insights(NS)
    assert node.id == first.id and node.text == ORIGINAL
    assert len(node.positive) == 2  # the repeating task's query is positive evidence now
    assert [(h.op, h.outcome) for h in memory.insight(node.id).history] == [
        ("ADD", "added"),
        ("ADD", "duplicate"),
    ]


def test_a_failed_task_repeating_an_insight_adds_no_twin_and_is_served_it_again(memory: Memory) -> None:
    memory.report(None, namespace=NS, query="task one", status="resolved", proposed_insight=ORIGINAL)
    memory.report(None, namespace=NS, query="task two", status="failed", proposed_insight=REWORDED)
    memory.consolidate()
    (node,) = memory.insights(NS)
    # its query joins Ω⁺ (inferred: it ranks, never counts toward archiving), as a new node's would
    assert len(node.positive) == 2 and node.negative == frozenset()
    assert [i.id for i in memory.retrieve("task two", NS).insights] == [node.id]


def test_two_rewordings_in_one_batch_make_one_insight(memory: Memory) -> None:
    memory.report(None, namespace=NS, query="task one", status="resolved", proposed_insight=ORIGINAL)
    memory.report(None, namespace=NS, query="task two", status="resolved", proposed_insight=REWORDED)
    memory.report(None, namespace=NS, query="task three", status="resolved", proposed_insight=DIFFERENT)
    report = memory.consolidate()
    assert dict(report.outcomes) == {"added": 2, "duplicate": 1}
    assert sorted(n.text for n in memory.insights(NS)) == sorted([ORIGINAL, DIFFERENT])


def test_a_text_is_confirmed_only_against_insights_sharing_one_of_its_buckets() -> None:
    held = duplicates.Buckets()
    held.add("i-original", ORIGINAL, duplicates.bands(ORIGINAL))
    held.add("i-different", DIFFERENT, duplicates.bands(DIFFERENT))
    assert [k.id for k in held.sharing(duplicates.bands(REWORDED))] == ["i-original"]
    assert held.sharing(duplicates.bands(REWORDED), but="i-original") == []
    # a vector as similar as can be, under buckets the text does not share: never a candidate
    held.add("i-elsewhere", REWORDED, ["99:00000000"])
    assert {k.id for k in held.sharing(duplicates.bands(REWORDED))} == {"i-original"}


def test_one_batch_of_many_proposals_keeps_the_twins_of_batches_of_one(open_memory_factory: Any) -> None:
    """Within a batch, each text is compared with what shares its buckets, as when it comes alone."""
    texts = [
        ORIGINAL,
        REWORDED,
        DIFFERENT,
        *(f"For task {i}: look record {i} up before answering." for i in range(8)),
    ]
    texts += [ORIGINAL.replace("Always", "Please always"), DIFFERENT + " Then compare them."]
    shapes = []
    mem = open_memory_factory()
    for batch in (len(texts), 1):
        ns = f"{NS}-{batch}"
        for i, text in enumerate(texts):
            mem.report(None, namespace=ns, query=f"task {i}", status="resolved", proposed_insight=text)
            if i % batch == batch - 1:
                mem.consolidate()
        mem.consolidate()
        shapes.append(sorted((n.text, len(n.positive)) for n in mem.insights(ns)))
    assert shapes[0] == shapes[1]
    assert len(shapes[0]) < len(texts)  # some of them were repeats


def test_a_revision_that_repeats_another_active_insight_revises_into_it(memory: Memory) -> None:
    memory.report(
        None, namespace=NS, query="Verify: Mohra is a truck", status="resolved", proposed_insight=ORIGINAL
    )
    memory.report(
        None, namespace=NS, query="Which year did it happen?", status="resolved", proposed_insight=DIFFERENT
    )
    memory.consolidate()
    by_text = {n.text: n.id for n in memory.insights(NS)}
    memory.report(
        None,
        namespace=NS,
        query="Which year did it happen?",
        status="failed",
        insight_feedback={by_text[DIFFERENT]: {"verdict": "partial", "revised_text": REWORDED}},
    )
    assert dict(memory.consolidate().outcomes) == {"merged": 1}
    old, kept = memory.insight(by_text[DIFFERENT]), memory.insight(by_text[ORIGINAL])
    assert (old.state, old.revised_to, kept.state) == ("archived", kept.id, "active")
    assert old.positive <= kept.positive  # what supported the old one supports the one it joined


def test_namespaces_never_share_a_twin(memory: Memory) -> None:
    memory.report(None, namespace="one", query="task", status="resolved", proposed_insight=ORIGINAL)
    memory.report(None, namespace="two", query="task", status="resolved", proposed_insight=REWORDED)
    memory.consolidate()
    assert [n.text for n in memory.insights("one")] == [ORIGINAL]
    assert [n.text for n in memory.insights("two")] == [REWORDED]


@pytest.mark.parametrize("threshold", [0.99, 0.5])
def test_the_threshold_is_a_setting(open_memory_factory: Any, threshold: float) -> None:
    memory = open_memory_factory(duplicate_threshold=threshold)
    for query, text in (("task one", ORIGINAL), ("task two", REWORDED)):
        memory.report(None, namespace=NS, query=query, status="resolved", proposed_insight=text)
    memory.consolidate()
    assert len(memory.insights(NS)) == (2 if threshold == 0.99 else 1)


@pytest.fixture
def open_memory_factory(redis_url: str, redis_client: Any, tmp_path: Any) -> Any:
    from evomem import Settings

    opened: list[Memory] = []

    def _open(**overrides: Any) -> Memory:
        mem = Memory.open(Settings(data_dir=tmp_path / f"m{len(opened)}", redis_url=redis_url, **overrides))
        assert isinstance(mem, Memory)
        opened.append(mem)
        return mem

    yield _open
    for mem in opened:
        mem.close()
