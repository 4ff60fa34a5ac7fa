"""One contract for every ``VectorIndex``: Qdrant Edge, qdrant-client (``:memory:`` standing in for a
server) and the in-memory reference must serve the same answers, because retrieval is written
against the port and never knows which one it runs on."""

from __future__ import annotations

import math
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, cast

import pytest
from qdrant_client import QdrantClient

from evomem.adapters.memory.index import InMemoryIndex
from evomem.adapters.qdrant import edge
from evomem.adapters.qdrant.client import ClientIndex, collection_vectors
from evomem.adapters.qdrant.common import int_point_id, int_query_point_id
from evomem.adapters.qdrant.edge import EdgeIndex
from evomem.core.hashing import HashingEmbedder
from evomem.core.ports import InsightPoint, QueryHit, QueryPoint, VectorIndex
from evomem.core.retrieval import ServingInsight
from evomem.errors import ConfigError, StoreError, StoreLockedError, TransientError
from evomem.settings import Settings
from tests.support.sharded_qdrant import ShardedLocal

Kind = Literal["sparse", "dense"]
Opener = Callable[..., VectorIndex]
#: edge-own: the embedded engine with every namespace promoted to a shard of its own at its first
#: query; edge: the default tier, small namespaces in shared shards
#: client-shared, client-own: a Qdrant server's custom sharding (modelled over local mode,
#: tests/support/sharded_qdrant.py) with every namespace under the shared shard key, or promoted to
#: a key of its own at its first query
BACKENDS = ["edge", "edge-own", "client", "client-shared", "client-own", "memory"]
BIG = 4_000_000_000  # a crc32 bucket above 2**31: sparse indices are unsigned 32-bit


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_index(backend: str, tmp_path: Path) -> Iterator[Opener]:
    """Opens indexes of the parametrised backend and closes whatever is still open afterwards."""
    opened: list[VectorIndex] = []

    def _open(kind: Kind = "sparse", dim: int = 4, idf: bool = False) -> VectorIndex:
        index: VectorIndex
        if backend in ("edge", "edge-own"):
            promote_at = 1 if backend == "edge-own" else 1000
            index = EdgeIndex(
                tmp_path / "qdrant", kind, dim if kind == "dense" else 0, idf=idf, promote_at=promote_at
            )
        elif backend == "client":
            similarity = "idf" if idf else "cosine"
            settings = Settings(data_dir=tmp_path, qdrant_url=":memory:", similarity=similarity)
            index = ClientIndex.connect(settings, kind, dim)
        elif backend in ("client-shared", "client-own"):
            index = ClientIndex(
                cast(QdrantClient, ShardedLocal()),
                kind,
                dim if kind == "dense" else 0,
                identity="t",
                where="sharded",
                local=True,
                idf=idf,
                shard_keys=True,
                promote_at=1 if backend == "client-own" else 1000,
                routing_s=0,
            )
        else:
            index = InMemoryIndex(kind, dim, idf=idf)
        opened.append(index)
        return index

    yield _open
    for index in opened:
        index.close()


@pytest.fixture
def index(open_index: Opener) -> VectorIndex:
    return open_index()


def query(
    qid: str,
    namespace: str = "ns",
    *,
    supports: tuple[str, ...] = (),
    harms: tuple[str, ...] = (),
    version: int = 1,
) -> QueryPoint:
    return QueryPoint(qid, namespace, qid, "resolved", version, supports, harms)


def insight(
    iid: str,
    *,
    namespace: str = "ns",
    state: Literal["active", "archived"] = "active",
    inherits: tuple[str, ...] = (),
    version: int = 1,
    text: str | None = None,
) -> InsightPoint:
    return InsightPoint(iid, namespace, text or f"{iid} v{version}", state, version, inherits)


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


def ids(hits: list[QueryHit]) -> list[str]:
    return [h.id for h in hits]


def serving(index: VectorIndex, namespace: str, wanted: list[str]) -> list[ServingInsight]:
    """Eq. 7's filter as retrieval asks for it: the active ids first, then the text of each."""
    active, heirs = index.serving_ids(namespace, wanted)
    found = index.read_insights(namespace, active | set(heirs))
    assert set(found) == active | set(heirs)
    for heir, inherits in heirs.items():
        assert found[heir].inherits == inherits
    return sorted(found.values(), key=lambda s: s.id)


