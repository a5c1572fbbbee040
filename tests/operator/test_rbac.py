"""The RBAC check the emulator applies: the chart's rules for the operator, matched like the API server."""

from __future__ import annotations

import pytest

from tests.operator.kmock_support import OPERATOR_TOKEN, KubeApi, KubeEmulator
from tests.operator.rbac import ApiRequest, chart_rules

GROUP, PLURAL = "kb.knowledgebase.dev", "knowledgesources"


def request(
    verb: str,
    resource: str,
    namespace: str | None,
    *,
    group: str = GROUP,
    sub: str | None = None,
    name: str | None = None,
) -> ApiRequest:
    return ApiRequest(verb, group, resource, sub, namespace, name, path="/")


def test_namespaced_mode_grants_only_inside_the_watched_namespaces() -> None:
    rules = chart_rules("namespaced", ("team-a", "team-b"))
    for namespace in ("team-a", "team-b"):
        assert rules.allows(request("watch", PLURAL, namespace))
        assert rules.allows(request("patch", PLURAL, namespace, sub="status", name="x"))
        assert rules.allows(request("get", "secrets", namespace, group="", name="creds"))
        assert rules.allows(request("create", "events", namespace, group=""))
    assert not rules.allows(request("get", "secrets", "elsewhere", group="", name="creds"))
    assert not rules.allows(request("watch", PLURAL, None))  # no cluster-wide watch
    # The optional discovery ClusterRole: namespaces and CRDs, nothing else cluster-wide.
    assert rules.allows(request("list", "namespaces", None, group=""))
    assert rules.allows(request("watch", "customresourcedefinitions", None, group="apiextensions.k8s.io"))


def test_clusterwide_mode_grants_everywhere_but_never_more_than_needed() -> None:
    rules = chart_rules("clusterwide")
    assert rules.allows(request("watch", PLURAL, None))
    assert rules.allows(request("get", "secrets", "anywhere", group="", name="creds"))
    assert rules.allows(request("list", "customresourcedefinitions", None, group="apiextensions.k8s.io"))
    for verb in ("list", "watch", "delete", "update", "create"):
        assert not rules.allows(request(verb, "secrets", "anywhere", group=""))
    assert not rules.allows(request("update", PLURAL, "kb", name="x"))
    assert not rules.allows(request("delete", PLURAL, "kb", name="x"))
    assert not rules.allows(request("update", PLURAL, "kb", sub="status", name="x"))  # patch only
    assert not rules.allows(request("get", "configmaps", "kb", group=""))


def test_discovery_is_open_to_every_authenticated_user() -> None:
    rules = chart_rules("namespaced", ("kb",))
    for path in ("/api", "/api/v1", "/apis", f"/apis/{GROUP}/v1alpha1", "/version"):
        assert rules.allows(ApiRequest("get", None, None, None, None, None, path))
    assert not rules.allows(ApiRequest("get", None, None, None, None, None, "/metrics"))


def test_a_grant_removed_from_the_rules_is_refused() -> None:
    rules = chart_rules("namespaced", ("kb",)).without("", "secrets", "get")
    assert not rules.allows(request("get", "secrets", "kb", group="", name="creds"))
    assert rules.allows(request("create", "events", "kb", group=""))


@pytest.mark.parametrize("mode", ["namespaced", "clusterwide"])
async def test_the_emulator_refuses_the_operator_what_the_rules_do_not_allow(kube: KubeEmulator, mode: str) -> None:
    kube.rules = chart_rules(mode, ("kb",))
    await KubeApi(kube, "kb").create_secret("creds", {"token": "t"})
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    allowed = await kube.get("/api/v1/namespaces/kb/secrets/creds", headers=headers)
    refused = await kube.get("/api/v1/namespaces/kb/secrets", headers=headers)  # a list of Secrets
    assert (allowed.status, refused.status) == (200, 403)
    assert (await refused.json())["reason"] == "Forbidden"
    assert [str(r) for r in kube.denied] == ["list secrets in namespace kb (/api/v1/namespaces/kb/secrets)"]
    assert [r.verb for r in kube.operator_requests] == ["get", "list"]  # the test's own requests are not the operator's
