"""One contract for every ``VectorIndex``: Qdrant Edge, qdrant-client (``:memory:`` standing in for a
server) and the in-memory reference must serve the same answers, because retrieval is written
against the port and never knows which one it runs on."""

from __future__ import annotations

import math
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pytest
from qdrant_client import QdrantClient

from evomem.embedding import HashingEmbedder
from evomem.errors import ConfigError, StoreLockedError, TransientError
from evomem.index.client import ClientIndex
from evomem.index.edge import EdgeIndex
from evomem.index.memory import InMemoryIndex
from evomem.ports import VectorIndex
from evomem.settings import Settings
from schemas import InsightNode, QueryNode

Kind = Literal["sparse", "dense"]
Opener = Callable[..., VectorIndex]
BACKENDS = ["edge", "client", "memory"]
NOW = datetime(2025, 1, 1, tzinfo=UTC)
BIG = 4_000_000_000  # a crc32 bucket above 2**31: sparse indices are unsigned 32-bit


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_index(backend: str, tmp_path: Path) -> Iterator[Opener]:
    """Opens indexes of the parametrised backend and closes whatever is still open afterwards."""
    opened: list[VectorIndex] = []

    def _open(kind: Kind = "sparse", dim: int = 4) -> VectorIndex:
        index: VectorIndex
        if backend == "edge":
            index = EdgeIndex(tmp_path / "qdrant", kind, dim if kind == "dense" else 0)
        elif backend == "client":
            index = ClientIndex.connect(Settings(data_dir=tmp_path, qdrant_url=":memory:"), kind, dim)
        else:
            index = InMemoryIndex(kind, dim)
        opened.append(index)
        return index

    yield _open
    for index in opened:
        index.close()


@pytest.fixture
def index(open_index: Opener) -> VectorIndex:
    return open_index()


def query(qid: str, namespace: str = "ns") -> QueryNode:
    return QueryNode(id=qid, namespace=namespace, text=qid, status="resolved", event_id="e", created_at=NOW)


def insight(
    iid: str,
    *,
    namespace: str = "ns",
    state: Literal["active", "archived"] = "active",
    positive: tuple[str, ...] = (),
    negative: tuple[str, ...] = (),
    version: int = 1,
    text: str | None = None,
) -> InsightNode:
    return InsightNode(
        id=iid,
        namespace=namespace,
        text=text or f"{iid} v{version}",
        state=state,
        positive=frozenset(positive),
        negative=frozenset(negative),
        version=version,
        created_by_event="e",
        created_at=NOW,
        updated_at=NOW,
    )


def unit(vec: dict[int, float]) -> dict[int, float]:
    norm = math.sqrt(sum(v * v for v in vec.values()))
    return {k: v / norm for k, v in vec.items()}


# sparse vectors whose cosines with PROBE are known: 1.0, 0.8, 0.6, 0 (nothing in common)
PROBE = {1: 1.0}
NEAR = {1: 1.0}
MID = unit({1: 0.8, BIG: 0.6})
FAR = unit({1: 0.6, 7: 0.8})
DISJOINT = {BIG + 1: 1.0}
# dense ones, deliberately not normalised: the index must do cosine, not dot product
D_PROBE = [2.0, 0.0, 0.0, 0.0]
D_NEAR, D_MID, D_FAR = [5.0, 0.0, 0.0, 0.0], [0.8, 0.6, 0.0, 0.0], [0.6, 0.0, 0.8, 0.0]
D_OPPOSITE = [-1.0, 0.0, 0.0, 0.0]


# -- similarity search --------------------------------------------------------------------------
def test_search_queries_ranks_by_cosine_within_the_namespace(index: VectorIndex) -> None:
    index.upsert_queries(
        [
            (query("far"), FAR),
            (query("near"), NEAR),
            (query("mid"), MID),
            (query("disjoint"), DISJOINT),
            (query("other-ns", "elsewhere"), NEAR),
        ]
    )
    hits = index.search_queries(PROBE, "ns", 10)
    assert [h for h, _ in hits] == ["near", "mid", "far"]  # no zero score, never another namespace
    assert [s for _, s in hits] == pytest.approx([1.0, 0.8, 0.6], abs=1e-4)
    assert [h for h, _ in index.search_queries(PROBE, "ns", 2)] == ["near", "mid"]
    assert [h for h, _ in index.search_queries(PROBE, "elsewhere", 10)] == ["other-ns"]
    assert index.search_queries(PROBE, "nobody", 10) == []


