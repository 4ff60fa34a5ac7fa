"""Settings in sections: every field belongs to one, the environment names stay as they were, and
a section is a read-only view of the same values the flat fields give."""

from __future__ import annotations

import pytest

from evomem.settings import (
    SECTION_TITLES,
    SECTIONS,
    NamespaceOverrides,
    Settings,
    effective_values,
    env_names,
    section_of,
)


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


def test_effective_values_say_where_each_value_came_from() -> None:
    environ = {"EVOMEM_HOPS": "2", "openai_api_key": "sk-secret"}
    settings = Settings.model_validate({"hops": 2, "llm_api_key": "sk-secret", "budget": 9})
    overrides = NamespaceOverrides.model_validate({"lambda": 3.0})
    values = {v.name: v for v in effective_values(settings, environ, overrides, "fever")}
    assert list(values) == [n for s in SECTIONS for n in Settings.model_fields if section_of(n) == s]
    assert values["hops"].source == "environment (EVOMEM_HOPS)" and values["hops"].value == 2
    assert values["llm_api_key"].source == "environment (openai_api_key)"
    assert values["llm_api_key"].value == "********"
    assert values["lambda_"].source == "namespace fever" and values["lambda_"].value == 3.0
    assert values["lambda_"].env == "EVOMEM_LAMBDA"
    assert values["budget"].source == "code" and values["top_k"].source == "default"
