"""Scoped access with real ServiceAccount tokens: the search service in Kubernetes auth mode asks
the real API server (TokenReview, SubjectAccessReview) with the chart's search ServiceAccount."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.cluster import AUDIENCE, Release, SearchService, eventually
from tests.support.controlplane import ControlPlane

SOURCES = {"team-a": "team-a/docs", "team-b": "team-b/docs"}
RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: knowledge-reader, namespace: {ns}}}
rules:
  - apiGroups: [kb.knowledgebase.dev]
    resources: [knowledgesources]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: agent-reads-knowledge, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: knowledge-reader}}
subjects:
  - {{kind: ServiceAccount, name: agent, namespace: {ns}}}
"""


@pytest.fixture(scope="module")
def kube_search(
    control_plane: ControlPlane, releases: dict[str, Release], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SearchService]:
    """The service as the chart runs it in auth.mode=kubernetes, on its own ServiceAccount's token."""
    release = releases["clusterwide"]
    root = tmp_path_factory.mktemp("kube-search")
    kubeconfig = control_plane.token_kubeconfig(
        root / "search.kubeconfig", control_plane.token(release.search_account, release.namespace)
    )
    service = SearchService(
        root,
        {
            "SEARCHSVC_AUTH_MODE": "kubernetes",
            "SEARCHSVC_KUBERNETES_AUDIENCES": AUDIENCE,
            "SEARCHSVC_AUTH_CACHE_SECONDS": "1",
            "KUBECONFIG": str(kubeconfig),
        },
    )
    try:
        for namespace, source in SOURCES.items():
            body = {
                "uri": f"https://git.example/{namespace}/guide.md",
                "content": f"# Guide of {namespace}\n\nHow {namespace} deploys.\n",
                "metadata": {"sourceIdentifier": source, "path": "guide.md"},
            }
            response = service.process.client.put(
                "/api/v1/documents", json=body, headers={"Authorization": f"Bearer {service.api_token}"}
            )
            assert response.status_code == 200, response.text
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def agents(
    control_plane: ControlPlane, releases: dict[str, Release], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """A ServiceAccount `agent` in each team namespace, allowed to get knowledgesources there, and
    its projected-style token for the service's audience."""
    root = tmp_path_factory.mktemp("agents")
    tokens = {}
    for namespace in SOURCES:
        if control_plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            control_plane.kubectl("create", "namespace", namespace)
        control_plane.kubectl("create", "serviceaccount", "agent", "-n", namespace)
        path = Path(root / f"{namespace}.yaml")
        path.write_text(RBAC.format(ns=namespace))
        control_plane.kubectl("apply", "-f", str(path))
        tokens[namespace] = control_plane.token("agent", namespace, audience=AUDIENCE)
    return tokens


def visible(service: SearchService, token: str) -> list[str]:
    response = service.get("/api/v1/sources", token)
    assert response.status_code == 200, response.text
    return sorted(s["sourceIdentifier"] for s in response.json()["sources"])


def test_each_agent_reads_only_its_own_namespace(kube_search: SearchService, agents: dict[str, str]) -> None:
    assert visible(kube_search, agents["team-a"]) == ["team-a/docs"]
    assert visible(kube_search, agents["team-b"]) == ["team-b/docs"]
    results = kube_search.get("/api/v1/search", agents["team-a"], params={"q": "deploys"}).json()["results"]
    assert results and all("team-b" not in str(hit) for hit in results)
    listing = kube_search.get("/api/v1/documents", agents["team-b"]).json()["documents"]
    assert [d["uri"] for d in listing] == ["https://git.example/team-b/guide.md"]


def test_a_token_for_another_audience_is_refused(
    control_plane: ControlPlane, kube_search: SearchService, agents: dict[str, str]
) -> None:
    default_audience = control_plane.token("agent", "team-a")  # the API server's own audience
    assert kube_search.get("/api/v1/sources", default_audience).status_code == 401
    assert kube_search.get("/api/v1/sources", "not-a-token").status_code == 401


def test_removing_the_rolebinding_removes_access_within_the_cache_time(
    control_plane: ControlPlane, kube_search: SearchService, agents: dict[str, str]
) -> None:
    assert visible(kube_search, agents["team-a"]) == ["team-a/docs"]
    control_plane.kubectl("delete", "rolebinding", "agent-reads-knowledge", "-n", "team-a")
    # The cache lives 1 s (SEARCHSVC_AUTH_CACHE_SECONDS); the wait bound is generous for a busy machine.
    eventually(
        lambda: visible(kube_search, agents["team-a"]) == [], what="the revoked grant to stop working", timeout_s=30
    )
    assert visible(kube_search, agents["team-b"]) == ["team-b/docs"]