def test_dense_search_ranks_by_cosine_within_the_namespace(open_index: Opener) -> None:
    index = open_index("dense", 4)
    index.upsert_queries(
        [
            (query("far"), D_FAR),
            (query("near"), D_NEAR),
            (query("mid"), D_MID),
            (query("opposite"), D_OPPOSITE),
            (query("other-ns", "elsewhere"), D_NEAR),
        ]
    )
    hits = index.search_queries(D_PROBE, "ns", 10)
    assert [h for h, _ in hits] == ["near", "mid", "far"]
    assert [s for _, s in hits] == pytest.approx([1.0, 0.8, 0.6], abs=1e-4)
    index.write_insights(
        [
            insight("a", positive=("q",)),
            insight("b", state="archived", positive=("q",)),
            insight("c", namespace="elsewhere"),
        ],
        {"a": D_MID, "b": D_NEAR, "c": D_NEAR},
    )
    assert [h for h, _ in index.search_insights(D_PROBE, "ns", 5)] == ["a"]


def test_search_with_real_embeddings_finds_the_closest_text(index: VectorIndex) -> None:
    emb = HashingEmbedder()
    texts = {
        "q-truck": "Verify: Mohra is a truck",
        "q-city": "Which city hosts the summit in June?",
        "q-song": "Name the singer of this song",
    }
    index.upsert_queries([(query(i), v) for i, v in zip(texts, emb.embed(list(texts.values())), strict=True)])
    hits = index.search_queries(emb.embed_one("verify that Mohra is a truck"), "ns", 3)
    assert hits[0][0] == "q-truck"
    assert all(score > 0 for _, score in hits)


def test_search_insights_serves_only_active_insights_of_the_namespace(index: VectorIndex) -> None:
    index.write_insights(
        [
            insight("live"),
            insight("gone", state="archived"),
            insight("foreign", namespace="x"),
            insight("unrelated"),
        ],
        {"live": MID, "gone": NEAR, "foreign": NEAR, "unrelated": DISJOINT},
    )
    assert [h for h, _ in index.search_insights(PROBE, "ns", 5)] == ["live"]


# -- the candidate filter (Eq. 7) -----------------------------------------------------------------
def test_candidates_are_active_with_positive_evidence_in_the_expanded_set(index: VectorIndex) -> None:
    index.write_insights(
        [
            insight("hit", positive=("q1", "q9"), negative=("q5",), version=2),
            insight("hit2", positive=("q2",)),
            insight("no-overlap", positive=("q7",)),
            insight("negative-only", positive=("q7",), negative=("q1",)),
            insight("archived", state="archived", positive=("q1",)),
            insight("foreign", namespace="elsewhere", positive=("q1",)),
            insight("no-evidence"),
        ],
        dict.fromkeys(
            ["hit", "hit2", "no-overlap", "negative-only", "archived", "foreign", "no-evidence"], NEAR
        ),
    )
    found = {c.id: c for c in index.candidate_insights("ns", {"q1", "q2", "q3"}, 100)}
    assert set(found) == {"hit", "hit2"}
    hit = found["hit"]
    assert (set(hit.positive), set(hit.negative), hit.version, hit.text, hit.active) == (
        {"q1", "q9"},
        {"q5"},
        2,
        "hit v2",
        True,
    )
    assert [c.id for c in index.candidate_insights("elsewhere", ["q1"], 100)] == ["foreign"]
    assert len(index.candidate_insights("ns", ["q1", "q2"], 1)) == 1