def served(index: VectorIndex, namespace: str, wanted: list[str]) -> dict[str, ServingInsight]:
    return {s.id: s for s in serving(index, namespace, wanted)}


# -- similarity search (Eq. 2) ------------------------------------------------------------------
def test_search_queries_ranks_by_cosine_within_the_namespace(index: VectorIndex) -> None:
    index.write_queries(
        [
            (query("far"), FAR),
            (query("near", supports=("i1", "i2"), harms=("i3",)), NEAR),
            (query("mid"), MID),
            (query("disjoint"), DISJOINT),
            (query("other-ns", "elsewhere"), NEAR),
        ]
    )
    hits = index.search_queries(PROBE, "ns", 10)
    assert ids(hits) == ["near", "mid", "far"]  # no zero score, never another namespace
    assert [h.score for h in hits] == pytest.approx([1.0, 0.8, 0.6], abs=1e-4)
    assert (hits[0].supports, hits[0].harms) == (("i1", "i2"), ("i3",))  # the evidence comes along
    assert ids(index.search_queries(PROBE, "ns", 2)) == ["near", "mid"]
    assert ids(index.search_queries(PROBE, "elsewhere", 10)) == ["other-ns"]
    assert index.search_queries(PROBE, "nobody", 10) == []


@pytest.mark.parametrize("order", [("q-b", "q-a", "q-c"), ("q-c", "q-a", "q-b")])
def test_queries_that_score_alike_are_cut_by_id_whatever_order_they_were_written_in(
    index: VectorIndex, order: tuple[str, ...]
) -> None:
    """Two replicas of the same data hold their points in different places: the top-k of queries
    that tie must not depend on that, or two processes serve different insights."""
    index.write_queries([(query(q), NEAR) for q in order] + [(query("q-far"), FAR)])
    assert ids(index.search_queries(PROBE, "ns", 1)) == ["q-a"]
    assert ids(index.search_queries(PROBE, "ns", 2)) == ["q-a", "q-b"]
    assert ids(index.search_queries(PROBE, "ns", 4)) == ["q-a", "q-b", "q-c", "q-far"]


def test_dense_search_ranks_by_cosine_within_the_namespace(open_index: Opener) -> None:
    index = open_index("dense", 4)
    index.write_queries(
        [
            (query("far"), D_FAR),
            (query("near"), D_NEAR),
            (query("mid"), D_MID),
            (query("opposite"), D_OPPOSITE),
            (query("other-ns", "elsewhere"), D_NEAR),
        ]
    )
    hits = index.search_queries(D_PROBE, "ns", 10)
    assert ids(hits) == ["near", "mid", "far"]
    # the embedded store keeps dense vectors as float16 (0.8 is stored as 0.7998)
    assert [h.score for h in hits] == pytest.approx([1.0, 0.8, 0.6], abs=1e-3)
    index.write_insights(
        [
            (insight("a"), D_MID),
            (insight("b", state="archived"), D_NEAR),
            (insight("c", namespace="elsewhere"), D_NEAR),
        ]
    )
    assert [h for h, _ in index.search_insights(D_PROBE, "ns", 5)] == ["a"]


def test_search_with_real_embeddings_finds_the_closest_text(index: VectorIndex) -> None:
    emb = HashingEmbedder()
    texts = {
        "q-truck": "Verify: Mohra is a truck",
        "q-city": "Which city hosts the summit in June?",
        "q-song": "Name the singer of this song",
    }
    index.write_queries([(query(i), v) for i, v in zip(texts, emb.embed(list(texts.values())), strict=True)])
    hits = index.search_queries(emb.embed_one("verify that Mohra is a truck"), "ns", 3)
    assert hits[0].id == "q-truck"
    assert all(h.score > 0 for h in hits)


def test_a_score_is_the_embedders_cosine_whatever_the_namespace(index: VectorIndex) -> None:
    """The index may lay out a namespace's vectors its own way (the Qdrant backends give each
    namespace its own sparse dimensions), never at the cost of the score Eq. 2 reads."""
    emb = HashingEmbedder()
    texts = [
        "explain how to rotate the api keys",
        "explain how to rotate the logs",
        "why does the cache miss",
    ]
    vecs = emb.embed(texts)
    probe = emb.embed_one("explain how to rotate keys")
    cosine = [sum(w * v.get(k, 0.0) for k, w in probe.items()) for v in vecs]  # type: ignore[union-attr]
    for ns in ("ns", "a-tenant", "ünï:{code}"):
        index.write_queries([(query(f"q{i}", ns), v) for i, v in enumerate(vecs)])
        hits = {h.id: h.score for h in index.search_queries(probe, ns, 3)}
        assert hits == pytest.approx({f"q{i}": c for i, c in enumerate(cosine) if c > 0}, abs=1e-4)


