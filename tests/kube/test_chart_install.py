"""`helm install` of the chart on a real API server, in both install modes."""

from __future__ import annotations

import pytest

from tests.kube.cluster import Release
from tests.support.controlplane import ControlPlane

CRD = "knowledgesources.kb.knowledgebase.dev"


def test_the_crd_is_established_and_explained(control_plane: ControlPlane, releases: dict[str, Release]) -> None:
    crd = control_plane.get("crd", CRD)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    explained = control_plane.explain("knowledgesource.spec.repository")
    assert "The git repository to read documents from." in explained
    assert "Credentials" in explained and "never go in the URL" in explained
    field = control_plane.explain("ks.spec.deletionPolicy")
    assert "Retain" in field and "leaves them" in field


def test_the_clusterwide_install_grants_by_clusterrole(
    control_plane: ControlPlane, releases: dict[str, Release]
) -> None:
    release = releases["clusterwide"]
    account = f"system:serviceaccount:{release.namespace}:{release.operator_account}"
    control_plane.get("serviceaccount", release.operator_account, "-n", release.namespace)
    binding = control_plane.get("clusterrolebinding", release.operator_account)
    assert {"kind": "ServiceAccount", "name": release.operator_account, "namespace": release.namespace} in binding[
        "subjects"
    ]
    # The real authorizer decides: the operator may patch sources anywhere and read no ConfigMaps.
    assert can(
        control_plane,
        account,
        "patch",
        "knowledgesources.kb.knowledgebase.dev",
        "--subresource=status",
        "-n",
        "anywhere",
    )
    assert can(control_plane, account, "get", "secrets", "-n", "anywhere")
    assert not can(control_plane, account, "get", "configmaps", "-n", "anywhere")
    assert not can(control_plane, account, "delete", "knowledgesources.kb.knowledgebase.dev", "-n", "anywhere")
    # Kubernetes auth mode: the search service may send TokenReviews and SubjectAccessReviews.
    search = f"system:serviceaccount:{release.namespace}:{release.search_account}"
    assert can(control_plane, search, "create", "tokenreviews.authentication.k8s.io")
    assert can(control_plane, search, "create", "subjectaccessreviews.authorization.k8s.io")
    assert not can(control_plane, search, "get", "secrets", "-n", release.namespace)


def test_the_namespaced_install_grants_only_its_namespaces(
    control_plane: ControlPlane, releases: dict[str, Release]
) -> None:
    release = releases["namespaced"]
    (watched,) = release.watch
    account = f"system:serviceaccount:{release.namespace}:{release.operator_account}"
    control_plane.get("role", release.operator_account, "-n", watched)
    control_plane.get("rolebinding", release.operator_account, "-n", watched)
    assert can(
        control_plane, account, "patch", "knowledgesources.kb.knowledgebase.dev", "--subresource=status", "-n", watched
    )
    assert can(control_plane, account, "get", "secrets", "-n", watched)
    assert not can(control_plane, account, "get", "secrets", "-n", "team-elsewhere")
    assert not can(control_plane, account, "list", "knowledgesources.kb.knowledgebase.dev", "-n", "team-elsewhere")
    # kopf's discovery: namespaces and CRDs, cluster-wide, read-only.
    assert can(control_plane, account, "watch", "namespaces")
    assert not can(control_plane, account, "delete", "namespaces")


@pytest.mark.parametrize("mode", ["clusterwide", "namespaced"])
def test_helm_sees_a_deployed_release(control_plane: ControlPlane, releases: dict[str, Release], mode: str) -> None:
    release = releases[mode]
    status = control_plane.get("secret", "-n", release.namespace, "-l", f"owner=helm,name={release.name}")
    (secret,) = status["items"]
    assert secret["metadata"]["labels"]["status"] == "deployed"


def can(plane: ControlPlane, user: str, verb: str, resource: str, *args: str) -> bool:
    """`kubectl auth can-i` as `user`, answered by the API server's RBAC authorizer."""
    done = plane.kubectl("auth", "can-i", verb, resource, f"--as={user}", *args, check=False)
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), done.stderr
    return answer == "yes"