def test_an_archived_insight_is_never_served_again(index: VectorIndex) -> None:
    index.write_insights([insight("i", positive=("q1",))], {"i": NEAR})
    assert [c.id for c in index.candidate_insights("ns", ["q1"], 10)] == ["i"]
    index.write_insights([insight("i", state="archived", positive=("q1",), negative=("q2",), version=2)], {})
    assert index.candidate_insights("ns", ["q1", "q2"], 10) == []
    assert index.search_insights(PROBE, "ns", 10) == []
    assert index.insight_versions(["i"]) == {"i": 2}


# -- versions and payload updates -----------------------------------------------------------------
def test_an_older_version_never_overwrites_a_newer_one(index: VectorIndex) -> None:
    index.write_insights([insight("i", positive=("q1", "q2", "q3"), version=3)], {"i": NEAR})
    index.write_insights([insight("i", state="archived", positive=("q1",), version=2)], {"i": NEAR})
    index.write_insights([insight("i", state="archived", version=3)], {})  # same version: not newer either
    assert index.insight_versions(["i"]) == {"i": 3}
    [c] = index.candidate_insights("ns", ["q3"], 10)
    assert (c.version, set(c.positive), c.text) == (3, {"q1", "q2", "q3"}, "i v3")


def test_the_newest_of_two_versions_in_one_batch_wins(index: VectorIndex) -> None:
    index.write_insights([insight("i", positive=("q1",), version=3), insight("i", version=2)], {"i": NEAR})
    assert index.insight_versions(["i"]) == {"i": 3}


def test_a_payload_only_update_keeps_the_vector_and_updates_evidence(index: VectorIndex) -> None:
    index.write_insights([insight("i", positive=("q1",))], {"i": MID})
    index.write_insights([insight("i", positive=("q1", "q2"), negative=("q3",), version=2)], {})
    [(hit, score)] = index.search_insights(PROBE, "ns", 5)
    assert hit == "i" and score == pytest.approx(0.8, abs=1e-4)
    [c] = index.candidate_insights("ns", ["q2"], 10)
    assert (set(c.positive), set(c.negative), c.version) == ({"q1", "q2"}, {"q3"}, 2)
    assert index.count("insight") == 1


def test_an_insight_without_features_is_stored_and_found_by_evidence(index: VectorIndex) -> None:
    index.write_insights([insight("mute", positive=("q1",), text="!!!")], {"mute": {}})
    assert [c.id for c in index.candidate_insights("ns", ["q1"], 10)] == ["mute"]
    assert index.search_insights(PROBE, "ns", 10) == []


# -- edges of the input ---------------------------------------------------------------------------
def test_empty_inputs_give_empty_answers(index: VectorIndex) -> None:
    assert index.search_queries(PROBE, "ns", 5) == []  # nothing stored yet
    index.upsert_queries([])
    index.write_insights([], {})
    index.upsert_queries([(query("q1"), NEAR)])
    index.write_insights([insight("i", positive=("q1",))], {"i": NEAR})
    assert index.search_queries({}, "ns", 5) == []
    assert index.search_insights({}, "ns", 5) == []
    assert index.candidate_insights("ns", [], 10) == []
    assert index.insight_versions([]) == {}


def test_ids_that_are_not_uuids_round_trip(index: VectorIndex) -> None:
    ids = ["q:7.b-1", str(uuid.uuid4()), "plain"]
    index.upsert_queries([(query(i), NEAR) for i in ids])
    assert sorted(h for h, _ in index.search_queries(PROBE, "ns", 10)) == sorted(ids)
    index.write_insights([insight("ins_x.1", positive=(ids[0],))], {"ins_x.1": NEAR})
    assert index.insight_versions(["ins_x.1", "missing"]) == {"ins_x.1": 1}
    assert [c.id for c in index.candidate_insights("ns", [ids[0]], 10)] == ["ins_x.1"]
    assert index.search_insights(PROBE, "ns", 1)[0][0] == "ins_x.1"


def test_count_counts_points_and_an_upsert_is_idempotent(index: VectorIndex) -> None:
    assert (index.count("query"), index.count("insight")) == (0, 0)
    index.upsert_queries([(query("a"), NEAR), (query("b"), MID)])
    index.upsert_queries([(query("a"), NEAR)])
    index.write_insights([insight("i"), insight("j")], {"i": NEAR, "j": FAR})
    assert (index.count("query"), index.count("insight")) == (2, 2)


