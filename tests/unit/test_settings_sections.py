"""Settings in sections: every field belongs to one, the environment names stay as they were, and
a section is a read-only view of the same values the flat fields give."""

from __future__ import annotations

import pytest

from evomem.settings import SECTION_TITLES, SECTIONS, Settings, env_names, section_of


def test_every_section_has_a_title_and_a_field() -> None:
    assert set(SECTION_TITLES) == set(SECTIONS)
    used = {section_of(name) for name in Settings.model_fields}
    assert used == set(SECTIONS), f"sections without a field: {set(SECTIONS) - used}"


def test_environment_names_are_the_prefix_and_the_field_name() -> None:
    assert env_names("top_k") == ("EVOMEM_TOP_K",)
    assert env_names("lambda_") == ("EVOMEM_LAMBDA",)
    assert env_names("llm_api_key") == ("EVOMEM_LLM_API_KEY", "OPENAI_API_KEY")
    assert section_of("top_k") == "retrieval" and section_of("redis_url") == "store"
    with pytest.raises(KeyError):
        section_of("no_such_setting")


def test_a_section_view_reads_the_same_values_and_cannot_be_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOMEM_TOP_K", "7")
    monkeypatch.setenv("EVOMEM_LAMBDA", "0.25")
    settings = Settings()
    retrieval = settings.section("retrieval")
    assert retrieval["top_k"] == settings.top_k == 7
    assert retrieval["lambda_"] == settings.lambda_ == 0.25
    assert "redis_url" not in retrieval
    with pytest.raises(TypeError):
        retrieval["top_k"] = 1  # type: ignore[index]
    with pytest.raises(KeyError, match="no settings section"):
        settings.section("nowhere")
    views = [settings.section(s) for s in SECTIONS]
    assert sum(len(v) for v in views) == len(Settings.model_fields)
