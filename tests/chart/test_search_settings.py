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

# A tokens file in the format of docs/user/api.md, standing in for the user's mounted Secret.
TOKENS_FILE = """tokens:
  - name: team-a-agent
    token: "Team-A-agent-token-0123456789"
    sources: ["team-a/*"]
"""


def resolved_env(scenario: str) -> dict[str, str]:
    return resolved_env_of(render(scenario))


def resolved_env_of(manifests) -> dict[str, str]:
    secrets = {s["metadata"]["name"]: s.get("data", {}) for s in manifests.all("Secret")}
    env = {}
    search = container(manifests, "Deployment", SEARCH, "search")
    for name, var in env_of(search).items():
        if "value" in var:
            env[name] = var["value"]
            continue
        if "resourceFieldRef" in var["valueFrom"]:  # as the kubelet resolves it, in the divisor's unit
            field = var["valueFrom"]["resourceFieldRef"]
            assert (field["resource"], field["divisor"]) == ("limits.memory", "1Mi")
            env[name] = str(mebibytes(search["resources"]["limits"]["memory"]))
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        data = secrets.get(ref["name"])
        env[name] = base64.b64decode(data[ref["key"]]).decode() if data is not None else EXTERNAL_VALUE
    return env


def mebibytes(quantity: str) -> int:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
    unit = quantity[-2:]
    return int(float(quantity[:-2]) * units[unit]) if unit in units else int(quantity) // 1_048_576


def test_the_body_budget_follows_the_containers_memory_limit():
    env = resolved_env("default")
    assert env["SEARCHSVC_MEMORY_LIMIT_MB"] == "3072"  # search.resources.limits.memory, 3Gi
    assert (env["SEARCHSVC_BODY_BYTES_IN_FLIGHT"], env["SEARCHSVC_BODY_BYTES_IN_FLIGHT_PER_CALLER"]) == ("0", "0")
    http = Settings(memory_limit_mb=int(env["SEARCHSVC_MEMORY_LIMIT_MB"])).http
    assert http.body_budget(http.memory_limit_mb * 1_048_576) == (24 * 1_048_576, 8 * 1_048_576)
    set_by_hand = resolved_env_of(render_ok("--set", "search.bodyBudget.bytesInFlight=67108864"))
    assert set_by_hand["SEARCHSVC_BODY_BYTES_IN_FLIGHT"] == "67108864"
    assert_schema_rejects(["--set", "search.bodyBudget.bytesInFlight=-1"], "/search/bodyBudget/bytesInFlight")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_chart_sets_only_variables_the_service_reads(scenario):
    known = {f"SEARCHSVC_{name.upper()}" for name in Settings.variables()}
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
    assert settings.auth.api_token is not None and not settings.auth.allow_unauthenticated_writes


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


def test_the_fusion_and_proxy_values_reach_the_service(monkeypatch) -> None:
    names = (
        "FUSION",
        "RRF_K",
        "FUSION_DENSE_WEIGHT",
        "FUSION_KEYWORD_WEIGHT",
        "FUSION_FULL_SCORES",
        "SEARCH_CANDIDATES",
    )
    default = resolved_env("default")
    for name, value in default.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    defaults = {name: Settings.variables()[name].default for name in ("fusion", "rrf_k", "search_candidates")}
    assert (settings.search.fusion, settings.search.rrf_k, settings.search.search_candidates) == tuple(
        defaults.values()
    )
    assert settings.search.fusion_full_scores is True and settings.http.trusted_proxies == "127.0.0.1"
    assert all(f"SEARCHSVC_{n}" in default for n in names)

    tuned = render_ok(
        "--set", "search.fusion.method=rrf", "--set", "search.fusion.rrfK=5",
        "--set-json", "search.fusion.denseWeight=1.5", "--set", "search.fusion.keywordWeight=0",
        "--set", "search.fusion.fullScores=false", "--set", "search.fusion.candidates=200",
        "--set", "search.trustedProxies=10.0.0.7\\,10.0.0.8",
    )  # fmt: skip
    env = env_of(container(tuned, "Deployment", SEARCH, "search"))
    assert {n: env[f"SEARCHSVC_{n}"]["value"] for n in names} == {
        "FUSION": "rrf",
        "RRF_K": "5",
        "FUSION_DENSE_WEIGHT": "1.5",
        "FUSION_KEYWORD_WEIGHT": "0",
        "FUSION_FULL_SCORES": "false",
        "SEARCH_CANDIDATES": "200",
    }
    assert env["SEARCHSVC_TRUSTED_PROXIES"]["value"] == "10.0.0.7,10.0.0.8"
    for n in names:
        monkeypatch.setenv(f"SEARCHSVC_{n}", env[f"SEARCHSVC_{n}"]["value"])
    search = Settings().search
    assert (search.fusion, search.rrf_k, search.fusion_dense_weight, search.fusion_keyword_weight) == (
        "rrf", 5, 1.5, 0.0,
    )  # fmt: skip
    assert search.fusion_full_scores is False and search.search_candidates == 200


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", "search.fusion.method=max"], "/search/fusion/method"),
        (["--set", "search.fusion.candidates=0"], "/search/fusion/candidates"),
        (["--set", "search.fusion.denseWeight=-1"], "/search/fusion/denseWeight"),
        (["--set", "search.fusion.denseWeight=0", "--set", "search.fusion.keywordWeight=0"], "/search/fusion"),
        (["--set", "search.trustedProxies="], "/search/trustedProxies"),
    ],
)
def test_the_schema_refuses_fusion_values_the_service_would_refuse(args: list[str], where: str) -> None:
    assert_schema_rejects(args, where)


def test_the_per_caller_search_bound_reaches_the_service() -> None:
    default = env_of(container(render("default"), "Deployment", SEARCH, "search"))
    assert default["SEARCHSVC_MAX_SEARCHES_PER_CALLER"]["value"] == "32"
    raised = env_of(container(render_ok("--set", "search.maxSearchesPerCaller=100"), "Deployment", SEARCH, "search"))
    assert raised["SEARCHSVC_MAX_SEARCHES_PER_CALLER"]["value"] == "100"
    assert_schema_rejects(["--set", "search.maxSearchesPerCaller=0"], "/search/maxSearchesPerCaller")
