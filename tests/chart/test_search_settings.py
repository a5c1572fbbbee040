"""The search container's environment, as the chart renders it, is one the service accepts at start.

The service refuses a non-loopback address without a write token, and tokens it could never
match; the chart listens on 0.0.0.0, so every scenario must hand it a usable token.
"""

from __future__ import annotations

import base64

import pytest

from kbsearch.settings import Settings
from tests.chart.helmchart import SCENARIOS, SEARCH, assert_schema_rejects, container, env_of, render, render_ok

# A Secret the chart does not render (an existing one) stands in with a token of the generated kind.
EXTERNAL_VALUE = "A1b2C3d4" * 6

# A tokens file in the format of the README, standing in for the user's mounted Secret.
TOKENS_FILE = """tokens:
  - name: team-a-agent
    token: "Team-A-agent-token-0123456789"
    sources: ["team-a/*"]
"""


def resolved_env(scenario: str) -> dict[str, str]:
    manifests = render(scenario)
    secrets = {s["metadata"]["name"]: s.get("data", {}) for s in manifests.all("Secret")}
    env = {}
    for name, var in env_of(container(manifests, "Deployment", SEARCH, "search")).items():
        if "value" in var:
            env[name] = var["value"]
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        data = secrets.get(ref["name"])
        env[name] = base64.b64decode(data[ref["key"]]).decode() if data is not None else EXTERNAL_VALUE
    return env


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_chart_sets_only_variables_the_service_reads(scenario):
    known = {f"SEARCHSVC_{name.upper()}" for name in Settings.model_fields}
    unknown = {name for name in resolved_env(scenario) if name.startswith("SEARCHSVC_")} - known
    assert not unknown, f"the chart sets variables the search service does not read: {sorted(unknown)}"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_chart_gives_the_search_service_settings_it_starts_with(scenario, monkeypatch, tmp_path):
    env = resolved_env(scenario)
    assert env["SEARCHSVC_HOST"] == "0.0.0.0" and env["SEARCHSVC_API_TOKEN"]
    if "SEARCHSVC_TOKENS_FILE" in env:
        (tmp_path / "tokens.yaml").write_text(TOKENS_FILE)
        env["SEARCHSVC_TOKENS_FILE"] = str(tmp_path / "tokens.yaml")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.api_token is not None and not settings.allow_unauthenticated_writes


def test_the_query_log_values_reach_the_service() -> None:
    default = env_of(container(render("default"), "Deployment", SEARCH, "search"))
    assert {k: default[k]["value"] for k in default if k.startswith("SEARCHSVC_QUERY_LOG")} == {
        "SEARCHSVC_QUERY_LOG": "on",
        "SEARCHSVC_QUERY_LOG_RETENTION_DAYS": "30",
        "SEARCHSVC_QUERY_LOG_MAX_ENTRIES": "200000",
    }
    off = render_ok(
        "--set", "search.queryLog.enabled=false", "--set", "search.queryLog.retentionDays=7",
        "--set", "search.queryLog.maxEntries=1000000",
    )  # fmt: skip
    env = env_of(container(off, "Deployment", SEARCH, "search"))
    assert env["SEARCHSVC_QUERY_LOG"]["value"] == "off"
    assert env["SEARCHSVC_QUERY_LOG_RETENTION_DAYS"]["value"] == "7"
    assert env["SEARCHSVC_QUERY_LOG_MAX_ENTRIES"]["value"] == "1000000"  # not 1e+06


def test_the_schema_refuses_a_query_log_that_keeps_nothing() -> None:
    assert_schema_rejects(["--set", "search.queryLog.retentionDays=0"], "/search/queryLog/retentionDays")
