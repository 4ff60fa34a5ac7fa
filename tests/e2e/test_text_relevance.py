"""Text relevance in the weighted ranking (beyond the paper): an insight's score is multiplied by how
much its text is about the task, so among insights supported by look-alike tasks the one that speaks
of this task's subject comes first. ``scoring="count"`` (Eq. 8-9) never looks at it.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from evomem import Memory, Settings
from evomem.core.hashing import word_features
from evomem.core.retrieval import RELEVANCE_FLOOR, Candidate, rank_insights, text_relevance

TASK = "Write a short guide to git bisect for the team wiki"
ABOUT_IT = "For git bisect, check the good commit first."
GENERIC = "Re-read the task statement before the final step."


def cand(i: str, text: str, pos: Collection[str] = (), neg: Collection[str] = ()) -> Candidate:
    return Candidate(i, text, frozenset(pos), frozenset(neg))


def relevance_to(task: str) -> Any:
    words = word_features(task)
    return lambda c: text_relevance(words, word_features(c.text))


def test_text_relevance_is_the_cosine_of_word_sets() -> None:
    words = word_features(TASK)
    assert text_relevance(words, words) == pytest.approx(1.0)
    assert text_relevance(words, word_features("entirely unrelated phrase")) == 0.0
    assert text_relevance(words, set()) == 0.0
    about, generic = word_features(ABOUT_IT), word_features(GENERIC)
    assert text_relevance(words, about) > text_relevance(words, generic)


# the generic insight is supported by three look-alike tasks, the specific one by one
WEIGHTS = {"alike1": 0.8, "alike2": 0.8, "alike3": 0.8, "same-topic": 0.8}
POPULAR = cand("popular", GENERIC, ["alike1", "alike2", "alike3"])
SPECIFIC = cand("specific", ABOUT_IT, ["same-topic"])


def test_an_insight_about_the_task_outranks_one_with_more_look_alike_support() -> None:
    plain = rank_insights([POPULAR, SPECIFIC], set(WEIGHTS), 1.0, 3, weights=WEIGHTS, scoring="weighted")
    assert [i.id for i in plain] == ["popular", "specific"]
    ranked = rank_insights(
        [POPULAR, SPECIFIC],
        set(WEIGHTS),
        1.0,
        3,
        weights=WEIGHTS,
        scoring="weighted",
        relevance=relevance_to(TASK),
        relevance_power=2.0,
    )
    assert [i.id for i in ranked] == ["specific", "popular"]  # discounted, still served
    assert [(i.support, i.conflict) for i in ranked] == [(1, 0), (3, 0)]  # the counts of Eq. 9 as ever
    generic = text_relevance(word_features(TASK), word_features(GENERIC))
    expected = 3 * 0.8 * max(generic, RELEVANCE_FLOOR) ** 2
    assert ranked[1].score == pytest.approx(expected)


def test_relevance_never_serves_what_evidence_holds_back() -> None:
    harmed = cand("harmed", ABOUT_IT, ["same-topic"], ["alike1", "alike2"])
    assert (
        rank_insights(
            [harmed],
            set(WEIGHTS),
            1.0,
            3,
            weights=WEIGHTS,
            scoring="weighted",
            relevance=relevance_to(TASK),
            relevance_power=2.0,
        )
        == []
    )


@pytest.mark.parametrize("power", [0.0, 2.0])
def test_count_scoring_is_the_papers_whatever_the_relevance(power: float) -> None:
    ranked = rank_insights(
        [POPULAR, SPECIFIC],
        set(WEIGHTS),
        1.0,
        3,
        weights=WEIGHTS,
        scoring="count",
        relevance=relevance_to(TASK),
        relevance_power=power,
    )
    assert [(i.id, i.score) for i in ranked] == [("popular", 3.0), ("specific", 1.0)]


TOPICS = ["git bisect", "git rebase", "oauth scopes", "cache eviction", "tcp keepalive", "heap sort"]
HABIT = "Re-read the task statement before the final step and confirm every requirement is met."


def lesson(topic: str) -> str:
    return f"For {topic}, check what the {topic} setup expects first and write it down."


def first_served(memory: Memory) -> int:
    """Every topic's task teaches its lesson once; a generic habit is judged helpful on every task
    and on a look-alike task per topic too. Then each task returns lightly reworded: how often is
    its own lesson served first?"""
    for topic in TOPICS:
        for detail in ("for the payments service", "before the Friday release"):
            r = memory.retrieve(f"Write a short guide to {topic} for the team wiki, {detail}", "ns")
            feedback = {i.id: "helpful" for i in r.insights if i.text == HABIT}
            teach = HABIT if topic == TOPICS[0] and not r.insights else None
            if detail.startswith("for") and topic != TOPICS[0]:
                teach = lesson(topic)
            memory.report(r, status="resolved", insight_feedback=feedback or None, proposed_insight=teach)
            memory.consolidate()
    hits = 0
    for topic in TOPICS[1:]:
        r = memory.retrieve(f"Draft a brief guide on {topic} for our wiki, for the payments service", "ns")
        hits += bool(r.insights) and r.insights[0].text == lesson(topic)
    return hits


def _open(tmp_path: Path, redis_url: str, power: float) -> Memory:
    mem = Memory.open(
        Settings(data_dir=tmp_path / "d", redis_url=redis_url, controller="rules", relevance_power=power)
    )
    assert isinstance(mem, Memory)
    return mem


def test_a_reworded_task_gets_its_own_lesson_before_a_popular_habit(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    with _open(tmp_path, redis_url, Settings().relevance_power) as memory:
        hits = first_served(memory)
    assert hits == len(TOPICS) - 1


def test_without_relevance_the_popular_habit_comes_first(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    with _open(tmp_path, redis_url, 0.0) as memory:
        hits = first_served(memory)
    assert hits < len(TOPICS) - 1


def test_a_namespace_can_turn_relevance_off(tmp_path: Path, redis_url: str, redis_client: Any) -> None:
    with _open(tmp_path, redis_url, Settings().relevance_power) as memory:
        memory.namespace_settings.set("ns", {"relevance_power": 0.0})
        assert memory.namespace_settings("ns").relevance_power == 0.0
        hits = first_served(memory)
    assert hits < len(TOPICS) - 1  # as with RELEVANCE_POWER=0 globally


@pytest.mark.parametrize("seed", range(20))
def test_computing_relevance_only_where_it_can_matter_gives_the_full_ranking(seed: int) -> None:
    import random

    rng = random.Random(seed)
    queries = {f"q{n}": rng.choice([0.2, 0.5, 0.7, 0.7, 0.9, 1.0]) for n in range(30)}
    rel = {f"i{n}": rng.choice([0.0, 0.05, 0.1, 0.3, 0.3, 1.0]) for n in range(40)}
    cands = [
        cand(
            i,
            i,
            rng.sample(sorted(queries), rng.randint(1, 6)),
            rng.sample(sorted(queries), rng.randint(0, 2)),
        )
        for i in rel
    ]
    asked: list[str] = []

    def relevance(c: Candidate) -> float:
        asked.append(c.id)
        return rel[c.id]

    budget = rng.randint(1, 5)
    ranked = rank_insights(
        cands, set(queries), 1.0, budget, weights=queries, scoring="weighted", power=3.0,
        relevance=relevance, relevance_power=1.0,
    )  # fmt: skip
    full = rank_insights(cands, set(queries), 1.0, len(cands), weights=queries, scoring="weighted", power=3.0)
    brute = sorted(
        (-i.score * max(rel[i.id], RELEVANCE_FLOOR), -i.similarity, -i.support, i.id) for i in full
    )[:budget]
    assert [(i.id, i.score) for i in ranked] == [(b[3], pytest.approx(-b[0])) for b in brute]
    assert len(asked) <= len(full)


def test_relevance_is_not_computed_for_a_candidate_that_cannot_be_served() -> None:
    weights = {"same": 1.0, "far": 0.1}
    asked: list[str] = []

    def relevance(c: Candidate) -> float:
        asked.append(c.id)
        return 0.5

    near, far = cand("near", "x", ["same"]), cand("far", "y", ["far"])  # r = 1 against 0.1
    ranked = rank_insights(
        [far, near], set(weights), 1.0, 1, weights=weights, scoring="weighted",
        relevance=relevance, relevance_power=1.0,
    )  # fmt: skip
    assert [i.id for i in ranked] == ["near"] and asked == ["near"]  # 0.1 < 1 · 0.5: far never asked


# -- words weighed by how rare they are among the namespace's insights (EVOMEM_RELEVANCE=idf) ----------

FILLER = ["git bisect", "oauth scopes", "docker volumes", "unit testing", "tcp keepalive", "bloom filters"]
SIBLING_TASK = "Explain job scheduling to a new engineer, for the billing jobs"
TOPIC_TASK = "Explain cron scheduling to a new engineer, for the billing jobs"


def topic_lesson(topic: str, key: str) -> str:
    return f"For {topic}, check the {key} first and write down what it should be."


def sibling_world(memory: Memory) -> None:
    """Lessons worded alike, so ``for``, ``check``, ``first`` are in every one; the sibling topic's
    lesson learnt from a task worded as the one to come, this topic's from another wording."""
    teach = [
        (f"Plan the migration of our {t} setup, on the legacy system", topic_lesson(t, "settings"))
        for t in FILLER
    ]
    teach += [
        (SIBLING_TASK, topic_lesson("job scheduling", "priority queue")),
        (
            "What are the common mistakes with cron scheduling in production",
            topic_lesson("cron scheduling", "time zone"),
        ),
    ]
    for query, text in teach:
        memory.report(None, namespace="ns", query=query, status="resolved", proposed_insight=text)
        memory.consolidate()


