"""Settings in sections, one per collaborator, with the flat SEARCHSVC_* names and keyword arguments."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from kbsearch.settings import AuthSettings, Settings, StoreSettings, describe


@pytest.fixture(autouse=True)
def no_service_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SEARCHSVC_"):
            monkeypatch.delenv(name)


def test_every_variable_has_one_section_and_no_section_shadows_a_variable() -> None:
    owners: dict[str, list[str]] = {}
    for section, kind in Settings.sections().items():
        for name in kind.model_fields:
            owners.setdefault(name, []).append(section)
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    assert set(Settings.sections()).isdisjoint(owners)  # SEARCHSVC_STORE is a setting, not a section
    assert set(Settings.variables()) == set(owners)


def test_flat_variables_reach_their_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCHSVC_PORT", "9001")
    monkeypatch.setenv("SEARCHSVC_STORE", "qdrant")
    monkeypatch.setenv("SEARCHSVC_QDRANT_URL", "http://qdrant:6333")
    monkeypatch.setenv("SEARCHSVC_RRF_K", "7")
    settings = Settings()
    assert (settings.http.port, settings.storage.store, settings.storage.qdrant_url) == (
        9001,
        "qdrant",
        "http://qdrant:6333",
    )
    assert settings.search.rrf_k == 7
    assert StoreSettings().qdrant_url == "http://qdrant:6333"  # a section alone reads its own variables


def test_keyword_arguments_stay_flat_and_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCHSVC_RRF_K", "7")
    monkeypatch.setenv("SEARCHSVC_COLLECTION", "from-env")
    settings = Settings(rrf_k=3, api_token="a-write-token")
    assert settings.search.rrf_k == 3 and settings.storage.collection == "from-env"
    assert settings.auth.api_token is not None and settings.auth.api_token.get_secret_value() == "a-write-token"
    # A section given whole is kept; a flat field beside it lands in it.
    given = Settings(auth=AuthSettings(api_token="w", read_token="r"), api_token="w2")
    assert given.auth.read_token is not None and given.auth.read_token.get_secret_value() == "r"
    assert given.auth.api_token is not None and given.auth.api_token.get_secret_value() == "w2"


def test_errors_name_the_flat_variable_and_never_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCHSVC_PORT", "eighty")
    monkeypatch.setenv("SEARCHSVC_API_TOKEN", "s3cret-with-newline\n")
    with pytest.raises(ValidationError) as caught:
        Settings()
    message = describe(caught.value)
    assert "SEARCHSVC_PORT:" in message and "SEARCHSVC_API_TOKEN:" in message
    assert "s3cret" not in message and "eighty" not in message and "HTTP" not in message


def test_a_section_judges_itself_and_settings_judge_across_sections() -> None:
    with pytest.raises(ValidationError) as alone:
        Settings(store="qdrant")
    assert describe(alone.value) == "  SEARCHSVC_QDRANT_URL is required when SEARCHSVC_STORE=qdrant"
    with pytest.raises(ValidationError) as across:
        Settings(rerank="llm")
    assert "SEARCHSVC_RERANK=llm needs SEARCHSVC_LLM_MODEL" in describe(across.value)
    assert Settings(embedder="openai").chunk_range == (1000, 2000)  # chunk sizes follow the embedder