def test_search_insights_serves_only_active_insights_of_the_namespace(index: VectorIndex) -> None:
    index.write_insights(
        [
            (insight("live"), MID),
            (insight("gone", state="archived"), NEAR),
            (insight("foreign", namespace="x"), NEAR),
            (insight("unrelated"), DISJOINT),
        ]
    )
    assert [h for h, _ in index.search_insights(PROBE, "ns", 5)] == ["live"]


# -- the evidence of known queries (Eq. 3-4's neighbours) ------------------------------------------
def test_query_evidence_reads_the_evidence_of_known_queries_of_the_namespace(index: VectorIndex) -> None:
    index.write_queries(
        [
            (query("a", supports=("i1",), harms=("i2",)), NEAR),
            (query("b"), MID),
            (query("a", "elsewhere", supports=("x",)), NEAR),  # the same id in another namespace
        ]
    )
    found = index.query_evidence("ns", ["a", "b", "missing"])
    assert {q: (h.supports, h.harms) for q, h in found.items()} == {"a": (("i1",), ("i2",)), "b": ((), ())}
    assert index.query_evidence("elsewhere", ["a"])["a"].supports == ("x",)
    assert index.query_evidence("ns", []) == {}


# -- the evidence search: the evidence of the insights nearest to the task --------------------------
@pytest.mark.parametrize("idf", [False, True])
def test_search_evidence_ranks_the_evidence_of_the_insights_nearest_to_the_task(
    open_index: Opener, idf: bool
) -> None:
    """The past queries most similar to the task among those that support or harm one of the active
    insights nearest to its text (or an insight one of them took over), scored by their cosine."""
    index = open_index(idf=idf)
    index.write_insights(
        [
            (insight("near"), NEAR),
            (insight("mid"), MID),
            (insight("heir", inherits=("old",)), MID),  # took over old's evidence
            (insight("old", state="archived"), NEAR),
            (insight("unrelated"), DISJOINT),  # not near the task: its evidence is not searched
            (insight("foreign", namespace="elsewhere"), NEAR),
        ]
    )
    index.write_queries(
        [
            (query("supports-near", supports=("near",)), FAR),
            (query("harms-mid", harms=("mid",)), MID),
            (query("supports-old", supports=("old",)), NEAR),
            (query("supports-unrelated", supports=("unrelated",)), NEAR),
            (query("plain"), NEAR),  # the most similar, and evidence of nothing
            (query("foreign", "elsewhere", supports=("near",)), NEAR),
        ]
    )
    hits = index.search_evidence(PROBE, "ns", 3, 5)
    assert ids(hits) == ["supports-old", "harms-mid", "supports-near"]
    assert [h.score for h in hits] == pytest.approx([1.0, 0.8, 0.6], abs=1e-4)
    assert (hits[1].supports, hits[1].harms) == ((), ("mid",))
    assert ids(index.search_evidence(PROBE, "ns", 3, 2)) == ["supports-old", "harms-mid"]
    assert ids(index.search_evidence(PROBE, "ns", 1, 5)) == ["supports-near"]  # near alone
    assert ids(index.search_evidence(PROBE, "ns", 3, 2, exclude=["supports-old"])) == [
        "harms-mid",
        "supports-near",
    ]  # what Eq. 2 found already leaves room for the next
    assert index.search_evidence(PROBE, "ns", 0, 5) == []
    assert index.search_evidence(DISJOINT, "elsewhere", 3, 5) == []


