"""Scoped access with real ServiceAccount tokens: the search service in Kubernetes auth mode asks
the real API server (TokenReview, SubjectAccessReview) with the chart's search ServiceAccount.

The same tokens are judged alike on the three faces an agent or a person uses: REST, MCP (the SDK's
streamable-HTTP client) and the console (its sign-in form and pages, over HTTP)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.kube.cluster import AUDIENCE, Release, SearchService, eventually
from tests.support.console import sign_in
from tests.support.controlplane import ControlPlane
from tests.support.mcpclient import ACCEPT, everything, mcp_client, rpc, text_of

SOURCES = {"team-a": "team-a/docs", "team-b": "team-b/docs"}
OTHER = {"team-a": "team-b", "team-b": "team-a"}
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
                "uri": guide(namespace),
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


def guide(namespace: str) -> str:
    """The one document each team namespace's source holds."""
    return f"https://git.example/{namespace}/guide.md"


def caller_name(namespace: str) -> str:
    """The identity TokenReview gives the agent's token."""
    return f"system:serviceaccount:{namespace}:agent"


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
    assert [d["uri"] for d in listing] == [guide("team-b")]


@pytest.mark.parametrize("namespace", SOURCES)
async def test_mcp_gives_each_agent_only_its_namespace(
    kube_search: SearchService, agents: dict[str, str], namespace: str
) -> None:
    other = OTHER[namespace]
    async with mcp_client(kube_search.url, agents[namespace]) as client:
        sources = await client.call_tool("list_sources", {})
        assert [s["sourceIdentifier"] for s in sources.structured_content["sources"]] == [SOURCES[namespace]]
        found = await client.call_tool("search_knowledge", {"query": "guide deploys", "limit": 100})
        assert not found.is_error, text_of(found)
        assert {hit["uri"] for hit in found.structured_content["results"]} == {guide(namespace)}
        assert other not in everything(found)
        own = await client.call_tool("fetch_document", {"uri": guide(namespace)})
        assert not own.is_error and f"How {namespace} deploys" in own.structured_content["text"]
        # Out of scope reads as absent: the other team's document is not even confirmed to exist.
        for tool, arguments in [
            ("fetch_document", {"uri": guide(other)}),
            ("get_chunk_context", {"uri": guide(other), "chunk_index": 0}),
        ]:
            theirs = await client.call_tool(tool, arguments)
            assert theirs.is_error and "no document" in text_of(theirs), text_of(theirs)
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert "ingest_document" not in tools  # get/list on knowledgesources is no write grant


@pytest.mark.parametrize("namespace", SOURCES)
def test_the_console_gives_each_agent_only_its_namespace(
    kube_search: SearchService, agents: dict[str, str], namespace: str
) -> None:
    other = OTHER[namespace]
    with httpx.Client(base_url=kube_search.url, timeout=60) as browser:
        signed_in = sign_in(browser, agents[namespace])
        assert signed_in.status_code == 303, signed_in.text
        pages = {
            path: browser.get(path)
            for path in ("/ui/?q=guide+deploys", "/ui/documents", "/ui/sources", f"/ui/document?uri={guide(namespace)}")
        }
        for path, page in pages.items():
            assert page.status_code == 200, (path, page.text)
            assert caller_name(namespace) in page.text and SOURCES[namespace] in page.text, path
            assert other not in page.text, path
        assert f"Guide of {namespace}" in pages["/ui/?q=guide+deploys"].text  # the hit's title
        assert guide(namespace) in pages["/ui/documents"].text
        assert f"How {namespace} deploys" in pages[f"/ui/document?uri={guide(namespace)}"].text
        theirs = browser.get("/ui/document", params={"uri": guide(other)})
        assert theirs.status_code == 404 and f"How {other} deploys" not in theirs.text


def test_a_token_for_another_audience_is_refused(
    control_plane: ControlPlane, kube_search: SearchService, agents: dict[str, str]
) -> None:
    default_audience = control_plane.token("agent", "team-a")  # the API server's own audience
    assert kube_search.get("/api/v1/sources", default_audience).status_code == 401
    assert kube_search.get("/api/v1/sources", "not-a-token").status_code == 401
    mcp = httpx.post(
        f"{kube_search.url}/mcp",
        json=rpc("tools/list"),
        headers={"accept": ACCEPT, "authorization": f"Bearer {default_audience}"},
        timeout=60,
    )
    assert mcp.status_code == 401 and mcp.headers["www-authenticate"].startswith("Bearer"), mcp.text
    with httpx.Client(base_url=kube_search.url, timeout=60) as browser:
        refused = sign_in(browser, default_audience)
        assert refused.status_code == 401 and "That token was not accepted." in refused.text
        assert "kb_console_session" not in browser.cookies
        assert browser.get("/ui/sources").status_code == 303  # back to the sign-in form


def mcp_reads(service: SearchService, token: str) -> tuple[list[str], list[str]]:
    """(list_sources, search_knowledge's uris) over MCP, from a synchronous test."""

    async def read() -> tuple[list[str], list[str]]:
        async with mcp_client(service.url, token) as client:
            listed = await client.call_tool("list_sources", {})
            found = await client.call_tool("search_knowledge", {"query": "guide deploys", "limit": 100})
        sources = [s["sourceIdentifier"] for s in listed.structured_content["sources"]]
        return sources, [hit["uri"] for hit in found.structured_content["results"]]

    return asyncio.run(read())


def test_removing_the_rolebinding_removes_access_within_the_cache_time(
    control_plane: ControlPlane, kube_search: SearchService, agents: dict[str, str]
) -> None:
    assert visible(kube_search, agents["team-a"]) == ["team-a/docs"]
    with httpx.Client(base_url=kube_search.url, timeout=60) as browser:
        assert sign_in(browser, agents["team-a"]).status_code == 303  # a console session from before
        assert "team-a/docs" in browser.get("/ui/sources").text
        control_plane.kubectl("delete", "rolebinding", "agent-reads-knowledge", "-n", "team-a")
        # The cache lives 1 s (SEARCHSVC_AUTH_CACHE_SECONDS); the wait bound is generous for a busy machine.
        eventually(
            lambda: visible(kube_search, agents["team-a"]) == [], what="the revoked grant to stop working", timeout_s=30
        )
        # The token still authenticates, so the session stays; it just grants nothing any more.
        sources = browser.get("/ui/sources")
        assert sources.status_code == 200 and "team-a/docs" not in sources.text
        assert "Guide of team-a" not in browser.get("/ui/", params={"q": "guide deploys"}).text
    assert mcp_reads(kube_search, agents["team-a"]) == ([], [])
    assert visible(kube_search, agents["team-b"]) == ["team-b/docs"]
    assert mcp_reads(kube_search, agents["team-b"]) == (["team-b/docs"], [guide("team-b")])
