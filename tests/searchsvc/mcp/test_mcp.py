"""The /mcp endpoint over real HTTP, with the MCP SDK's own client, against a real service process.

One `python -m kbsearch` (with the hashing embedder) serves the module: a tokens file with
team-scoped identities (the setup of test_scoped_access), team a's and team b's documents, one
long document for paging, and the compatibility tools switched on.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request

from kbsearch.api.resource_metadata import metadata
from kbsearch.deps import context_of
from kbsearch.settings import Settings
from tests.searchsvc.api_fixtures import sections
from tests.support.formatfiles import pdf_pages
from tests.support.mcpclient import ACCEPT, CORE_READ_TOOLS, everything, mcp_client, rpc, text_of
from tests.support.scoped_access import (
    A_DOCS,
    A_WRITER,
    ADMIN,
    B_DOCS,
    B_WORD,
    NOBODY,
    TEAM_A,
    TOKENS,
    assert_no_b,
    bearer,
    content,
)
from tests.support.service import BASE_URL, running_service
from tests.support.service_process import ServiceProcess
from tests.support.sync_reports import report, status_path

LONG = "https://git.example/a/handbook.md"
LONG_CONTENT = "---\ntitle: The handbook\n---\n# The handbook\n\n" + sections(12, words="delta epsilon zeta")
# A Host header as an in-cluster agent sends it through the chart's Service.
SERVICE_HOST = "kb-knowledge-base-search.kb-system.svc:8000"
WRITE_TOOLS = {"ingest_document", "delete_document"}
COMPAT_READ_TOOLS = {"search", "fetch"}
COMPAT_TOOLS = {"manageKnowledge"} | COMPAT_READ_TOOLS


METRICS_URLS: dict[str, str] = {}  # the service's URL -> its metrics listener's


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("mcp")
    (root / "tokens.yaml").write_text(TOKENS)
    env = {
        "SEARCHSVC_DATA_DIR": str(root / "data"),
        "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml"),
        "SEARCHSVC_MCP_ALLOWED_HOSTS": f"127.0.0.1:*,localhost:*,{SERVICE_HOST}",
        "SEARCHSVC_MCP_COMPAT_DOTAI": "true",
        "SEARCHSVC_MCP_COMPAT_OPENAI": "true",
    }
    process = ServiceProcess(root / "service.log", env, metrics=True).start()
    METRICS_URLS[process.url] = process.metrics_url
    try:
        process.wait_ready()
        documents = {uri: (source, content(uri, source)) for uri, source in {**A_DOCS, **B_DOCS}.items()}
        documents[LONG] = ("team-a/handbook", LONG_CONTENT)
        for uri, (source, text) in documents.items():
            body = {"uri": uri, "content": text, "metadata": {"sourceIdentifier": source, "team": source[5]}}
            response = process.client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))
            assert response.status_code == 200, response.text
        status = process.client.put(status_path("team-a/handbook"), json=report(), headers=bearer(ADMIN))
        assert status.status_code == 200, status.text
        yield f"http://127.0.0.1:{process.port}"
    finally:
        process.stop()


async def call(base_url: str, token: str, tool: str, **arguments):
    async with mcp_client(base_url, token) as client:
        return await client.call_tool(tool, arguments)


# --- tools/list ---------------------------------------------------------------------------------


async def test_tools_list_has_typed_tools_and_write_tools_only_for_writers(service):
    async with mcp_client(service, ADMIN) as client:
        admin = {tool.name: tool for tool in (await client.list_tools()).tools}
    async with mcp_client(service, TEAM_A) as client:
        reader = {tool.name for tool in (await client.list_tools()).tools}
    assert set(admin) == CORE_READ_TOOLS | WRITE_TOOLS | COMPAT_TOOLS
    # manageKnowledge ingests and deletes: a read-only token is not offered it.
    assert reader == CORE_READ_TOOLS | COMPAT_READ_TOOLS
    search = admin["search_knowledge"]
    assert search.input_schema["required"] == ["query"]
    assert set(search.input_schema["properties"]) == {
        "query",
        "limit",
        "sources",
        "uri_prefix",
        "mode",
        "version",
        "case_sensitive",
    }
    assert search.input_schema["properties"]["mode"]["enum"] == ["hybrid", "dense", "keyword", "literal"]
    assert {"results", "query", "mode", "tookMs"} <= set(search.output_schema["properties"])
    assert admin["fetch_document"].output_schema["properties"]["nextStart"]
    assert admin["get_chunk_context"].output_schema["properties"]["chunks"]
    assert admin["list_sources"].output_schema["properties"]["sources"]
    for name in CORE_READ_TOOLS:
        assert admin[name].annotations.read_only_hint is True, name
        assert admin[name].annotations.destructive_hint is False, name
    assert admin["search_knowledge"].annotations.idempotent_hint is True
    assert admin["ask_knowledge"].annotations.idempotent_hint is False  # a model's answer may vary
    assert admin["delete_document"].annotations.destructive_hint is True
    assert admin["ingest_document"].annotations.idempotent_hint is True
    assert admin["ingest_document"].annotations.read_only_hint is False


def test_compatibility_tools_are_off_by_default():
    from kbsearch.mcp.server import tool_specs

    names = {spec.tool_name for spec in tool_specs(Settings().compat)}
    assert names == CORE_READ_TOOLS | WRITE_TOOLS


# --- search_knowledge ----------------------------------------------------------------------------


async def test_search_returns_full_records_and_compact_text(service):
    result = await call(service, ADMIN, "search_knowledge", query="delta epsilon section3", limit=3)
    assert not result.is_error, text_of(result)
    records = result.structured_content["results"]
    assert 1 <= len(records) <= 3
    top = records[0]
    assert {"id", "uri", "chunkIndex", "totalChunks", "content", "score", "title", "headings", "metadata"} <= set(top)
    text = text_of(result)
    # "[n] title \u203a heading path \u2014 uri (relevance)", then the chunk's text; no JSON in the text.
    first_line = text.splitlines()[0]
    assert first_line.startswith(f"[1] {top['title']} \u203a ") and f"\u2014 {top['uri']} (relevance " in first_line
    assert top["content"] in text and '"chunkIndex"' not in text
    assert len(records) == text.count("\n[") + 1


async def test_search_filters_by_source_and_uri_prefix(service):
    result = await call(service, ADMIN, "search_knowledge", query="shared words deploys", sources=["team-b/docs"])
    assert {r["sourceIdentifier"] for r in result.structured_content["results"]} == {"team-b/docs"}
    prefix = "https://git.example/a/doc1"
    result = await call(service, ADMIN, "search_knowledge", query="shared words deploys", uri_prefix=prefix)
    assert {r["uri"] for r in result.structured_content["results"]} == {"https://git.example/a/doc1.md"}
    result = await call(service, ADMIN, "search_knowledge", query="delta", mode="keyword", limit=2)
    keyword = result.structured_content
    uris = [r["uri"] for r in keyword["results"]]
    assert keyword["mode"] == "keyword" and 1 <= len(uris) <= 2 and len(set(uris)) == len(uris)  # one per page


async def test_a_literal_search_finds_the_text_as_written(service):
    result = await call(service, ADMIN, "search_knowledge", query=f"The {B_WORD} team", mode="literal", limit=100)
    assert not result.is_error, text_of(result)
    found = result.structured_content
    assert found["mode"] == "literal" and found["results"]
    assert all(f"The {B_WORD} team" in r["content"] for r in found["results"])
    result = await call(
        service, ADMIN, "search_knowledge", query=f"the {B_WORD.upper()} team", mode="literal", case_sensitive=True
    )
    assert result.structured_content["results"] == []
    result = await call(service, ADMIN, "search_knowledge", query="deploys", case_sensitive=True)
    assert result.is_error and "caseSensitive" in text_of(result)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1000}, "limit"),
        ({"mode": "fuzzy"}, "mode"),
        ({"query": " "}, "query"),
        ({"query": "x" * 1001}, "query"),
        ({"sources": []}, "sources"),
        ({"uri_prefix": "a\nb"}, "uri_prefix"),
    ],
)
async def test_search_arguments_are_validated_as_rest_validates_them(service, arguments, named):
    result = await call(service, ADMIN, "search_knowledge", **({"query": "deploys"} | arguments))
    assert result.is_error, text_of(result)
    assert named in text_of(result) and result.structured_content is None


# --- fetch_document and get_chunk_context --------------------------------------------------------


async def fetch_all(base_url: str, token: str, uri: str, max_chars: int) -> tuple[str, list[dict]]:
    pages, start = [], 0
    async with mcp_client(base_url, token) as client:
        while start is not None:
            result = await client.call_tool("fetch_document", {"uri": uri, "start": start, "max_chars": max_chars})
            assert not result.is_error, text_of(result)
            page = result.structured_content
            assert page["start"] == start and len(page["text"]) <= max_chars
            pages.append(page)
            start = page["nextStart"]
    return "".join(p["text"] for p in pages), pages


async def test_paging_fetch_document_to_the_end_gives_every_chunk_in_order(service):
    text, pages = await fetch_all(service, TEAM_A, LONG, max_chars=700)
    assert len(pages) > 3 and pages[-1]["end"] == pages[-1]["totalChars"] == len(text)
    assert {p["title"] for p in pages} == {"The handbook"} and pages[0]["checksum"].startswith("sha256:")
    assert "title: The handbook" not in text  # the front matter is metadata, not body text
    whole, _ = await fetch_all(service, TEAM_A, LONG, max_chars=100_000)
    assert whole == text
    context = await call(service, TEAM_A, "get_chunk_context", uri=LONG, chunk_index=0, window=10)
    total = context.structured_content["totalChunks"]
    assert total >= 12
    position = 0
    for index in range(total):
        result = await call(service, TEAM_A, "get_chunk_context", uri=LONG, chunk_index=index, window=0)
        (chunk,) = result.structured_content["chunks"]
        found = text.find(chunk["content"], position)
        assert found >= position, f"chunk {index} is missing or out of order"
        position = found + len(chunk["content"])
    assert text_of(await call(service, TEAM_A, "fetch_document", uri=LONG, max_chars=50)).startswith(
        f"The handbook \u2014 {LONG} (characters 0 to 50 of {len(text)}; continue with start=50)"
    )


async def test_chunk_context_gives_the_neighbours_in_order(service):
    result = await call(service, TEAM_A, "get_chunk_context", uri=LONG, chunk_index=5, window=2)
    assert not result.is_error, text_of(result)
    body = result.structured_content
    assert [c["chunkIndex"] for c in body["chunks"]] == [3, 4, 5, 6, 7]
    assert body["chunkIndex"] == 5 and body["uri"] == LONG and body["sourceIdentifier"] == "team-a/handbook"
    assert "[chunk 5/" in text_of(result) and "(asked for)" in text_of(result)
    edge = await call(service, TEAM_A, "get_chunk_context", uri=LONG, chunk_index=0, window=1)
    assert [c["chunkIndex"] for c in edge.structured_content["chunks"]] == [0, 1]


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("fetch_document", {"uri": LONG, "max_chars": 0}, "max_chars"),
        ("fetch_document", {"uri": LONG, "max_chars": 1_000_000}, "max_chars"),
        ("fetch_document", {"uri": LONG, "start": -1}, "start"),
        ("fetch_document", {"uri": LONG, "start": 10_000_000}, "past the end"),
        ("fetch_document", {"uri": "https://git.example/nothing.md"}, "no document"),
        ("get_chunk_context", {"uri": LONG, "chunk_index": 0, "window": 11}, "window"),
        ("get_chunk_context", {"uri": LONG, "chunk_index": -1}, "chunk_index"),
        ("get_chunk_context", {"uri": LONG, "chunk_index": 500}, "out of range"),
        ("get_chunk_context", {"uri": "https://git.example/nothing.md", "chunk_index": 0}, "no document"),
        ("search_knowledge", {}, "query"),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_problem(service, tool, arguments, named):
    result = await call(service, TEAM_A, tool, **arguments)
    assert result.is_error and named in text_of(result), text_of(result)


# --- scope --------------------------------------------------------------------------------------


async def test_a_scoped_identity_never_sees_another_teams_documents(service):
    b_uri = next(iter(B_DOCS))
    async with mcp_client(service, TEAM_A) as client:
        for mode in ("hybrid", "dense", "keyword"):
            for arguments in ({}, {"sources": ["team-b/docs"]}, {"uri_prefix": "https://git.example/b/"}):
                result = await client.call_tool(
                    "search_knowledge", {"query": f"{B_WORD} secrets", "mode": mode, "limit": 100} | arguments
                )
                assert not result.is_error, text_of(result)
                structured = dict(result.structured_content)
                structured.pop("query")  # the caller's own words, echoed
                assert_no_b(text_of(result) + json.dumps(structured))
        # The text as written is in team b's chunks (the admin finds it above): never here.
        for arguments in ({}, {"sources": ["team-b/docs"]}):
            result = await client.call_tool("search_knowledge", {"query": B_WORD, "mode": "literal"} | arguments)
            assert not result.is_error and result.structured_content["results"] == [], text_of(result)
        for tool, arguments in [
            ("fetch_document", {"uri": b_uri}),
            ("get_chunk_context", {"uri": b_uri, "chunk_index": 0}),
            ("fetch", {"id": b_uri}),
        ]:
            result = await client.call_tool(tool, arguments)
            assert result.is_error and "no document" in text_of(result), text_of(result)
        sources = await client.call_tool("list_sources", {})
        assert_no_b(everything(sources))
        assert {s["sourceIdentifier"] for s in sources.structured_content["sources"]} == {
            "team-a/docs",
            "team-a/handbook",
        }
        openai = await client.call_tool("search", {"query": f"{B_WORD} secrets"})
        assert_no_b(text_of(openai))


async def test_an_identity_with_no_sources_gets_empty_answers_not_errors(service):
    result = await call(service, NOBODY, "search_knowledge", query="deploys")
    assert not result.is_error and result.structured_content["results"] == []
    assert "No results" in text_of(result)
    sources = await call(service, NOBODY, "list_sources")
    assert sources.structured_content == {"documents": 0, "chunks": 0, "sources": []}


async def test_list_sources_counts_what_the_caller_may_read(service):
    result = await call(service, ADMIN, "list_sources")
    body = result.structured_content
    by_source = {s["sourceIdentifier"]: s for s in body["sources"]}
    assert set(by_source) == {"team-a/docs", "team-a/handbook", "team-b/docs"}
    assert by_source["team-b/docs"]["documents"] == len(B_DOCS)
    assert body["documents"] == sum(s["documents"] for s in body["sources"])
    assert by_source["team-a/handbook"]["lastIngestedAt"]
    async with httpx.AsyncClient() as client:
        rest = (await client.get(f"{service}/api/v1/sources", headers=bearer(ADMIN))).json()["sources"]
    assert body["sources"] == rest  # the same records as GET /api/v1/sources, the operator's sync status included
    assert by_source["team-a/handbook"]["sync"]["phase"] == "partial"
    text = text_of(result)
    assert text.startswith("3 sources, ")
    assert "team-a/handbook: 1 documents" in text and "sync: commit 0123456789" in text and "phase partial" in text
    assert "failedFiles 1" in text


async def test_resolve_sources_is_get_sources_with_a_query_and_scoped(service):
    result = await call(service, TEAM_A, "resolve_sources", query="team-b docs zebrafish")
    body = result.structured_content
    assert {s["sourceIdentifier"] for s in body["sources"]} <= {"team-a/docs", "team-a/handbook"}
    assert_no_b(json.dumps(body) + text_of(result))
    result = await call(service, ADMIN, "resolve_sources", query="team-a handbook")
    found = result.structured_content["sources"]
    assert found[0]["sourceIdentifier"] == "team-a/handbook" and found[0]["match"]["nameTokens"]
    async with httpx.AsyncClient() as client:
        rest = await client.get(f"{service}/api/v1/sources", params={"query": "team-a handbook"}, headers=bearer(ADMIN))
    assert [s["sourceIdentifier"] for s in found] == [s["sourceIdentifier"] for s in rest.json()["sources"]]


async def test_a_search_or_ask_for_an_absent_version_is_a_tool_error_with_its_code(service):
    for tool, arguments in (("search_knowledge", {"query": "deploys"}), ("ask_knowledge", {"question": "deploys?"})):
        result = await call(service, TEAM_A, tool, version="team-a/docs@7.7", **arguments)
        assert result.is_error and text_of(result).startswith("VERSION_NOT_FOUND: "), text_of(result)


# --- writes -------------------------------------------------------------------------------------


async def test_ingest_converts_a_file_whose_format_is_named(service):
    """A PDF by its bytes, under a URI with no extension: content_type names the format, as on REST."""
    uri = "https://git.example/a/controller-manual"
    pdf = pdf_pages(
        "Installing the quasar controller: apply its manifests. " * 8,
        "Upgrading the quasar controller: read the release notes first. " * 8,
    )
    document = {
        "uri": uri,
        "content": base64.b64encode(pdf).decode("ascii"),
        "content_encoding": "base64",
        "content_type": "application/pdf",
        "metadata": {"sourceIdentifier": "team-a/docs"},
    }
    async with mcp_client(service, A_WRITER) as client:
        created = await client.call_tool("ingest_document", document)
        assert not created.is_error, text_of(created)
        assert created.structured_content["chunks"] >= 2
        found = await client.call_tool("search_knowledge", {"query": "upgrading quasar release notes", "limit": 1})
        assert f"{uri}#page=2 (page 2)" in text_of(found)  # the hit names its PDF page
        unnamed = await client.call_tool("ingest_document", document | {"content_type": None, "uri": uri + "-2"})
        # Without it the URI says markdown, and the bytes say otherwise: refused, with a stable code.
        assert unnamed.is_error and "CONTENT_TYPE_MISMATCH" in text_of(unnamed)
        await client.call_tool("delete_document", {"uri": uri})


async def test_ingest_and_delete_through_mcp(service):
    uri = "https://git.example/a/new-runbook.md"
    document = {
        "uri": uri,
        "content": "# Runbook\n\nRestart the omega pump.",
        "metadata": {"sourceIdentifier": "team-a/docs"},
    }
    async with mcp_client(service, A_WRITER) as client:
        created = await client.call_tool("ingest_document", document)
        assert not created.is_error, text_of(created)
        assert created.structured_content["status"] == "created" and created.structured_content["chunks"] == 1
        again = await client.call_tool("ingest_document", document)
        assert again.structured_content["status"] == "unchanged"
        other = await client.call_tool("ingest_document", document | {"metadata": {"sourceIdentifier": "team-b/docs"}})
        assert other.is_error and "SOURCE_FORBIDDEN" in text_of(other)
        found = await client.call_tool("search_knowledge", {"query": "omega pump", "limit": 1})
        assert found.structured_content["results"][0]["uri"] == uri
        deleted = await client.call_tool("delete_document", {"uri": uri})
        assert not deleted.is_error and deleted.structured_content == {"uri": uri, "chunksDeleted": 1}
        gone = await client.call_tool("fetch_document", {"uri": uri})
        assert gone.is_error and "no document" in text_of(gone)
        twice = await client.call_tool("delete_document", {"uri": uri})
        assert twice.is_error and "no document" in text_of(twice)


async def test_a_reader_calling_a_write_tool_is_refused(service):
    result = await call(service, TEAM_A, "ingest_document", uri="https://git.example/a/x.md", content="# x")
    assert result.is_error and "FORBIDDEN" in text_of(result)
    result = await call(service, TEAM_A, "delete_document", uri=next(iter(A_DOCS)))
    assert result.is_error and "may read but not write" in text_of(result)
    assert not (await call(service, TEAM_A, "fetch_document", uri=next(iter(A_DOCS)))).is_error


async def test_ingest_arguments_are_validated(service):
    result = await call(service, ADMIN, "ingest_document", uri="", content="# x")
    assert result.is_error and "uri" in text_of(result)
    result = await call(service, ADMIN, "ingest_document", uri="https://x/y.md", content="x", metadata={"bad key": 1})
    assert result.is_error and "metadata" in text_of(result)


# --- compatibility tools -----------------------------------------------------------------------


async def test_dotai_manage_knowledge_keeps_its_arguments_and_shapes(service):
    uri = "https://git.example/a/dotai.md"
    async with mcp_client(service, ADMIN) as client:
        ingest = await client.call_tool(
            "manageKnowledge",
            {
                "operation": "ingest",
                "uri": uri,
                "content": "# Dot\n\nThe kappa gauge.",
                "metadata": {"sourceIdentifier": "team-a/docs"},
            },
        )
        assert not ingest.is_error, text_of(ingest)
        assert ingest.structured_content["success"] is True and ingest.structured_content["chunksCreated"] == 1
        assert len(ingest.structured_content["chunkIds"]) == 1
        # dot-ai leaves out what an operation does not have; a strict client's schema refuses null.
        assert set(ingest.structured_content) == {"success", "operation", "message", "uri", "chunksCreated", "chunkIds"}
        search = await client.call_tool(
            "manageKnowledge", {"operation": "search", "query": "kappa gauge", "limit": 2, "uriFilter": uri}
        )
        chunks = search.structured_content["chunks"]
        assert [c["uri"] for c in chunks] == [uri] and chunks[0]["id"] == ingest.structured_content["chunkIds"][0]
        assert search.structured_content["totalMatches"] == 1
        missing = await client.call_tool("manageKnowledge", {"operation": "search"})
        assert missing.is_error and "query is required" in text_of(missing)
        bad = await client.call_tool("manageKnowledge", {"operation": "search", "query": "x", "limit": 0})
        assert bad.is_error and text_of(bad).startswith("INVALID_ARGUMENT: limit")
        unknown = await client.call_tool("manageKnowledge", {"operation": "purge", "uri": uri})
        assert unknown.is_error and text_of(unknown) == (
            "INVALID_ARGUMENT: operation must be one of ingest, search, deleteByUri, not 'purge'"
        )
        deleted = await client.call_tool("manageKnowledge", {"operation": "deleteByUri", "uri": uri})
        assert deleted.structured_content["chunksDeleted"] == 1
        assert set(deleted.structured_content) == {"success", "operation", "message", "uri", "chunksDeleted"}


async def test_openai_search_and_fetch_speak_json_with_uri_ids(service):
    async with mcp_client(service, TEAM_A) as client:
        found = await client.call_tool("search", {"query": "delta epsilon zeta"})
        results = json.loads(text_of(found))["results"]
        assert results and results[0] == {"id": LONG, "title": "The handbook", "url": LONG}
        assert len({r["id"] for r in results}) == len(results)
        fetched = json.loads(text_of(await client.call_tool("fetch", {"id": LONG})))
    assert set(fetched) == {"id", "title", "text", "url", "metadata"}
    assert fetched["id"] == fetched["url"] == LONG and "section11" in fetched["text"]
    assert fetched["metadata"]["sourceIdentifier"] == "team-a/handbook"


# --- HTTP: hosts, redirects, authentication ------------------------------------------------------


def post_mcp(base_url: str, token: str | None, *, host: str | None = None, path: str = "/mcp") -> httpx.Response:
    headers = {"accept": ACCEPT, **(bearer(token) if token else {})}
    if host:
        headers["host"] = host
    return httpx.post(f"{base_url}{path}", json=rpc("tools/list"), headers=headers, follow_redirects=False)


async def test_the_chart_service_host_is_served_and_an_unknown_host_is_refused(service):
    async with mcp_client(service, TEAM_A, host=SERVICE_HOST) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= CORE_READ_TOOLS
    assert post_mcp(service, TEAM_A, host=SERVICE_HOST).status_code == 200
    refused = post_mcp(service, TEAM_A, host="evil.example:8000")
    assert refused.status_code == 421


def test_post_mcp_without_a_trailing_slash_is_served_not_redirected(service):
    response = post_mcp(service, TEAM_A)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert {t["name"] for t in response.json()["result"]["tools"]} >= CORE_READ_TOOLS


@pytest.mark.parametrize("token", [None, "not-a-known-token"])
def test_a_missing_or_bad_token_is_401_with_www_authenticate(service, token):
    response = post_mcp(service, token)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


def test_a_token_in_the_url_is_refused(service):
    response = httpx.post(
        f"{service}/mcp?access_token={TEAM_A}", json=rpc("tools/list"), headers={"accept": ACCEPT, **bearer(TEAM_A)}
    )
    assert response.status_code == 401


def test_unknown_paths_keep_the_apis_json_errors(service):
    response = httpx.get(f"{service}/no-such-path")
    assert response.status_code == 404 and response.json()["error"]["code"] == "NOT_FOUND"


# --- the query log ------------------------------------------------------------------------------


async def test_mcp_searches_are_logged_with_origin_mcp(tmp_path):
    async with running_service("edge", tmp_path / "data", mcp_compat_dotai=True, mcp_compat_openai=True) as client:
        await client.put("/api/v1/documents", json={"uri": "https://x/a.md", "content": "# A\n\nrollback with helm"})
        headers = {"accept": ACCEPT, "host": "127.0.0.1"}
        for name, arguments in [
            ("search_knowledge", {"query": "rollback helm"}),
            ("manageKnowledge", {"operation": "search", "query": "helm"}),
            ("search", {"query": "rollback"}),
        ]:
            response = await client.post(
                "/mcp", json=rpc("tools/call", {"name": name, "arguments": arguments}), headers=headers
            )
            assert not response.json()["result"]["isError"], response.text
        await client.get("/api/v1/search", params={"q": "helm"})
        await context_of(client.app).query_log.flush()
        entries = sorted(context_of(client.app).query_log.store.entries(since=0, allowed=None), key=lambda e: e["at"])
    assert [(e["origin"], e["query"]) for e in entries] == [
        ("mcp", "rollback helm"),
        ("mcp", "helm"),
        ("mcp", "rollback"),
        ("api", "helm"),
    ]


async def test_an_open_single_tenant_service_stays_open_for_reads_as_rest_does(tmp_path):
    write_token = "write-token-123"
    async with running_service("edge", tmp_path / "data", api_token=write_token) as client:

        async def tools(token: str | None) -> set[str]:
            headers = {"accept": ACCEPT, "host": "127.0.0.1", **(bearer(token) if token else {})}
            response = await client.post("/mcp", json=rpc("tools/list"), headers=headers)
            assert response.status_code == 200, response.text
            return {tool["name"] for tool in response.json()["result"]["tools"]}

        assert await tools(None) == CORE_READ_TOOLS  # reads need no token; writes do
        assert await tools("some-other-token") == CORE_READ_TOOLS  # an unknown token counts as none, as in REST
        assert await tools(write_token) == CORE_READ_TOOLS | WRITE_TOOLS


# --- what a client learns before it calls anything -------------------------------------------------

METADATA = "/.well-known/oauth-protected-resource"


@pytest.mark.parametrize("token", [None, "not-a-known-token"])
def test_a_401_names_the_protected_resource_metadata_and_it_says_how_to_authenticate(service, token):
    response = post_mcp(service, token)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith(f'Bearer resource_metadata="{service}{METADATA}"')
    assert ('error="invalid_token"' in challenge) is (token is not None)  # RFC 6750: only a token presented
    url = challenge.split('"')[1]
    for path in (url, url + "/mcp"):  # RFC 9728 §3.1: the resource's path appended
        metadata = httpx.get(path)  # no token: the document is public
        assert metadata.status_code == 200, path
        body = metadata.json()
        # No authorization server: nothing to start an OAuth flow against; a static token is the way in.
        assert body["resource"] == f"{service}/mcp" and "authorization_servers" not in body
        assert body["bearer_methods_supported"] == ["header"]
        assert body["x-kb-authentication"]["tokens"] == "static"


def test_the_metadata_names_the_serviceaccount_audiences_in_kubernetes_mode(tmp_path):
    settings = Settings(data_dir=tmp_path, auth_mode="kubernetes", kubernetes_audiences="kb-search,other")
    request = Request(
        {
            "type": "http",
            "scheme": "http",
            "server": ("localhost", 80),
            "path": "/",
            "headers": [(b"host", b"localhost")],
        }
    )
    body = metadata(request, settings)
    assert body["resource"] == f"{BASE_URL}/mcp"
    assert body["x-kb-authentication"]["tokens"] == "kubernetes-serviceaccount"
    assert body["x-kb-authentication"]["audiences"] == ["kb-search", "other"]


def test_the_input_schemas_carry_the_rest_limits(service):
    tools = {t["name"]: t["inputSchema"]["properties"] for t in post_mcp(service, ADMIN).json()["result"]["tools"]}
    search = tools["search_knowledge"]
    assert (search["query"]["minLength"], search["query"]["maxLength"]) == (1, 1000)
    assert (search["limit"]["minimum"], search["limit"]["maximum"]) == (1, 100)
    fetch = tools["fetch_document"]
    assert fetch["start"]["minimum"] == 0 and (fetch["max_chars"]["minimum"], fetch["max_chars"]["maximum"]) == (
        1,
        100_000,
    )
    assert (
        tools["get_chunk_context"]["window"]["maximum"] == 10 and tools["ingest_document"]["uri"]["maxLength"] == 2048
    )
    manage = tools["manageKnowledge"]
    assert manage["operation"]["enum"] == ["ingest", "search", "deleteByUri"]
    assert manage["limit"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 100}


async def test_a_refused_argument_reads_invalid_argument_not_pydantic(service):
    result = await call(service, TEAM_A, "search_knowledge", query="deploys", limit=101)
    assert result.is_error
    assert text_of(result) == "INVALID_ARGUMENT: limit: Input should be less than or equal to 100"


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
def test_initialize_advertises_tools_resources_and_prompts(service, version):
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    response = httpx.post(
        f"{service}/mcp", json=rpc("initialize", params), headers={"accept": ACCEPT, **bearer(TEAM_A)}
    )
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    # No subscriptions and no list-changed notifications: the lists never change while the service runs.
    assert set(result["capabilities"]) == {"tools", "resources", "prompts"}
    assert not result["capabilities"]["resources"].get("subscribe")
    for method, key in (("resources/list", "resources"), ("prompts/list", "prompts")):
        served = httpx.post(
            f"{service}/mcp",
            json=rpc(method),
            headers={"accept": ACCEPT, "mcp-protocol-version": version, **bearer(TEAM_A)},
        )
        assert served.json()["result"][key], method  # kbsearch.mcp.resources; tests/searchsvc/mcp/test_mcp_resources.py


async def test_the_sdk_client_sees_tools_resources_and_prompts_on_the_current_revision(service):
    async with mcp_client(service, TEAM_A) as client:
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.resources is not None and capabilities.prompts is not None


async def test_ask_knowledge_reports_progress_to_a_client_that_asks_for_it(service):
    reported: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        reported.append((done, message))

    async with mcp_client(service, TEAM_A) as client:
        result = await client.call_tool("ask_knowledge", {"question": "delta epsilon zeta"}, progress_callback=progress)
    assert not result.is_error, text_of(result)
    assert result.structured_content["answer"]
    messages = [m for _, m in reported]
    assert messages[0] == "answering" and any(m and m.startswith("searched ") for m in messages)
    assert [n for n, _ in reported] == sorted(n for n, _ in reported)  # progress only grows


def test_a_call_without_a_progress_token_is_answered_as_json(service):
    call_ask = rpc("tools/call", {"name": "ask_knowledge", "arguments": {"question": "delta"}})
    response = httpx.post(f"{service}/mcp", json=call_ask, headers={"accept": ACCEPT, **bearer(TEAM_A)})
    assert response.headers["content-type"].startswith("application/json")
    call_ask["params"]["_meta"] = {"progressToken": "p1"}
    streamed = httpx.post(f"{service}/mcp", json=call_ask, headers={"accept": ACCEPT, **bearer(TEAM_A)})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert '"method":"notifications/progress"' in streamed.text.replace(" ", "")
    assert '"progressToken":"p1"' in streamed.text.replace(" ", "")


def test_mcp_requests_are_counted_under_their_own_route(service):
    post_mcp(service, TEAM_A)
    metrics = httpx.get(METRICS_URLS[service]).text
    counted = [line for line in metrics.splitlines() if line.startswith("searchsvc_http_requests_total{")]
    assert any('route="/mcp"' in line and 'method="POST"' in line for line in counted), counted


# --- list_documents ------------------------------------------------------------------------------


async def test_list_documents_pages_a_source_as_rest_does_and_hides_other_teams(service):
    async with mcp_client(service, TEAM_A) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["list_documents"].input_schema["required"] == ["source"]
        assert set(tools["list_documents"].input_schema["properties"]) == {"source", "prefix", "cursor", "limit"}
        assert {"sourceIdentifier", "documents", "nextCursor"} <= set(
            tools["list_documents"].output_schema["properties"]
        )
        first = await client.call_tool("list_documents", {"source": "team-a/docs", "limit": 2})
        assert not first.is_error, text_of(first)
        cursor = first.structured_content["nextCursor"]
        assert len(first.structured_content["documents"]) == 2 and cursor
        assert text_of(first).startswith("2 documents of team-a/docs (more: cursor=")
        rest_page = await client.call_tool("list_documents", {"source": "team-a/docs", "limit": 2, "cursor": cursor})
        uris = [d["uri"] for d in first.structured_content["documents"] + rest_page.structured_content["documents"]]
        assert sorted(uris) == sorted(A_DOCS) and rest_page.structured_content["nextCursor"] is None
        handbook = await client.call_tool("list_documents", {"source": "team-a/handbook", "prefix": LONG})
        [only] = handbook.structured_content["documents"]
        assert only["uri"] == LONG and only["title"] == "The handbook" and f"The handbook — {LONG}" in text_of(handbook)
        outside = await client.call_tool("list_documents", {"source": "team-b/docs"})
        unknown = await client.call_tool("list_documents", {"source": "team-z/docs"})
        assert outside.is_error and unknown.is_error
        assert text_of(outside).replace("team-b/docs", "X") == text_of(unknown).replace("team-z/docs", "X")
        assert text_of(outside).startswith("SOURCE_NOT_FOUND: ")
        assert_no_b(text_of(outside).replace("team-b/docs", "X"))
        bad = await client.call_tool("list_documents", {"source": "team-a/docs", "limit": 0})
        assert bad.is_error and "limit" in text_of(bad)
    async with httpx.AsyncClient() as http:
        rest = await http.get(
            f"{service}/api/v1/sources/team-a%2Fdocs/documents", params={"limit": 2}, headers=bearer(TEAM_A)
        )
    assert rest.json() == first.structured_content  # the same records and cursor as REST's