def test_the_evidence_search_finds_insights_and_their_evidence_by_about_and_scores_by_the_task(
    index: VectorIndex,
) -> None:
    """``about`` (the retriever's word 1-2-grams of the task) picks the insights whose evidence is
    searched and ranks that evidence; each hit is still scored by its cosine with the task."""
    words = {7: 1.0}
    by_words_too = unit({1: 0.99, 7: 0.14})  # nearer the task than FAR, farther from its words
    index.write_insights([(insight("by-words"), words), (insight("by-task"), NEAR)])
    index.write_queries(
        [
            (query("q-words", supports=("by-words",)), FAR),
            (query("q-words-2", supports=("by-words",)), by_words_too),
            (query("q-no-words", supports=("by-words",)), MID),  # none of the words: not found by them
            (query("q-task", supports=("by-task",)), NEAR),
        ]
    )
    assert ids(index.search_evidence(PROBE, "ns", 1, 5)) == ["q-task"]
    hits = index.search_evidence(PROBE, "ns", 1, 1, about=words)
    assert ids(hits) == ["q-words"]
    assert hits[0].score == pytest.approx(0.6, abs=1e-4)  # its cosine to the task, not to ``about``
    hits = index.search_evidence(PROBE, "ns", 1, 5, about=words)
    assert ids(hits) == ["q-words", "q-words-2"]
    assert [h.score for h in hits] == pytest.approx([0.6, 0.99 / math.hypot(0.99, 0.14)], abs=1e-4)


@pytest.mark.parametrize("order", [("i-a", "i-b", "i-c"), ("i-c", "i-b", "i-a")])
def test_insights_that_score_alike_are_cut_by_id_in_the_evidence_search(
    index: VectorIndex, order: tuple[str, ...]
) -> None:
    """As for Eq. 2's queries: which of several equally near insights have their evidence searched
    must not depend on where a replica holds them."""
    index.write_insights([(insight(i), NEAR) for i in order])
    index.write_queries([(query(f"q-{i}", supports=(i,)), NEAR) for i in order])
    assert ids(index.search_evidence(PROBE, "ns", 1, 5)) == ["q-i-a"]
    assert ids(index.search_evidence(PROBE, "ns", 2, 5)) == ["q-i-a", "q-i-b"]


def test_an_edge_store_of_an_earlier_evomem_gains_the_evidence_search_indexes(tmp_path: Path) -> None:
    """A store written before the query collection indexed ``supports`` and ``harms`` is indexed in
    place when opened, and searched like a new one."""
    first = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    first.write_insights([(insight("i"), NEAR)])
    first.write_queries([(query("q", supports=("i",)), NEAR)])
    queries = first._queries("ns")
    queries.update(edge.qe.UpdateOperation.delete_field_index("supports"))
    queries.update(edge.qe.UpdateOperation.delete_field_index("harms"))
    assert {"supports", "harms"}.isdisjoint(queries.info().payload_schema)
    first.close()
    again = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        assert ids(again.search_evidence(PROBE, "ns", 3, 5)) == ["q"]
        assert {"supports", "harms"} <= set(again._queries("ns").info().payload_schema)
    finally:
        again.close()


# -- EVOMEM_SIMILARITY=idf: Eq. 2 with rare words weighing more -----------------------------------
_TEMPLATED = [
    f"Explain {w} to the new hires on the platform team"
    for w in ("sharding", "retries", "quotas", "tracing", "backpressure", "leases")
]
_SAME_SUBJECT = "Why does caching go stale after a deploy"
_TASK = "Explain caching to the new hires on the platform team"


@pytest.mark.parametrize("idf", [False, True])
def test_idf_finds_the_past_query_on_the_same_subject_and_weighs_it_by_its_cosine(
    open_index: Opener, idf: bool
) -> None:
    """Templated tasks share most of their words: by cosine the task's nearest past queries are the
    same template on other subjects; weighted by IDF, the one past query that shares the rare word
    (the subject) comes first. Every backend finds the same queries, and the score each carries is
    still its cosine to the task (what w(q) and the query graph's edges use)."""
    index = open_index(idf=idf)
    emb = HashingEmbedder()
    texts = {f"t{n}": t for n, t in enumerate(_TEMPLATED)} | {"subject": _SAME_SUBJECT}
    index.write_queries([(query(q), emb.embed_one(t)) for q, t in texts.items()])
    index.write_queries([(query("foreign", "elsewhere"), emb.embed_one(_TASK))])
    task = emb.embed_one(_TASK)
    hits = index.search_queries(task, "ns", 3)
    cosine = {q: sum(v * emb.embed_one(t).get(d, 0.0) for d, v in task.items()) for q, t in texts.items()}
    by_cosine = sorted(texts, key=lambda q: -cosine[q])
    assert [h.id for h in hits] == (["subject", *by_cosine[:2]] if idf else by_cosine[:3])
    assert all(math.isclose(h.score, cosine[h.id], rel_tol=1e-5) for h in hits)
    assert by_cosine[-1] == "subject"  # last of all by cosine