def sibling_memory(tmp_path: Path, redis_url: str, relevance: str = "idf") -> Memory:
    """A memory on ``sibling_world``, text relevance weighing words as ``relevance`` says."""
    settings = Settings(data_dir=tmp_path / "d", redis_url=redis_url, controller="rules", relevance=relevance)
    memory = Memory.open(settings)
    assert isinstance(memory, Memory)
    sibling_world(memory)
    return memory


@pytest.mark.parametrize("relevance", ["idf", "cosine"])
def test_a_word_that_names_the_subject_outweighs_those_every_lesson_holds(
    tmp_path: Path, redis_url: str, redis_client: Any, relevance: str
) -> None:
    with sibling_memory(tmp_path, redis_url, relevance) as memory:
        first = memory.retrieve(TOPIC_TASK, "ns").insights[0].text
    # the sibling's lesson is supported by a task worded as this one (similarity 0.9 against 0.34);
    # with every word alike the two lessons' texts are about as near the task
    expected = "cron scheduling" if relevance == "idf" else "job scheduling"
    assert first == topic_lesson(expected, "time zone" if relevance == "idf" else "priority queue")


def test_a_namespace_without_word_counts_weighs_words_alike_until_they_are_counted(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    import time

    from evomem import keys

    with sibling_memory(tmp_path, redis_url) as memory:
        redis_client.delete(keys.insight_words("ns"))  # as an evomem that kept no counts left it
        served = memory.retriever.retrieve(TOPIC_TASK, "ns", record=False).insights[0].text
        assert served == topic_lesson("job scheduling", "priority queue")  # the cosine, meanwhile
        deadline = time.monotonic() + 10
        while memory.graph.word_counts("ns", [1]) is None and time.monotonic() < deadline:
            time.sleep(0.02)  # counted in the background
        assert memory.graph.word_counts("ns", [1]) is not None
        served = memory.retriever.retrieve(TOPIC_TASK, "ns", record=False).insights[0].text
        assert served == topic_lesson("cron scheduling", "time zone")


def test_idf_relevance_with_every_word_alike_is_the_cosine() -> None:
    from evomem.core.retrieval import idf_relevance

    for task, text in [(TASK, ABOUT_IT), (TASK, GENERIC), (TASK, TASK), (TOPIC_TASK, SIBLING_TASK)]:
        t, i = word_features(task), word_features(text)
        alike = dict.fromkeys(t | i, 2.5)
        assert idf_relevance(t, i, alike) == pytest.approx(text_relevance(t, i))
    assert idf_relevance(set(), word_features(TASK), {}) == 0.0


@pytest.mark.parametrize("relevance", ["idf", "cosine"])
def test_the_scale_benchmarks_exact_reference_ranks_as_the_retriever(
    tmp_path: Path, redis_url: str, redis_client: Any, relevance: str
) -> None:
    from bench.scale_service import exact_recall

    with sibling_memory(tmp_path, redis_url, relevance) as memory:
        tasks = [("ns", TOPIC_TASK), ("ns", SIBLING_TASK), ("ns", "Review our use of bloom filters and cron")]
        got = exact_recall(memory, tasks)
    assert got["recall"] == 1.0 and got["same_order"] == 1.0


def _teach_one_more(memory: Memory) -> None:
    memory.report(None, namespace="ns", query="Plan the cron scheduling rollout", status="resolved",
                  proposed_insight=topic_lesson("cron scheduling", "overlap lock"))  # fmt: skip
    memory.consolidate()  # applied, then projected


class _Reads:
    """Counts a graph store's reads of word counts."""

    def __init__(self, graph: Any) -> None:
        self.calls: list[str] = []
        for name in ("word_counts", "word_table"):
            real = getattr(graph, name)
            setattr(graph, name, self._spy(name, real))

    def _spy(self, name: str, real: Any) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            return real(*args)

        return call


def test_a_retrieval_process_keeps_the_whole_word_table_and_reads_only_the_words_of_new_insights(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    with sibling_memory(tmp_path, redis_url) as memory:
        retriever = memory.retriever
        assert retriever.words_announced  # an embedded index: its projector tells the retriever
        reads = _Reads(memory.graph)
        first = memory.retrieve(TOPIC_TASK, "ns").insights[0].text  # the words read as met, meanwhile
        retriever.wait_word_tables()
        assert sorted(reads.calls) == ["word_counts", "word_table"]  # the table read in the background
        table = retriever._word_tables["ns"]
        assert table.weights is not None and table.weights.total == len(FILLER) + 2
        reads.calls.clear()
        assert memory.retrieve(TOPIC_TASK, "ns").insights[0].text == first
        memory.retrieve(SIBLING_TASK, "ns")
        memory.retrieve("Words no insight holds: zebra quartz", "ns")
        assert reads.calls == []  # a word the table lacks is held by none: nothing read
        _teach_one_more(memory)  # the projector tells the table the new insight's words
        assert table.pending
        served = memory.retrieve(TOPIC_TASK, "ns").insights[0].text
        assert reads.calls == ["word_counts"]
        assert not table.pending and table.weights.total == len(FILLER) + 3
        assert (table.weights.total, table.counts) == memory.graph.word_table("ns", 1 << 20)
        assert served.startswith("For cron scheduling")


def test_a_namespace_with_more_words_than_the_table_holds_is_read_word_by_word_and_ranks_alike(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    tasks = [TOPIC_TASK, SIBLING_TASK, "Review our use of bloom filters and cron"]
    with sibling_memory(tmp_path, redis_url) as memory:
        retriever = memory.retriever
        whole = [retriever.retrieve(t, "ns", record=False).insights for t in tasks]
        retriever.wait_word_tables()
        assert "ns" in retriever._word_tables
        retriever.settings = retriever.settings.model_copy(update={"word_table": 10})
        retriever._word_tables.clear()
        reads = _Reads(memory.graph)
        retriever.retrieve(TOPIC_TASK, "ns", record=False)
        retriever.wait_word_tables()
        assert "ns" in retriever._no_table and "ns" not in retriever._word_tables
        by_word = [retriever.retrieve(t, "ns", record=False).insights for t in tasks]
        assert reads.calls.count("word_table") == 1  # not tried again
        assert by_word == whole


def test_a_word_table_that_grows_past_what_the_process_keeps_is_dropped(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    with sibling_memory(tmp_path, redis_url) as memory:
        retriever = memory.retriever
        retriever.retrieve(TOPIC_TASK, "ns", record=False)
        retriever.wait_word_tables()
        words = len(retriever._word_tables["ns"].counts)
        retriever.settings = retriever.settings.model_copy(update={"word_table": words})  # full
        _teach_one_more(memory)  # its new words are added to the table: one past the limit
        first = retriever.retrieve(TOPIC_TASK, "ns", record=False).insights[0].text
        assert "ns" not in retriever._word_tables and "ns" in retriever._no_table
        assert first.startswith("For cron scheduling")  # the counts then read word by word
        assert retriever.retrieve(TOPIC_TASK, "ns", record=False).insights[0].text == first


def test_without_announcements_a_retrieval_reads_the_count_of_insights_and_starts_again_when_it_moved(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    with sibling_memory(tmp_path, redis_url) as memory:
        retriever = memory.retriever
        retriever.words_announced = False  # as with a Qdrant server that other processes write
        projector = memory.runtime.projector
        assert projector is not None
        projector.on_new_insights = None
        memory.retrieve(TOPIC_TASK, "ns")
        kept = retriever._word_weights["ns"]
        memory.retrieve(SIBLING_TASK, "ns")
        assert retriever._word_weights["ns"] is kept  # the count read the same
        _teach_one_more(memory)
        memory.retrieve(TOPIC_TASK, "ns")
        assert retriever._word_weights["ns"] is not kept
        assert retriever._word_weights["ns"].total == kept.total + 1


def test_the_projector_tells_of_new_insights_before_the_index_serves_them(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    """A retrieval bounds each candidate's relevance by the task words the namespace's insights
    hold, so none may be served before the retriever has its words."""
    with sibling_memory(tmp_path, redis_url) as memory:
        projector, index = memory.runtime.projector, memory.retriever.index
        assert projector is not None and projector.on_new_insights is not None
        told = projector.on_new_insights
        seen: list[tuple[list[str], set[str]]] = []

        def spy(texts: Any) -> None:
            seen.append((texts["ns"], {text for page in index.scan_insights(1000) for _, text in page}))
            told(texts)

        projector.on_new_insights = spy
        _teach_one_more(memory)
        [(texts, held)] = seen
        assert texts == [topic_lesson("cron scheduling", "overlap lock")] and texts[0] not in held
        assert texts[0] in {text for page in index.scan_insights(1000) for _, text in page}


def test_a_word_table_that_cannot_be_read_is_read_again_later_and_words_are_read_as_met_meanwhile(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    from evomem.errors import TransientError

    with sibling_memory(tmp_path, redis_url) as memory:
        graph, retriever = memory.graph, memory.retriever
        real = graph.word_table

        def unreachable(*args: Any) -> Any:
            raise TransientError("redis unreachable")

        graph.word_table = unreachable  # type: ignore[method-assign]
        served = retriever.retrieve(TOPIC_TASK, "ns", record=False).insights[0].text
        retriever.wait_word_tables()
        assert served == topic_lesson("cron scheduling", "time zone")  # its words read as met
        assert "ns" not in retriever._word_tables and "ns" not in retriever._no_table
        graph.word_table = real  # type: ignore[method-assign]
        retriever.retrieve(TOPIC_TASK, "ns", record=False)
        retriever.wait_word_tables()
        assert "ns" not in retriever._word_tables  # not before COUNT_WORDS_RETRY_S
        retriever._table_after.clear()  # as when that time has passed
        retriever.retrieve(TOPIC_TASK, "ns", record=False)
        retriever.wait_word_tables()
        assert retriever._word_tables["ns"].weights is not None


def test_the_words_of_a_new_insight_are_read_again_when_redis_failed_the_first_time(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    from evomem.errors import TransientError

    with sibling_memory(tmp_path, redis_url) as memory:
        graph, retriever = memory.graph, memory.retriever
        retriever.retrieve(TOPIC_TASK, "ns", record=False)
        retriever.wait_word_tables()
        table = retriever._word_tables["ns"]
        _teach_one_more(memory)
        announced = set(table.pending)
        real = graph.word_counts

        def unreachable(*args: Any) -> Any:
            raise TransientError("redis unreachable")

        graph.word_counts = unreachable  # type: ignore[method-assign]
        assert retriever.retrieve(TOPIC_TASK, "ns", record=False).insights  # fails open
        assert table.pending == announced  # kept for the next retrieval
        graph.word_counts = real  # type: ignore[method-assign]
        retriever.retrieve(TOPIC_TASK, "ns", record=False)
        assert not table.pending and table.weights is not None
        assert (table.weights.total, table.counts) == graph.word_table("ns", 1 << 20)
