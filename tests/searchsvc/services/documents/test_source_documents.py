"""GET /api/v1/sources/{id}/documents and MCP's list_documents: one source's documents, page by page.

The real app on both stores, with team-scoped tokens (test_scoped_access's): an unknown source and
another team's answer the same 404 SOURCE_NOT_FOUND, and both faces are thin over
DocumentReads.source_documents.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

from kbsearch.services.documents.reads import DocumentReads
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.scoped_access import A_WRITER, ADMIN, NOBODY, TEAM_A, TOKENS, bearer
from tests.support.service import STORE_KINDS, running_service
from tests.support.sync_reports import report, status_path

A_SOURCE, B_SOURCE = "team-a/docs", "team-b/docs"
A_GUIDES = {f"https://git.example/a/guides/g{i}.md": f"Guide {i}" for i in range(5)}
A_VERSIONED = "https://git.example/a/docs/v1.4/setup.md"
B_URIS = [f"https://git.example/b/doc{i}.md" for i in range(3)]


def path(source: str) -> str:
    return f"/api/v1/sources/{quote(source, safe='')}/documents"


@pytest.fixture(params=STORE_KINDS)
async def service(request, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    async with running_service(request.param, tmp_path / "data", tokens_file=tokens) as client:
        documents = {uri: (A_SOURCE, f"# {title}\n\nHow to do thing {title}.") for uri, title in A_GUIDES.items()}
        documents[A_VERSIONED] = (A_SOURCE, "# Setup 1.4\n\nSet it up.")
        documents |= dict.fromkeys(B_URIS, (B_SOURCE, "# Zebrafish\n\nTeam b's secrets."))
        for uri, (source, text) in documents.items():
            body = {"uri": uri, "content": text, "metadata": {"sourceIdentifier": source}}
            response = await client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))
            assert response.status_code == 200, response.text
        yield client


async def listing(client: httpx.AsyncClient, source: str, token: str, **params: object) -> httpx.Response:
    return await client.get(path(source), params=params, headers=bearer(token))


async def test_a_source_lists_its_documents_with_title_time_and_version(service):
    response = await listing(service, A_SOURCE, TEAM_A)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["sourceIdentifier"] == A_SOURCE and body["nextCursor"] is None
    by_uri = {d["uri"]: d for d in body["documents"]}
    assert set(by_uri) == set(A_GUIDES) | {A_VERSIONED}
    assert {uri: by_uri[uri]["title"] for uri in A_GUIDES} == A_GUIDES
    assert by_uri[A_VERSIONED]["version"] == "1.4" and by_uri[A_VERSIONED]["title"] == "Setup 1.4"
    assert all(by_uri[uri]["version"] is None for uri in A_GUIDES)
    assert all(d["ingestedAt"].endswith("Z") for d in body["documents"])
    assert set(body["documents"][0]) == {"uri", "title", "ingestedAt", "version"}


async def test_a_prefix_narrows_the_listing_and_one_matching_nothing_is_an_empty_page(service):
    body = (await listing(service, A_SOURCE, TEAM_A, prefix="https://git.example/a/docs/")).json()
    assert [d["uri"] for d in body["documents"]] == [A_VERSIONED]
    # Another team's prefix under one's own source: nothing, and nothing of b.
    empty = await listing(service, A_SOURCE, TEAM_A, prefix="https://git.example/b/")
    assert empty.status_code == 200 and empty.json()["documents"] == []


async def test_pages_follow_the_cursor_to_every_document_once(service):
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, object] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        response = await listing(service, A_SOURCE, TEAM_A, **params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body["documents"]) <= 2
        seen += [d["uri"] for d in body["documents"]]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(set(A_GUIDES) | {A_VERSIONED}) and len(seen) == len(set(seen))
    assert pages >= 3
    for limit in (0, 1001):
        assert (await listing(service, A_SOURCE, TEAM_A, limit=limit)).status_code == 422
    bad = await listing(service, A_SOURCE, TEAM_A, cursor="not-a-cursor")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "INVALID_CURSOR"


async def test_unknown_and_out_of_scope_sources_answer_the_same_404(service):
    outside = await listing(service, B_SOURCE, TEAM_A)
    unknown = await listing(service, "team-a/nothing", TEAM_A)
    assert outside.status_code == unknown.status_code == 404
    assert outside.json()["error"]["code"] == unknown.json()["error"]["code"] == "SOURCE_NOT_FOUND"

    def shape(response: httpx.Response, source: str) -> str:
        # The same body but for the name the caller itself sent.
        return json.dumps(response.json()).replace(source, "<source>")

    assert shape(outside, B_SOURCE) == shape(unknown, "team-a/nothing")
    assert "zebrafish" not in outside.text.lower() and "/b/doc" not in outside.text
    # A prefix cannot probe it either, nor can an identity with no sources see its own name's absence apart.
    with_prefix = await listing(service, B_SOURCE, TEAM_A, prefix="https://git.example/b/")
    assert with_prefix.status_code == 404 and shape(with_prefix, B_SOURCE) == shape(outside, B_SOURCE)
    assert (await listing(service, A_SOURCE, NOBODY)).status_code == 404
    # GET /api/v1/documents keeps answering an unknown source with an empty list.
    old = await service.get("/api/v1/documents", params={"sourceIdentifier": B_SOURCE}, headers=bearer(TEAM_A))
    assert old.status_code == 200 and old.json()["documents"] == []


async def test_two_tenants_each_see_only_their_own_source(service):
    a = (await listing(service, A_SOURCE, A_WRITER)).json()
    b = (await listing(service, B_SOURCE, ADMIN)).json()
    assert sorted(d["uri"] for d in b["documents"]) == sorted(B_URIS)
    assert not {d["uri"] for d in a["documents"]} & set(B_URIS)
    assert (await listing(service, B_SOURCE, A_WRITER)).status_code == 404
    # The admin sees team a's source exactly as team a does.
    assert (await listing(service, A_SOURCE, ADMIN)).json() == a


async def test_a_source_known_only_by_its_sync_status_lists_no_documents(service):
    # Its every file failed: GET /api/v1/sources lists it, so it is known here too (an empty page, not 404).
    source = "team-a/failing"
    stored = await service.put(status_path(source), json=report(), headers=bearer(ADMIN))
    assert stored.status_code == 200, stored.text
    response = await listing(service, source, TEAM_A)
    assert response.status_code == 200 and response.json() == {
        "sourceIdentifier": source,
        "documents": [],
        "nextCursor": None,
    }


async def test_rest_and_mcp_both_call_the_one_service_method(service, monkeypatch):
    calls: list[tuple[str, str | None, int, str | None]] = []
    original = DocumentReads.source_documents

    async def recorded(self, source_identifier, caller, *, prefix, limit, cursor):
        calls.append((source_identifier, prefix, limit, cursor))
        return await original(self, source_identifier, caller, prefix=prefix, limit=limit, cursor=cursor)

    monkeypatch.setattr(DocumentReads, "source_documents", recorded)
    prefix = "https://git.example/a/guides/"
    rest = await listing(service, A_SOURCE, TEAM_A, prefix=prefix, limit=3)
    assert rest.status_code == 200, rest.text
    arguments = {"source": A_SOURCE, "prefix": prefix, "limit": 3}
    headers = {"accept": ACCEPT, "host": "127.0.0.1"} | bearer(TEAM_A)
    response = await service.post(
        "/mcp", json=rpc("tools/call", {"name": "list_documents", "arguments": arguments}), headers=headers
    )
    result = response.json()["result"]
    assert not result["isError"], response.text
    assert calls == [(A_SOURCE, prefix, 3, None)] * 2
    assert result["structuredContent"] == rest.json()
    assert len(rest.json()["documents"]) == 3 and rest.json()["nextCursor"]
    # The MCP face reads on with the REST face's cursor: one paging, whichever face asks.
    arguments["cursor"] = rest.json()["nextCursor"]
    response = await service.post(
        "/mcp", json=rpc("tools/call", {"name": "list_documents", "arguments": arguments}), headers=headers
    )
    rest_next = await listing(service, A_SOURCE, TEAM_A, prefix=prefix, limit=3, cursor=arguments["cursor"])
    assert response.json()["result"]["structuredContent"] == rest_next.json()
    assert len(calls) == 4