@pytest.mark.parametrize("backend", ["edge", "memory"])
def test_idf_counts_the_namespaces_own_queries_on_the_embedded_index(open_index: Opener) -> None:
    """IDF's N is the namespace's queries, as its n is: another tenant's volume does not reorder a
    namespace's search. With N counting every tenant's queries (a Qdrant server's one collection),
    the 200 queries of ``b`` lift the weight of the word two of ``a``'s queries share to nearly that
    of the word one holds, and ``two`` would come first."""
    index = open_index(idf=True)
    index.write_queries([(query("one", "a"), {1: 0.4}), (query("two", "a"), {2: 0.6})])
    index.write_queries([(query("three", "a"), {2: 0.1, 3: 1.0})])
    probe = {1: 1.0, 2: 1.0}
    alone = ids(index.search_queries(probe, "a", 3))
    index.write_queries([(query(f"b{n}", "b"), {1_000 + n: 1.0}) for n in range(200)])
    index.write_queries([(query(f"c{n}", "b"), {1: 1.0, 2: 1.0}) for n in range(5)])  # b's own words
    assert alone == ids(index.search_queries(probe, "a", 3)) == ["one", "two", "three"]


def test_a_store_built_for_one_similarity_refuses_to_open_for_the_other(tmp_path: Path) -> None:
    EdgeIndex(tmp_path / "qdrant", "sparse", 0, idf=False).close()
    with pytest.raises(ConfigError, match=r"EVOMEM_SIMILARITY=cosine.*delete that directory"):
        EdgeIndex(tmp_path / "qdrant", "sparse", 0)  # idf, the default


def test_a_qdrant_collection_changes_similarity_in_place(tmp_path: Path) -> None:
    """IDF is applied at search time, so a Qdrant server's collection is switched, not rebuilt."""
    client = QdrantClient(location=":memory:")
    emb = HashingEmbedder()
    for idf in (False, True, False):
        index = ClientIndex(client, "sparse", 0, identity="t", where=":memory:", local=True, idf=idf)
        if not idf:
            texts = {f"t{n}": t for n, t in enumerate(_TEMPLATED)} | {"subject": _SAME_SUBJECT}
            index.write_queries([(query(q), emb.embed_one(t)) for q, t in texts.items()])
        first = index.search_queries(emb.embed_one(_TASK), "ns", 1)[0].id
        assert (first == "subject") == idf


def test_a_qdrant_collection_tells_the_vectors_it_was_made_for() -> None:
    """What ``EMBEDDER=auto`` follows on a Qdrant server: sparse vectors (hashing), or dense ones
    of a dimension (e5's 384)."""
    assert collection_vectors(QdrantClient(location=":memory:")) is None  # nothing built yet
    made: list[tuple[Literal["sparse", "dense"], int]] = [("sparse", 0), ("dense", 384), ("dense", 1536)]
    for kind, dim in made:
        client = QdrantClient(location=":memory:")
        ClientIndex(client, kind, dim, identity="t", where=":memory:", local=True)
        assert collection_vectors(client) == (kind, dim)


# -- the candidate filter (Eq. 7): active state and evidence ids ------------------------------------
def test_serving_insights_are_the_active_ones_named_directly_or_through_what_they_inherit(
    index: VectorIndex,
) -> None:
    index.write_insights(
        [
            (insight("hit", version=2), NEAR),
            (insight("old", state="archived"), NEAR),
            (insight("revision", inherits=("old",)), NEAR),  # took over old's positive evidence
            (insight("unnamed"), NEAR),
            (insight("archived", state="archived"), NEAR),
            (insight("foreign", namespace="elsewhere"), NEAR),
        ]
    )
    found = served(index, "ns", ["hit", "old", "archived", "foreign", "missing"])
    assert set(found) == {"hit", "revision"}
    assert (found["hit"].text, found["hit"].version, found["revision"].inherits) == ("hit v2", 2, ("old",))
    assert set(served(index, "elsewhere", ["foreign", "hit"])) == {"foreign"}
    assert serving(index, "ns", []) == []


def test_an_archived_insight_is_never_served_again(index: VectorIndex) -> None:
    index.write_insights([(insight("i"), NEAR)])
    assert set(served(index, "ns", ["i"])) == {"i"}
    index.write_insights([(insight("i", state="archived", version=2), None)])
    assert serving(index, "ns", ["i"]) == []
    assert index.search_insights(PROBE, "ns", 10) == []
    assert index.versions("insight", "ns", ["i"]) == {"i": 2}


