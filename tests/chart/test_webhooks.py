"""The operator's webhook receiver in the chart: off by default; when on, a port, a Service, and
optionally an Ingress or a Gateway API HTTPRoute, in both install modes."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.chart.helmchart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    OPERATOR,
    assert_schema_rejects,
    container,
    env_of,
    render,
    render_error,
    render_ok,
    run_helm,
)
from tests.chart.support import operator_settings

HOOKS = f"{OPERATOR}-webhooks"
ON = ("--set", "operator.webhooks.enabled=true")
MODES = {
    "clusterwide": (),
    "namespaced": ("--set", "operator.watchNamespaces={team-a,team-b}"),
}
INGRESS = (
    *ON,
    "--set",
    "operator.webhooks.ingress.enabled=true",
    "--set",
    "operator.webhooks.ingress.host=hooks.example.com",
)
ROUTE = (
    *ON,
    "--set", "operator.webhooks.httpRoute.enabled=true",
    "--set", "operator.webhooks.httpRoute.parentRefs[0].name=public",
    "--set", "operator.webhooks.httpRoute.parentRefs[0].namespace=gateways",
    "--set", "operator.webhooks.httpRoute.hostnames={hooks.example.com}",
)  # fmt: skip


def validate_strictly(manifests) -> None:
    for doc in manifests:
        if doc["kind"] == "HTTPRoute":  # a Gateway API CRD: no schema ships with the validator
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_receiver_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = render("default")
    assert HOOKS not in manifests.names("Service")
    assert not manifests.all("Ingress") and not manifests.all("HTTPRoute")
    operator = container(manifests, "Deployment", OPERATOR, "operator")
    assert "webhooks" not in {p["name"] for p in operator["ports"]}
    assert operator_settings(manifests, monkeypatch).webhook_port == 0


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("expose", ["service", "ingress", "httproute"])
def test_the_receiver_renders_and_validates_in_both_modes(
    mode: str, expose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"service": ON, "ingress": INGRESS, "httproute": ROUTE}[expose] + MODES[mode]
    lint = run_helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *args)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    manifests = render_ok(*args)
    validate_strictly(manifests)
    settings = operator_settings(manifests, monkeypatch)
    assert (settings.webhook_port, settings.webhook_burst, settings.webhook_rate_per_minute) == (9292, 10, 30)
    operator = container(manifests, "Deployment", OPERATOR, "operator")
    assert {p["name"]: p["containerPort"] for p in operator["ports"]}["webhooks"] == 9292
    service = manifests.one("Service", HOOKS)
    assert service["spec"]["ports"] == [{"name": "webhooks", "port": 80, "targetPort": "webhooks", "protocol": "TCP"}]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "operator"
    if expose == "ingress":
        (rule,) = manifests.one("Ingress", HOOKS)["spec"]["rules"]
        assert rule["host"] == "hooks.example.com"
        (path,) = rule["http"]["paths"]
        assert (path["path"], path["pathType"]) == ("/hook/", "Prefix")  # nothing else of the operator
        assert path["backend"]["service"] == {"name": HOOKS, "port": {"name": "webhooks"}}
    else:
        assert not manifests.all("Ingress")
    if expose == "httproute":
        route = manifests.one("HTTPRoute", HOOKS)
        assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
        assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gateways"}]
        assert route["spec"]["hostnames"] == ["hooks.example.com"]
        (rule,) = route["spec"]["rules"]
        assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/hook/"}, "method": "POST"}]
        assert rule["backendRefs"] == [{"name": HOOKS, "port": 80}]
    else:
        assert not manifests.all("HTTPRoute")


def test_the_network_policy_opens_the_receivers_port_only_when_it_runs() -> None:
    base = ("--set", "networkPolicy.enabled=true")
    closed = render_ok(*base).one("NetworkPolicy", OPERATOR)
    assert closed["spec"]["ingress"] == []
    opened = render_ok(*base, *ON).one("NetworkPolicy", OPERATOR)
    assert opened["spec"]["ingress"] == [{"ports": [{"port": "webhooks", "protocol": "TCP"}]}]
    narrowed = render_ok(
        *base, *ON, "--set", "networkPolicy.webhookFrom[0].namespaceSelector.matchLabels.name=ingress-nginx"
    ).one("NetworkPolicy", OPERATOR)
    (rule,) = narrowed["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"name": "ingress-nginx"}}}]
    validate_strictly(render_ok(*base, *ON))


def test_the_freshness_bound_and_partial_clones_reach_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = render_ok("--set", "operator.freshnessBoundSeconds=900", "--set", "operator.partialClone=true")
    settings = operator_settings(manifests, monkeypatch)
    assert settings.freshness_bound_seconds == 900 and settings.partial_clone is True
    assert operator_settings(render("default"), monkeypatch).partial_clone is False
    assert "KBOPERATOR_FRESHNESS_BOUND_SECONDS" not in env_of(
        container(render("default"), "Deployment", OPERATOR, "operator")
    )


def test_an_exposure_without_its_address_fails_with_a_clear_message() -> None:
    error = render_error(*ON, "--set", "operator.webhooks.ingress.enabled=true")
    assert "operator.webhooks.ingress.host is required" in error
    error = render_error(*ON, "--set", "operator.webhooks.httpRoute.enabled=true")
    assert "operator.webhooks.httpRoute.parentRefs is required" in error


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", "operator.webhooks.port=0"], "/operator/webhooks/port"),
        (["--set", "operator.webhooks.burst=0"], "/operator/webhooks/burst"),
        (["--set", "operator.webhooks.secret=x"], "/operator/webhooks"),
        (["--set", "operator.freshnessBoundSeconds=0"], "/operator/freshnessBoundSeconds"),
    ],
)
def test_the_schema_refuses_bad_receiver_values(args: list[str], where: str) -> None:
    assert_schema_rejects(args, where)