def test_a_new_index_is_fresh(index: VectorIndex) -> None:
    assert index.fresh is True
    assert index.identity


# -- backend-specific promises --------------------------------------------------------------------
def test_reopening_an_edge_store_keeps_its_data(tmp_path: Path) -> None:
    first = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    first.upsert_queries([(query("q1"), NEAR)])
    first.write_insights([insight("i", positive=("q1",), version=2)], {"i": NEAR})
    first.close()
    again = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        assert again.fresh is False
        assert again.identity == first.identity
        [(hit, score)] = again.search_queries(PROBE, "ns", 5)
        assert hit == "q1" and score == pytest.approx(1.0, abs=1e-4)
        assert again.insight_versions(["i"]) == {"i": 2}
        assert [c.id for c in again.candidate_insights("ns", ["q1"], 5)] == ["i"]
    finally:
        again.close()


def test_an_open_edge_store_refuses_a_second_opener(tmp_path: Path) -> None:
    holder = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        with pytest.raises(StoreLockedError, match="open in another process"):
            EdgeIndex(tmp_path / "qdrant", "sparse", 0)
        code = (
            "import sys, pathlib\nfrom evomem.index.edge import EdgeIndex\nfrom evomem.errors import "
            "StoreLockedError\ntry:\n    EdgeIndex(pathlib.Path(sys.argv[1]), 'sparse', 0)\n"
            "except StoreLockedError:\n    sys.exit(3)\n"
        )
        other = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "qdrant")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode == 3, other.stderr
    finally:
        holder.close()


def test_an_unreachable_qdrant_is_a_transient_error_without_the_key(tmp_path: Path) -> None:
    secret = "sk-very-secret-key"
    settings = Settings(
        data_dir=tmp_path, qdrant_url="https://user:hunter2pw@127.0.0.1:9", qdrant_api_key=secret
    )
    with pytest.raises(TransientError) as caught:
        ClientIndex.connect(settings, "sparse", 0)
    assert "127.0.0.1:9" in str(caught.value)
    assert secret not in str(caught.value) and "hunter2pw" not in str(caught.value)
    assert caught.value.__cause__ is None


@pytest.mark.parametrize("stale_view", [{}, {"i": 1}], ids=["unseen", "older"])
def test_a_server_write_is_guarded_even_when_the_read_was_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale_view: dict[str, int]
) -> None:
    """Several retrieval workers may project into one server: the version check is the server's too."""
    index = ClientIndex.connect(Settings(data_dir=tmp_path, qdrant_url=":memory:"), "sparse", 0)
    try:
        index.write_insights([insight("i", positive=("q1",), version=3)], {"i": NEAR})
        monkeypatch.setattr(index, "insight_versions", lambda ids: dict(stale_view))
        index.write_insights([insight("i", state="archived", version=2)], {"i": DISJOINT})
        monkeypatch.undo()
        [c] = index.candidate_insights("ns", ["q1"], 10)
        assert (c.version, c.active) == (3, True)
        assert [h for h, _ in index.search_insights(PROBE, "ns", 5)] == ["i"]
    finally:
        index.close()


def test_reconnecting_to_a_server_keeps_it_and_refuses_other_vectors() -> None:
    """The same collections opened again are not fresh; an embedder of another kind is refused."""
    client = QdrantClient(location=":memory:")
    first = ClientIndex(client, "sparse", 0, identity="qdrant:test", where="test", local=True)
    first.upsert_queries([(query("q1"), NEAR)])
    again = ClientIndex(client, "sparse", 0, identity="qdrant:test", where="test", local=True)
    assert (first.fresh, again.fresh, again.count("query")) == (True, False, 1)
    with pytest.raises(ConfigError, match="other vectors"):
        ClientIndex(client, "dense", 4, identity="qdrant:test", where="test", local=True)
    client.close()