def test_scan_insights_pages_through_the_active_insights_of_every_namespace(index: VectorIndex) -> None:
    names = [str(uuid.uuid4()) for _ in range(7)]
    index.write_insights(
        [(insight(n, namespace=f"ns{k % 2}", text=f"text of {n}"), NEAR) for k, n in enumerate(names)]
    )
    index.write_insights([(insight(names[0], namespace="ns0", state="archived", version=2), None)])
    pages = list(index.scan_insights(3))
    assert all(len(p) <= 3 for p in pages)
    assert sorted(i for p in pages for i, _ in p) == sorted(names[1:])  # each once, the archived left out
    assert all(text == f"text of {i}" for p in pages for i, text in p)


# -- versions and payload updates -----------------------------------------------------------------
def test_an_older_version_never_overwrites_a_newer_one(index: VectorIndex) -> None:
    index.write_insights([(insight("i", version=3), NEAR)])
    index.write_insights([(insight("i", state="archived", version=2), NEAR)])
    index.write_insights([(insight("i", state="archived", version=3), None)])  # same version: not newer
    assert index.versions("insight", "ns", ["i"]) == {"i": 3}
    [c] = serving(index, "ns", ["i"])
    assert (c.version, c.text) == (3, "i v3")
    index.write_queries([(query("q", supports=("a", "b"), version=4), NEAR)])
    index.write_queries([(query("q", supports=("a",), version=3), None)])
    assert index.query_evidence("ns", ["q"])["q"].supports == ("a", "b")
    assert index.versions("query", "ns", ["q"]) == {"q": 4}


def test_the_newest_of_two_versions_in_one_batch_wins(index: VectorIndex) -> None:
    index.write_insights([(insight("i", version=3), NEAR), (insight("i", version=2), NEAR)])
    assert index.versions("insight", "ns", ["i"]) == {"i": 3}


def test_a_payload_only_update_keeps_the_vector_and_updates_the_evidence(index: VectorIndex) -> None:
    index.write_queries([(query("q", supports=("a",)), MID)])
    index.write_queries([(query("q", supports=("a", "b"), harms=("c",), version=2), None)])
    [hit] = index.search_queries(PROBE, "ns", 5)
    assert (hit.id, hit.supports, hit.harms) == ("q", ("a", "b"), ("c",))
    assert hit.score == pytest.approx(0.8, abs=1e-4)
    index.write_insights([(insight("i"), MID)])
    index.write_insights([(insight("i", inherits=("x",), version=2), None)])
    [(found, score)] = index.search_insights(PROBE, "ns", 5)
    assert found == "i" and score == pytest.approx(0.8, abs=1e-4)
    assert set(served(index, "ns", ["x"])) == {"i"}
    assert (index.count("insight"), index.count("query")) == (1, 1)


def test_a_point_new_to_the_index_must_come_with_its_vector(index: VectorIndex) -> None:
    with pytest.raises(ValueError, match="without a vector"):
        index.write_insights([(insight("i"), None)])
    with pytest.raises(ValueError, match="without a vector"):
        index.write_queries([(query("q"), None)])


def test_an_insight_without_features_is_stored_and_found_by_evidence(index: VectorIndex) -> None:
    index.write_insights([(insight("mute", text="!!!"), {})])
    assert set(served(index, "ns", ["mute"])) == {"mute"}
    assert index.search_insights(PROBE, "ns", 10) == []


# -- edges of the input ---------------------------------------------------------------------------
def test_empty_inputs_give_empty_answers(index: VectorIndex) -> None:
    assert index.search_queries(PROBE, "ns", 5) == []  # nothing stored yet
    index.write_queries([])
    index.write_insights([])
    index.write_queries([(query("q1", supports=("i",)), NEAR)])
    index.write_insights([(insight("i"), NEAR)])
    assert index.search_queries({}, "ns", 5) == []
    assert index.search_insights({}, "ns", 5) == []
    assert serving(index, "ns", []) == []
    assert index.versions("insight", "ns", []) == {}


