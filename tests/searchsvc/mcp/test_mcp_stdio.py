"""`knowledge-mcp`: the stdio bridge, through the SDK's stdio client, against a real running service."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from kbsearch.mcp.stdio import BridgeError, endpoint_url, read_token
from tests.searchsvc.mcp.stdio_support import A_URI, B_URI, TOKEN_VARIABLE, bridge, bridge_env
from tests.support.mcpclient import CORE_READ_TOOLS, mcp_client, text_of
from tests.support.scoped_access import (
    ADMIN,
    B_WORD,
    TEAM_A,
    TOKENS,
    assert_no_b,
    bearer,
    content,
)
from tests.support.service_process import ServiceProcess, free_port


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("mcp-stdio")
    (root / "tokens.yaml").write_text(TOKENS)
    env = {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml")}
    process = ServiceProcess(root / "service.log", env).start()
    try:
        process.wait_ready()
        for uri, source in ((A_URI, "team-a/docs"), (B_URI, "team-b/docs")):
            body = {"uri": uri, "content": content(uri, source), "metadata": {"sourceIdentifier": source}}
            assert process.client.put("/api/v1/documents", json=body, headers=bearer(ADMIN)).status_code == 200
        yield f"http://127.0.0.1:{process.port}"
    finally:
        process.stop()


async def test_the_bridge_serves_the_services_tools_with_the_callers_scope(service):
    async with Client(bridge(service, TEAM_A)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == CORE_READ_TOOLS
        result = await client.call_tool("search_knowledge", {"query": f"{B_WORD} shared words deploys"})
        assert not result.is_error, text_of(result)
        assert {r["uri"] for r in result.structured_content["results"]} == {A_URI}
        assert_no_b(text_of(result))
        page = await client.call_tool("fetch_document", {"uri": A_URI})
        assert page.structured_content["nextStart"] is None and "shared words" in page.structured_content["text"]
        refused = await client.call_tool("fetch_document", {"uri": B_URI})
        assert refused.is_error and "no document" in text_of(refused)
        bad = await client.call_tool("search_knowledge", {"query": "deploys", "limit": 0})
        assert bad.is_error and "limit" in text_of(bad)


def document_uri(uri: str) -> str:
    return "kb://documents/" + uri  # these URIs need no percent-encoding


async def test_the_bridge_serves_the_resources_and_the_prompt_as_the_http_face_does(service):
    """The same service methods answer: each read through stdio equals the same read over /mcp."""
    async with Client(bridge(service, TEAM_A)) as client:
        capabilities = client.server_capabilities
        listed = await client.list_resources()
        templates = (await client.list_resource_templates()).resource_templates
        sources = await client.read_resource("kb://sources")
        document = await client.read_resource(document_uri(A_URI))
        with pytest.raises(MCPError) as hidden:
            await client.read_resource(document_uri(B_URI))
        prompts = (await client.list_prompts()).prompts
        prompt = await client.get_prompt("answer_with_citations", {"question": "How do deploys work?"})
    async with mcp_client(service, TEAM_A) as http:
        http_sources = await http.read_resource("kb://sources")
        http_document = await http.read_resource(document_uri(A_URI))
        http_prompt = await http.get_prompt("answer_with_citations", {"question": "How do deploys work?"})
    assert capabilities.resources is not None and capabilities.prompts is not None
    assert sorted(str(r.uri) for r in listed.resources) == ["kb://sources", "ui://knowledge-base/citations.html"]
    assert [t.uri_template for t in templates] == ["kb://documents/{+uri}"]
    assert sources.contents == http_sources.contents
    assert "team-a/docs" in sources.contents[0].text and "team-b" not in sources.contents[0].text
    assert document.contents == http_document.contents and "shared words" in document.contents[0].text
    # Another team's document is the service's own NOT_FOUND, passed on.
    assert hidden.value.code == INVALID_PARAMS and hidden.value.message.startswith("NOT_FOUND: ")
    assert B_WORD not in hidden.value.message
    assert [p.name for p in prompts] == ["answer_with_citations"]
    assert prompt.messages == http_prompt.messages
    # The service's cache hints reach the stdio client unchanged.
    assert (listed.ttl_ms, listed.cache_scope) == (300_000, "private")
    assert (sources.ttl_ms, document.ttl_ms) == (http_sources.ttl_ms, http_document.ttl_ms) == (15_000, 60_000)


async def test_the_bridge_lists_write_tools_for_a_writer(service):
    async with Client(bridge(service, ADMIN)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"ingest_document", "delete_document"} <= names


def run_bridge(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kbsearch.mcp.stdio", *args],
        env=bridge_env(token),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_missing_token_variable_is_a_clear_error(service):
    result = run_bridge("--service", service, "--token-env", TOKEN_VARIABLE)
    assert result.returncode == 2 and result.stdout == ""
    assert f"--token-env {TOKEN_VARIABLE}: that environment variable is not set" in result.stderr


def test_a_refused_token_is_a_clear_error_that_never_shows_the_token(service):
    result = run_bridge("--service", service, "--token-env", TOKEN_VARIABLE, token="wrong-secret-token")
    assert result.returncode == 2 and "refused the token (401)" in result.stderr
    assert "wrong-secret-token" not in result.stderr + result.stdout


def test_an_unreachable_service_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    result = run_bridge("--service", url, "--token-env", TOKEN_VARIABLE, token=TEAM_A)
    assert result.returncode == 2 and f"cannot reach {url}/mcp" in result.stderr


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://host/x", "http:// or https://"),
        ("not a url", "http:// or https://"),
        ("http://user:secret@host:8000", "must not carry credentials"),
        ("http://host:8000/?token=x", "query"),
    ],
)
def test_bad_service_urls_are_refused(url, problem):
    with pytest.raises(BridgeError, match=problem):
        endpoint_url(url)


def test_service_urls_point_at_the_mcp_endpoint():
    assert endpoint_url("http://kb-knowledge-base-search.kb-system.svc:8000") == (
        "http://kb-knowledge-base-search.kb-system.svc:8000/mcp"
    )
    assert endpoint_url("https://kb.example/search/") == "https://kb.example/search/mcp"
    assert endpoint_url("http://127.0.0.1:8000/mcp") == "http://127.0.0.1:8000/mcp"


def test_a_token_with_a_trailing_newline_is_refused_without_showing_it():
    with pytest.raises(BridgeError) as refused:
        read_token("VAR", {"VAR": "s3cret-value\n"})
    assert "s3cret-value" not in str(refused.value) and "newline" in str(refused.value)
    assert read_token(None, {}) is None
