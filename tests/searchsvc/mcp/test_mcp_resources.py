"""MCP resources and prompts over real HTTP, with the MCP SDK's own client, against a real service process.

One `python -m kbsearch` serves the module with team a's and team b's documents (the setup of
test_scoped_access): each team reads its own documents as resources, never the other's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.support.mcpclient import mcp_client, text_of
from tests.support.scoped_access import (
    A_DOCS,
    ADMIN,
    B_DOCS,
    B_WORD,
    NOBODY,
    TEAM_A,
    TOKENS,
    bearer,
    content,
)
from tests.support.service_process import ServiceProcess

A_DOC = next(iter(A_DOCS))
B_DOC = next(iter(B_DOCS))
# A URI with a query and a space: percent-encoded in the resource URI, decoded once by the template.
ODD = "https://git.example/a/odd page.md?ref=main"
ODD_CONTENT = "# Odd page\n\nA page whose URI needs encoding, about kestrels."


def document_uri(uri: str) -> str:
    return "kb://documents/" + quote(uri, safe=":/")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("mcpres")
    (root / "tokens.yaml").write_text(TOKENS)
    env = {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml")}
    process = ServiceProcess(root / "service.log", env).start()
    try:
        process.wait_ready()
        documents = {uri: (source, content(uri, source)) for uri, source in {**A_DOCS, **B_DOCS}.items()}
        documents[ODD] = ("team-a/docs", ODD_CONTENT)
        for uri, (source, text) in documents.items():
            body = {"uri": uri, "content": text, "metadata": {"sourceIdentifier": source}}
            response = process.client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))
            assert response.status_code == 200, response.text
        yield f"http://127.0.0.1:{process.port}"
    finally:
        process.stop()


async def test_the_server_advertises_resources_and_prompts(service):
    async with mcp_client(service, TEAM_A) as client:
        capabilities = client.server_capabilities
    assert capabilities.tools is not None
    assert capabilities.resources is not None and capabilities.prompts is not None


async def test_resources_list_the_sources_and_templates_the_documents(service):
    async with mcp_client(service, TEAM_A) as client:
        listed = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
    assert sorted((str(r.uri), r.mime_type) for r in listed) == [
        ("kb://sources", "application/json"),
        ("ui://knowledge-base/citations.html", "text/html;profile=mcp-app"),  # the citation viewer (MCP App)
    ]
    assert [t.uri_template for t in templates] == ["kb://documents/{+uri}"]


@pytest.mark.parametrize(("token", "sources"), [(TEAM_A, {"team-a/docs"}), (ADMIN, {"team-a/docs", "team-b/docs"})])
async def test_the_sources_resource_is_list_sources_body_in_the_callers_scope(service, token, sources):
    async with mcp_client(service, token) as client:
        read = await client.read_resource("kb://sources")
        tool = await client.call_tool("list_sources", {})
    [item] = read.contents
    assert item.mime_type == "application/json" and str(item.uri) == "kb://sources"
    body = json.loads(item.text)
    assert body == tool.structured_content
    assert {s["sourceIdentifier"] for s in body["sources"]} == sources
    if token == TEAM_A:
        assert B_WORD not in item.text and "team-b" not in item.text


async def test_nobody_reads_an_empty_sources_resource(service):
    async with mcp_client(service, NOBODY) as client:
        body = json.loads((await client.read_resource("kb://sources")).contents[0].text)
    assert body["sources"] == [] and body["documents"] == 0


async def test_a_document_resource_is_fetch_documents_text(service):
    async with mcp_client(service, TEAM_A) as client:
        read = await client.read_resource(document_uri(A_DOC))
        fetched = await client.call_tool("fetch_document", {"uri": A_DOC, "max_chars": 100_000})
    [item] = read.contents
    assert not fetched.is_error, text_of(fetched)
    assert item.text == fetched.structured_content["text"]
    assert item.mime_type == "text/markdown" and "shared words about deploys" in item.text


async def test_a_document_uri_with_a_query_and_a_space_is_read_percent_encoded(service):
    async with mcp_client(service, TEAM_A) as client:
        read = await client.read_resource(document_uri(ODD))
    assert "kestrels" in read.contents[0].text


async def test_another_teams_document_reads_as_an_unknown_one(service):
    unknown = "https://git.example/a/missing.md"
    async with mcp_client(service, TEAM_A) as client:
        with pytest.raises(MCPError) as hidden:
            await client.read_resource(document_uri(B_DOC))
        with pytest.raises(MCPError) as missing:
            await client.read_resource(document_uri(unknown))
    assert hidden.value.code == missing.value.code == INVALID_PARAMS
    assert hidden.value.message == missing.value.message.replace(unknown, B_DOC)
    assert hidden.value.message.startswith("NOT_FOUND: ") and B_WORD not in hidden.value.message
    # The admin may read it: the document exists, team a is only out of scope.
    async with mcp_client(service, ADMIN) as client:
        read = await client.read_resource(document_uri(B_DOC))
    assert B_WORD in read.contents[0].text


async def test_the_prompt_tells_the_model_to_resolve_search_and_cite(service):
    question = "How do deploys work?"
    async with mcp_client(service, TEAM_A) as client:
        prompts = (await client.list_prompts()).prompts
        got = await client.get_prompt("answer_with_citations", {"question": question})
    [prompt] = prompts
    assert prompt.name == "answer_with_citations"
    assert [(a.name, a.required) for a in prompt.arguments or []] == [("question", True)]
    [message] = got.messages
    assert message.role == "user" and message.content.type == "text"
    text = message.content.text
    assert question in text
    assert "resolve_sources" in text and "search_knowledge" in text and "URI" in text


async def test_a_refused_prompt_argument_reads_invalid_argument(service):
    async with mcp_client(service, TEAM_A) as client:
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("answer_with_citations", {"question": "x" * 2001})
    assert refused.value.code == INVALID_PARAMS
    assert refused.value.message == "INVALID_ARGUMENT: question: String should have at most 2000 characters"


async def test_the_client_discovers_the_server_and_every_list_or_read_says_how_long_it_keeps(service):
    """MCP 2026-07-28: the SDK client's server/discover probe, and ttlMs/cacheScope on lists and reads."""
    async with mcp_client(service, TEAM_A) as client:
        discovered = client.session.discover_result
        lists = [
            await client.list_tools(),
            await client.list_resources(),
            await client.list_resource_templates(),
            await client.list_prompts(),
        ]
        sources = await client.read_resource("kb://sources")
        document = await client.read_resource(document_uri(A_DOC))
        protocol = client.protocol_version
    assert protocol == "2026-07-28"
    assert discovered is not None and "2026-07-28" in discovered.supported_versions
    assert discovered.capabilities.resources is not None and discovered.capabilities.prompts is not None
    assert (discovered.ttl_ms, discovered.cache_scope) == (300_000, "private")
    # Every answer is made for the caller's token: never "public".
    assert [(r.ttl_ms, r.cache_scope) for r in lists] == [(300_000, "private")] * 4
    assert (sources.ttl_ms, sources.cache_scope) == (15_000, "private")  # counts and sync times move
    assert (document.ttl_ms, document.cache_scope) == (60_000, "private")


async def test_ask_knowledge_names_the_citation_viewer_an_mcp_app_host_renders(service):
    """MCP Apps: the extension is advertised, ask_knowledge points at a ui:// page, and the page is served."""
    async with mcp_client(service, TEAM_A) as client:
        extensions = client.server_capabilities.extensions or {}
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        page = await client.read_resource("ui://knowledge-base/citations.html")
    assert "io.modelcontextprotocol/ui" in extensions
    assert tools["ask_knowledge"].meta == {"ui": {"resourceUri": "ui://knowledge-base/citations.html"}}
    assert all(not (tool.meta or {}).get("ui") for name, tool in tools.items() if name != "ask_knowledge")
    [item] = page.contents
    assert item.mime_type == "text/html;profile=mcp-app"
    assert "ui/notifications/tool-result" in item.text and "innerHTML" not in item.text