def test_ids_that_are_not_uuids_round_trip(index: VectorIndex) -> None:
    names = ["q:7.b-1", str(uuid.uuid4()), "plain", "q:7.b-1:nbr"]
    index.write_queries([(query(i, supports=("ins_x.1",)), NEAR) for i in names])
    assert sorted(ids(index.search_queries(PROBE, "ns", 10))) == sorted(names)
    assert set(index.query_evidence("ns", names)) == set(names)
    index.write_insights([(insight("ins_x.1"), NEAR)])
    assert index.versions("insight", "ns", ["ins_x.1", "missing"]) == {"ins_x.1": 1}
    assert set(served(index, "ns", ["ins_x.1"])) == {"ins_x.1"}
    assert index.search_insights(PROBE, "ns", 1)[0][0] == "ins_x.1"


def test_count_counts_points_and_an_upsert_is_idempotent(index: VectorIndex) -> None:
    assert (index.count("query"), index.count("insight")) == (0, 0)
    index.write_queries([(query("a"), NEAR), (query("b"), MID), (query("a", "other"), NEAR)])
    index.write_queries([(query("a"), NEAR)])
    index.write_insights([(insight("i"), NEAR), (insight("j"), FAR)])
    assert (index.count("query"), index.count("insight")) == (3, 2)


def test_a_new_index_is_fresh(index: VectorIndex) -> None:
    assert index.fresh is True
    assert index.identity


# -- backend-specific promises --------------------------------------------------------------------
def test_reopening_an_edge_store_keeps_its_data(tmp_path: Path) -> None:
    first = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    first.write_queries([(query("q1", supports=("i",)), NEAR)])
    first.write_insights([(insight("i", version=2), NEAR)])
    first.close()
    again = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        assert again.fresh is False
        assert again.identity == first.identity
        [hit] = again.search_queries(PROBE, "ns", 5)
        assert (hit.id, hit.supports) == ("q1", ("i",)) and hit.score == pytest.approx(1.0, abs=1e-4)
        assert again.versions("insight", "ns", ["i"]) == {"i": 2}
        assert set(served(again, "ns", ["i"])) == {"i"}
    finally:
        again.close()


def test_a_reopened_edge_store_still_serves_through_inheritance(tmp_path: Path) -> None:
    first = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    first.write_insights([(insight("old", state="archived"), NEAR), (insight("plain"), NEAR)])
    first.write_insights([(insight("revision", inherits=("old",)), NEAR)])
    first.write_insights([(insight("gone", namespace="other", state="archived", inherits=("x",)), NEAR)])
    first.close()
    again = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        assert set(served(again, "ns", ["old", "plain"])) == {"revision", "plain"}
        again.write_insights([(insight("late", namespace="other", inherits=("y",)), NEAR)])
        assert set(served(again, "other", ["y", "x"])) == {"late"}
    finally:
        again.close()


def test_an_edge_store_of_another_layout_is_refused_with_what_to_do(tmp_path: Path) -> None:
    first = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    first.close()
    (tmp_path / "qdrant" / "LAYOUT").unlink()  # as a store written before the layout was recorded
    with pytest.raises(ConfigError, match="delete that directory"):
        EdgeIndex(tmp_path / "qdrant", "sparse", 0)


def test_edge_point_ids_are_64_bit_integers_whatever_the_node_id() -> None:
    u = uuid.uuid4()
    assert int_point_id(str(u)) == (u.int >> 64) ^ (u.int & ((1 << 64) - 1))
    ids = [int_point_id(str(uuid.uuid1())) for _ in range(1000)]  # time-based: alike low halves
    ids += [int_point_id(f"plain-{n}") for n in range(1000)]
    ids += [int_query_point_id(ns, "q") for ns in ("a", "b")]
    assert len(set(ids)) == len(ids) and all(0 <= i < 1 << 64 for i in ids)
    assert int_query_point_id("a", "q") == int_query_point_id("a", "q") != int_point_id("q")


def test_two_nodes_on_one_edge_point_id_fail_the_write_instead_of_overwriting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        monkeypatch.setattr(edge, "int_point_id", lambda node_id: 7)  # every id on one point
        index.write_insights([(insight("first"), NEAR)])
        with pytest.raises(StoreError, match="same point id"):
            index.write_insights([(insight("second"), NEAR)])
        assert set(served(index, "ns", ["first"])) == {"first"}
        index.write_insights([(insight("first", version=2), None)])  # the node itself still updates
        assert served(index, "ns", ["first"])["first"].version == 2
    finally:
        index.close()


