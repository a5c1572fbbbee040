"""What the chart tells the operator, read back by the operator's own settings class."""

from __future__ import annotations

import json
import posixpath

import pytest

from kboperator.__main__ import liveness_endpoint
from kboperator.errors import InvalidSpecError
from tests.chart.helmchart import NAMESPACE, OPERATOR, SEARCH, container, render, render_error, render_ok
from tests.chart.support import operator_settings

KNOWN_HOSTS = "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def test_the_liveness_probe_calls_the_port_the_operator_listens_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for args, port in (((), 8080), (("--set", "operator.healthPort=8181"), 8181)):
        manifests = render_ok(*args)
        c = container(manifests, "Deployment", OPERATOR, "operator")
        probe_port = c["livenessProbe"]["httpGet"]["port"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        listens = liveness_endpoint(operator_settings(manifests, monkeypatch).health_port)
        assert ports[probe_port] == port and listens == f"http://0.0.0.0:{port}/healthz"


def test_only_the_charts_own_search_service_is_allowed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = render("default")
    settings = operator_settings(manifests, monkeypatch)
    own = f"http://{SEARCH}.{NAMESPACE}.svc:8000"
    assert settings.search_url == own and settings.allowed_search_urls == []
    settings.service_policy.target(own)
    with pytest.raises(InvalidSpecError):
        settings.service_policy.target("http://kb-search.elsewhere.svc:8000")


def test_the_allow_list_reaches_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = render_ok(
        "--set", "operator.allowedSearchURLs={https://search.team-a.example/kb,http://b.example:9000}"
    )
    settings = operator_settings(manifests, monkeypatch)
    assert settings.allowed_search_urls == ["https://search.team-a.example/kb", "http://b.example:9000"]
    settings.service_policy.target("https://search.team-a.example/kb/v1")
    with pytest.raises(InvalidSpecError):
        settings.service_policy.target("https://search.team-a.example.evil/kb")


@pytest.mark.parametrize(
    "url", ["https://a.example@evil.example", "https://a.example/kb?x", "a.example", "https://a,b"]
)
def test_the_schema_refuses_allow_list_tricks(url: str) -> None:
    error = render_error("--set-json", f"operator.allowedSearchURLs={json.dumps([url])}")
    assert "/operator/allowedSearchURLs/0" in error


def test_known_hosts_come_from_a_read_only_config_map(monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = render_ok("--set-string", f"operator.ssh.knownHosts={KNOWN_HOSTS}")
    settings = operator_settings(manifests, monkeypatch)
    assert settings.ssh_trust_on_first_use is False  # an unknown host is refused
    path = str(settings.ssh_known_hosts_file)
    deployment = manifests.one("Deployment", OPERATOR)["spec"]["template"]["spec"]
    (mount,) = [m for m in deployment["containers"][0]["volumeMounts"] if m["mountPath"] == posixpath.dirname(path)]
    assert mount["readOnly"] is True and "subPath" not in mount  # a subPath would never see updates
    (volume,) = [v for v in deployment["volumes"] if v["name"] == mount["name"]]
    config_map = manifests.one("ConfigMap", volume["configMap"]["name"])
    assert config_map["data"][posixpath.basename(path)] == KNOWN_HOSTS
    # Pins made on first use would live in the cache, an emptyDir lost on restart: off unless asked.
    tofu = render_ok("--set", "operator.ssh.trustOnFirstUse=true")
    assert operator_settings(tofu, monkeypatch).ssh_trust_on_first_use is True


def test_local_repositories_need_a_root(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "operator.allowLocalRepositories=true needs operator.localRepositoriesRoot" in render_error(
        "--set", "operator.allowLocalRepositories=true"
    )
    manifests = render_ok(
        "--set", "operator.allowLocalRepositories=true", "--set", "operator.localRepositoriesRoot=/srv/git"
    )
    settings = operator_settings(manifests, monkeypatch)
    assert settings.allow_local_repositories and str(settings.local_repositories_root) == "/srv/git"
    assert not settings.local_repositories_root.is_relative_to(settings.cache_dir)


def test_the_drift_check_interval_reaches_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    assert operator_settings(render("default"), monkeypatch).drift_check_interval_seconds == 300  # its own default
    tuned = operator_settings(render_ok("--set", "operator.driftCheckIntervalSeconds=0"), monkeypatch)
    assert tuned.drift_check_interval_seconds == 0  # off
    assert "/operator/driftCheckIntervalSeconds" in render_error("--set", "operator.driftCheckIntervalSeconds=-1")
