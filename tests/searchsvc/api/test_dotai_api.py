"""dot-ai's REST routes (SEARCHSVC_DOTAI_API), replaying the requests dot-ai's own programs send.

Where each request and answer shape comes from (public sources, read at these commits):

- vfarcic/dot-ai-controller internal/controller/gitknowledgesource_controller.go
  @ 92fb6a7d71416093db77486d7ef15fe65e7ed497:
  the endpoint is the server URL + `/api/v1/tools/manageKnowledge`.
- vfarcic/dot-ai-controller internal/controller/gitknowledgesource_mcp.go @ 92fb6a7d71416093db77486d7ef15fe65e7ed497:
  `IngestRequest {operation, uri, content, metadata,omitempty}`, `DeleteRequest {operation, uri}`,
  POSTed with `Content-Type: application/json` and `Authorization: Bearer`; an answer is decoded for
  a top-level `success`, and any HTTP status >= 400 is an error.
- vfarcic/dot-ai-controller internal/controller/gitknowledgesource_mcp_test.go
  @ 3733a19c7d0e46249e46bf7ac8af7573b4ce78ac:
  `DELETE /api/v1/knowledge/source/default%2Fplatform-docs` (the `/` escaped), answered
  `{"success": true, "data": {"sourceIdentifier", "chunksDeleted"}}`.
- vfarcic/dot-ai src/interfaces/rest-api.ts @ 211cf47b5a2bbdae3ff93dd02e85fd31ef1bdadc: a tool's answer is
  `{"success": true, "data": {"result", "tool", "executionTime"}, "meta": {"timestamp", "requestId", "version"}}`
  and a failure `{"success": false, "error": {"code", "message"}, "meta"}`.
- vfarcic/dot-ai src/interfaces/schemas/knowledge.ts @ 2956ebf23ffd4ed1558cd7734092194c3e247f59 and
  schemas/common.ts @ f89b7ff9642518bf5b41ba27cd0dd438da32c62c: DeleteBySourceData and the envelope.
- vfarcic/dot-ai-ui src/api/knowledge.ts @ af17ff04ae0f287ce5f94d4b49e81bcd5e407ae9: `POST /api/v1/knowledge/ask`
  with `{"query", "limit"?, "uriFilter"?}`, read as `data.answer`, `data.sources[] {uri, title}`,
  `data.chunks[] {content, uri, score, chunkIndex}`, and `error.message`/`error.code` on failure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.scoped_access import (
    A_DOCS,
    A_WRITER,
    ADMIN,
    B_DOCS,
    B_WORD,
    TEAM_A,
    TOKENS,
    bearer,
    content,
)
from tests.support.service import running_service

MANAGE = "/api/v1/tools/manageKnowledge"
PLATFORM = "team-a/platform-docs"
PLATFORM_DOCS = {
    "https://github.com/acme/platform/blob/main/docs/guide.md": "# Guide\n\nThe quorum gauge measures replicas.",
    "https://github.com/acme/platform/blob/main/docs/ops.md": "# Ops\n\nRestart the quorum gauge after upgrades.",
}


def go_client(token: str) -> dict[str, str]:
    """The headers Go's net/http client sends for the controller's POST (gitknowledgesource_mcp.go)."""
    return {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        "User-Agent": "Go-http-client/1.1",
        "Accept-Encoding": "gzip",
    }


def go_json(value: dict[str, Any]) -> bytes:
    # encoding/json writes struct fields in declaration order, without spaces; map keys sorted.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def assert_no_nulls(value: object, where: str = "body") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert item is not None, f"{where}.{key} is null"
            assert_no_nulls(item, f"{where}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            assert_no_nulls(item, f"{where}[{n}]")


def assert_meta(body: dict[str, Any]) -> None:
    assert body["meta"]["version"] == "v1" and body["meta"]["timestamp"].endswith("Z")


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    async with running_service("edge", tmp_path / "data", tokens_file=tokens, dotai_api=True) as client:
        for uri, source in {**A_DOCS, **B_DOCS}.items():
            body = {"uri": uri, "content": content(uri, source), "metadata": {"sourceIdentifier": source}}
            response = await client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))
            assert response.status_code == 200, response.text
        yield client


async def ingest(client: httpx.AsyncClient, token: str, uri: str, text: str, metadata: dict[str, str] | None):
    request: dict[str, Any] = {"operation": "ingest", "uri": uri, "content": text}
    if metadata:  # `metadata,omitempty`: a nil map is not sent at all
        request["metadata"] = metadata
    return await client.post(MANAGE, content=go_json(request), headers=go_client(token))


async def test_the_controllers_ingest_and_delete_by_uri_work_unchanged(client):
    uri = next(iter(PLATFORM_DOCS))
    metadata = {"sourceIdentifier": PLATFORM, "team": "a"}
    response = await ingest(client, A_WRITER, uri, PLATFORM_DOCS[uri], metadata)
    assert response.status_code == 200, response.text
    body = response.json()
    assert_no_nulls(body)
    assert_meta(body)
    assert body["success"] is True and body["data"]["tool"] == "manageKnowledge"
    assert isinstance(body["data"]["executionTime"], int)
    result = body["data"]["result"]
    assert result["success"] is True and result["operation"] == "ingest" and result["uri"] == uri
    assert result["chunksCreated"] == len(result["chunkIds"]) >= 1
    stored = (await client.get("/api/v1/documents", params={"uriPrefix": uri}, headers=bearer(ADMIN))).json()
    assert [(d["uri"], d["metadata"]["sourceIdentifier"]) for d in stored["documents"]] == [(uri, PLATFORM)]

    response = await client.post(
        MANAGE, content=go_json({"operation": "deleteByUri", "uri": uri}), headers=go_client(A_WRITER)
    )
    assert response.status_code == 200, response.text
    deleted = response.json()["data"]["result"]
    assert deleted == {
        "success": True,
        "operation": "deleteByUri",
        "message": f"Deleted {result['chunksCreated']} chunks for URI",
        "uri": uri,
        "chunksDeleted": result["chunksCreated"],
    }
    # Deleting what is gone succeeds with 0, as the controller's idempotent delete expects.
    again = await client.post(
        MANAGE, content=go_json({"operation": "deleteByUri", "uri": uri}), headers=go_client(A_WRITER)
    )
    assert again.status_code == 200 and again.json()["data"]["result"]["chunksDeleted"] == 0


async def test_manage_knowledge_search_reads_within_the_callers_scope(client):
    response = await client.post(
        MANAGE, json={"operation": "search", "query": f"{B_WORD} secrets", "limit": 5}, headers=bearer(TEAM_A)
    )
    assert response.status_code == 200, response.text
    result = response.json()["data"]["result"]
    assert result["operation"] == "search" and result["totalMatches"] == len(result["chunks"])
    assert result["chunks"] and {c["uri"] for c in result["chunks"]} <= set(A_DOCS)
    assert_no_nulls(result)


async def test_a_read_only_token_may_not_ingest_and_gets_dot_ais_error_envelope(client):
    uri = next(iter(PLATFORM_DOCS))
    response = await ingest(client, TEAM_A, uri, PLATFORM_DOCS[uri], {"sourceIdentifier": PLATFORM})
    assert response.status_code == 403
    body = response.json()
    assert body["success"] is False and body["error"]["code"] == "FORBIDDEN" and body["error"]["message"]
    assert_meta(body)
    # A writer of team a may not write into team b's source either.
    response = await ingest(client, A_WRITER, "https://git.example/b/new.md", "# New", {"sourceIdentifier": "team-b/x"})
    assert response.status_code == 403 and response.json()["success"] is False


@pytest.mark.parametrize(
    ("request_body", "problem"),
    [
        ({"operation": "purge", "uri": "https://x/a.md"}, "operation must be one of ingest, search, deleteByUri"),
        ({"operation": "ingest", "uri": "https://x/a.md"}, "content is required for the ingest operation"),
        ({"operation": "deleteByUri"}, "uri is required for the deleteByUri operation"),
        ({"operation": "search", "query": "x", "limit": 0}, "limit:"),
        ({"uri": "https://x/a.md"}, "operation: Field required"),
    ],
)
async def test_refused_arguments_are_400_invalid_argument_naming_the_problem(client, request_body, problem):
    response = await client.post(MANAGE, json=request_body, headers=bearer(A_WRITER))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and problem in error["message"]


async def test_the_controllers_delete_by_source_with_an_escaped_slash(client):
    chunks = 0
    for uri, text in PLATFORM_DOCS.items():
        response = await ingest(client, A_WRITER, uri, text, {"sourceIdentifier": PLATFORM})
        chunks += response.json()["data"]["result"]["chunksCreated"]
    path = "/api/v1/knowledge/source/team-a%2Fplatform-docs"
    reader = await client.delete(path, headers=go_client(TEAM_A))
    assert reader.status_code == 403
    response = await client.delete(path, headers=go_client(A_WRITER))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True and body["data"] == {"sourceIdentifier": PLATFORM, "chunksDeleted": chunks}
    assert_meta(body)
    sources = (await client.get("/api/v1/sources", headers=bearer(ADMIN))).json()["sources"]
    assert PLATFORM not in {s["sourceIdentifier"] for s in sources}
    again = await client.delete(path, headers=go_client(A_WRITER))
    assert again.json()["data"] == {"sourceIdentifier": PLATFORM, "chunksDeleted": 0}
    other = await client.delete("/api/v1/knowledge/source/team-b%2Fdocs", headers=go_client(A_WRITER))
    assert other.status_code == 403 and other.json()["success"] is False


async def test_the_uis_ask_gets_an_answer_its_sources_and_chunks(client):
    headers = {"Content-Type": "application/json", "Accept": "application/json", **bearer(TEAM_A)}
    response = await client.post(
        "/api/v1/knowledge/ask", content=json.dumps({"query": "shared words about deploys"}), headers=headers
    )
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["answer"] and data["sources"] and data["chunks"]
    assert {s["uri"] for s in data["sources"]} <= set(A_DOCS)
    assert all(set(s) == {"uri", "title"} for s in data["sources"])
    assert all(set(c) == {"content", "uri", "score", "chunkIndex"} for c in data["chunks"])
    assert {c["uri"] for c in data["chunks"]} <= set(A_DOCS) and B_WORD not in json.dumps(data)
    scores = [c["score"] for c in data["chunks"]]
    assert scores == sorted(scores, reverse=True)
    assert all("shared words about deploys" in c["content"] for c in data["chunks"])  # the stored chunks' text

    only = "https://git.example/a/doc1.md"
    response = await client.post(
        "/api/v1/knowledge/ask",
        json={"query": "shared words about deploys", "limit": 1, "uriFilter": only},
        headers=headers,
    )
    data = response.json()["data"]
    assert len(data["chunks"]) == 1 and data["chunks"][0]["uri"] == only
    assert {s["uri"] for s in data["sources"]} <= {only}


async def test_the_uis_ask_refusals_carry_a_code_and_message(client):
    response = await client.post("/api/v1/knowledge/ask", json={"limit": 3}, headers=bearer(TEAM_A))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "INVALID_REQUEST" and "query" in error["message"]
    unauthenticated = await client.post("/api/v1/knowledge/ask", json={"query": "deploys"})
    assert unauthenticated.status_code == 401 and unauthenticated.json()["error"]["message"]


async def test_the_routes_are_absent_unless_switched_on(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        for method, path in [
            ("POST", MANAGE),
            ("DELETE", "/api/v1/knowledge/source/a%2Fb"),
            ("POST", "/api/v1/knowledge/ask"),
        ]:
            response = await client.request(method, path, json={"operation": "search", "query": "x"})
            assert response.status_code == 404, (method, path)


async def test_every_face_reports_the_same_calibrated_relevance_for_a_query(client):
    """REST search, ask, dot-ai's manageKnowledge search and its UI's ask: one relevance in [0, 1].

    dot-ai's UI shows `score` as a percentage; the fusion's score (above 1 under DBSF with full
    scores) showed as "149%".
    """
    query = "shared words about deploys part1"
    search = await client.post("/api/v1/search", json={"query": query, "limit": 5}, headers=bearer(TEAM_A))
    results = search.json()["results"]
    relevance = {r["id"]: r["relevance"] for r in results}
    assert results and all(0.0 <= r <= 1.0 for r in relevance.values())
    assert any(r["score"] != r["relevance"] for r in results)  # the two differ: the test can tell them apart

    manage = await client.post(MANAGE, json={"operation": "search", "query": query, "limit": 5}, headers=bearer(TEAM_A))
    chunks = manage.json()["data"]["result"]["chunks"]
    assert {c["id"]: c["score"] for c in chunks} == relevance

    # The ask's search event lists every chunk it retrieved (the final answer leaves cited ones out).
    streamed = await client.post("/api/v1/ask", json={"question": query, "stream": True}, headers=bearer(TEAM_A))
    frames = [json.loads(line[len("data: ") :]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    asked = {s["id"]: s["relevance"] for frame in frames for s in frame.get("sources", [])}
    assert asked and all(0.0 <= r <= 1.0 and relevance.get(i, r) == r for i, r in asked.items())

    ui = (await client.post("/api/v1/knowledge/ask", json={"query": query}, headers=bearer(TEAM_A))).json()["data"]
    scores = [c["score"] for c in ui["chunks"]]
    assert scores and all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    # A page's relevance is its best chunk's; the ask also reads other chunks of its first page.
    shown = {(r["uri"], r["chunkIndex"]): r["relevance"] for r in results}
    page = {r["uri"]: r["relevance"] for r in results}
    for chunk in ui["chunks"]:
        assert shown.get((chunk["uri"], chunk["chunkIndex"]), chunk["score"]) == chunk["score"]
        assert chunk["score"] <= page.get(chunk["uri"], 1.0)