def test_an_open_edge_store_refuses_a_second_opener(tmp_path: Path) -> None:
    holder = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        with pytest.raises(StoreLockedError, match="open in another process"):
            EdgeIndex(tmp_path / "qdrant", "sparse", 0)
        code = (
            "import sys, pathlib\nfrom evomem.adapters.qdrant.edge import EdgeIndex\n"
            "from evomem.errors import "
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


def test_what_persist_made_durable_outlives_a_killed_process(tmp_path: Path) -> None:
    """A namespace's shard keeps no write-ahead log: a process killed (SIGKILL) keeps what it wrote
    before ``persist``, which the projector calls before it moves its cursor; what it wrote after is
    replayed from the change feed, so the reopened store only has to be readable."""
    code = (
        "import os, signal, sys, pathlib\nfrom evomem.adapters.qdrant.edge import EdgeIndex\n"
        "from evomem.core.ports import QueryPoint\n"
        "index = EdgeIndex(pathlib.Path(sys.argv[1]), 'sparse', 0)\n"
        "def q(i): return (QueryPoint(i, 'ns', i, 'resolved', 1, ('x',), ()), {1: 1.0})\n"
        "index.write_queries([q('kept-1'), q('kept-2')])\nindex.persist()\n"
        "index.write_queries([q('after')])\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "qdrant")], capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    again = EdgeIndex(tmp_path / "qdrant", "sparse", 0)
    try:
        assert again.versions("query", "ns", ["kept-1", "kept-2"]) == {"kept-1": 1, "kept-2": 1}
        assert {"kept-1", "kept-2"} <= set(ids(again.search_queries(PROBE, "ns", 5)))
        again.write_queries([(query("after"), NEAR)])  # the replay
        assert again.count("query") == 3
    finally:
        again.close()


def test_a_namespace_directory_holding_another_namespace_is_refused(tmp_path: Path) -> None:
    """A promoted namespace's shard is found by the hash of its name; the NAMESPACE file inside must
    name it, or the store is not the one this process wrote."""
    first = EdgeIndex(tmp_path / "qdrant", "sparse", 0, promote_at=1)
    first.write_queries([(query("q", "a"), NEAR)])
    first.close()
    next((tmp_path / "qdrant" / "namespaces").glob("*/NAMESPACE")).write_text("b", encoding="utf-8")
    with pytest.raises(StoreError, match="holds the queries of namespace 'b', not of the namespace"):
        EdgeIndex(tmp_path / "qdrant", "sparse", 0)


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


@pytest.mark.parametrize("stale_view", [[], [3]], ids=["unseen", "older"])
def test_a_server_write_is_guarded_even_when_the_read_was_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale_view: list[int]
) -> None:
    """Several retrieval workers may project into one server: the version check is the server's too."""
    index = ClientIndex.connect(Settings(data_dir=tmp_path, qdrant_url=":memory:"), "sparse", 0)
    try:
        index.write_insights([(insight("i", version=3), NEAR)])
        real = index.client.retrieve

        def stale(collection: str, pids: Any, **kw: Any) -> Any:
            records = real(collection, pids, **kw)
            for r in records:  # what a projector that read before the other wrote would see
                r.payload = {**(r.payload or {}), "version": stale_view[0] - 2} if stale_view else r.payload
            return records if stale_view else []

        monkeypatch.setattr(index.client, "retrieve", stale)
        index.write_insights([(insight("i", state="archived", version=2), DISJOINT)])
        monkeypatch.undo()
        [c] = serving(index, "ns", ["i"])
        assert c.version == 3
        assert [h for h, _ in index.search_insights(PROBE, "ns", 5)] == ["i"]
    finally:
        index.close()


def test_reconnecting_to_a_server_keeps_it_and_refuses_other_vectors() -> None:
    """The same collections opened again are not fresh; an embedder of another kind is refused."""
    client = QdrantClient(location=":memory:")
    first = ClientIndex(client, "sparse", 0, identity="qdrant:test", where="test", local=True)
    first.write_queries([(query("q1"), NEAR)])
    again = ClientIndex(client, "sparse", 0, identity="qdrant:test", where="test", local=True)
    assert (first.fresh, again.fresh, again.count("query")) == (True, False, 1)
    with pytest.raises(ConfigError, match="other vectors"):
        ClientIndex(client, "dense", 4, identity="qdrant:test", where="test", local=True)
    client.close()
