"""The chart's ask settings: a chat model wired from values and an existing Secret, or none (extractive)."""

from __future__ import annotations

import pytest

from tests.chart.helmchart import SEARCH, assert_schema_rejects, container, env_of, render, render_error, render_ok


def search_env(manifests) -> dict[str, dict]:
    return env_of(container(manifests, "Deployment", SEARCH, "search"))


def test_by_default_ask_is_extractive_and_no_llm_variable_is_set():
    env = search_env(render("default"))
    assert not [name for name in env if name.startswith("SEARCHSVC_LLM_")]
    assert env["SEARCHSVC_ASK_TIMEOUT_S"]["value"] == "120"


def test_a_chat_model_is_wired_with_its_key_from_an_existing_secret():
    env = search_env(render("external-openai"))
    assert env["SEARCHSVC_LLM_MODEL"]["value"] == "gpt-4.1-mini"
    assert env["SEARCHSVC_LLM_BASE_URL"]["value"] == "https://llm-gateway.example.com/v1"
    assert env["SEARCHSVC_LLM_API_KEY"] == {
        "name": "SEARCHSVC_LLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "openai-credentials", "key": "OPENAI_API_KEY"}},
    }
    assert env["SEARCHSVC_LLM_TIMEOUT_S"]["value"] == "20"
    assert env["SEARCHSVC_LLM_MAX_RETRIES"]["value"] == "2"
    assert env["SEARCHSVC_ASK_TIMEOUT_S"]["value"] == "90"


def test_a_keyless_server_needs_no_secret():
    env = search_env(render_ok("--set", "llm.model=llama3", "--set", "llm.baseUrl=http://ollama.ai.svc:11434/v1"))
    assert env["SEARCHSVC_LLM_MODEL"]["value"] == "llama3"
    assert "SEARCHSVC_LLM_API_KEY" not in env


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "llm.model=gpt-4.1-mini"], "llm.model on OpenAI's own endpoint needs llm.existingSecret"),
        (["--set", "llm.baseUrl=http://ollama:11434/v1"], "llm.baseUrl or llm.existingSecret is set but llm.model"),
    ],
)
def test_incomplete_llm_settings_fail_with_a_clear_message(args, message):
    assert message in render_error(*args)


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", "llm.timeoutSeconds=0"], "/llm/timeoutSeconds"),
        (["--set", "llm.maxRetries=11"], "/llm/maxRetries"),
        (["--set", "llm.baseUrl=ftp://x"], "/llm/baseUrl"),
        (["--set", "llm.existingSecret=Not_A_Name"], "/llm/existingSecret"),
        (["--set", "llm.temperature=1"], "temperature"),
    ],
)
def test_schema_rejects_bad_llm_values(args, where):
    assert_schema_rejects(args, where)
