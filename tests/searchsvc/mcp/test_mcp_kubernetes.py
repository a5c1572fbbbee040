"""MCP in Kubernetes mode: the same TokenReview identities and scope as REST, and a 503 stays a 503.

The app runs in-process (the kmock API server answers the reviews, as in test_kubernetes_access; both
read tests/support/kubernetes_mode.py); the requests are raw JSON-RPC POSTs to /mcp, which stateless
mode serves without a handshake.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from tests.support.kube_reviews import jwt_token
from tests.support.kubernetes_mode import (
    AGENT_A,
    B_WORD,
    STRANGER,
    WRITER,
    bearer,
    kubernetes_service,
)
from tests.support.mcpclient import ACCEPT, rpc

HEADERS = {"accept": ACCEPT, "host": "127.0.0.1:8000"}


async def call_tool(client: httpx.AsyncClient, token: str, name: str, **arguments) -> httpx.Response:
    body = rpc("tools/call", {"name": name, "arguments": arguments})
    return await client.post("/mcp", json=body, headers=HEADERS | bearer(token))


async def tool_names(client: httpx.AsyncClient, token: str) -> set[str]:
    response = await client.post("/mcp", json=rpc("tools/list"), headers=HEADERS | bearer(token))
    assert response.status_code == 200, response.text
    return {tool["name"] for tool in response.json()["result"]["tools"]}


async def test_kubernetes_identities_get_their_scope_and_their_tools(reviews, kubeconfig, tmp_path):
    async with kubernetes_service(tmp_path / "data") as client:
        response = await call_tool(client, AGENT_A, "list_sources")
        assert response.status_code == 200, response.text
        sources = response.json()["result"]["structuredContent"]["sources"]
        assert [s["sourceIdentifier"] for s in sources] == ["team-a/docs", "team-a/runbooks"]
        response = await call_tool(client, AGENT_A, "search_knowledge", query=f"{B_WORD} plans deploys", limit=100)
        result = response.json()["result"]
        assert not result["isError"] and result["structuredContent"]["results"]
        assert B_WORD not in json.dumps(result["structuredContent"]["results"]) + result["content"][0]["text"]
        stranger = await call_tool(client, STRANGER, "search_knowledge", query="deploys")
        assert stranger.json()["result"]["structuredContent"]["results"] == []
        assert "ingest_document" not in await tool_names(client, AGENT_A)
        assert "ingest_document" in await tool_names(client, WRITER)
        invalid = await call_tool(client, "not-a-kubernetes-token", "list_sources")
        assert invalid.status_code == 401 and invalid.headers["www-authenticate"].startswith("Bearer")


async def test_a_failing_review_api_is_503_on_mcp_never_an_empty_answer(reviews, kubeconfig, tmp_path):
    async with kubernetes_service(tmp_path / "data") as client:
        assert (await call_tool(client, AGENT_A, "list_sources")).status_code == 200
        reviews.failing = True
        deadline = time.monotonic() + 15  # until AGENT_A's cached decisions have expired
        while (response := await call_tool(client, AGENT_A, "list_sources")).status_code == 200:
            assert time.monotonic() < deadline, "a cached allow outlived its lifetime"
            await asyncio.sleep(0.1)
        for token in (AGENT_A, jwt_token("fresh-token")):
            response = await call_tool(client, token, "search_knowledge", query="deploys")
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "AUTH_UNAVAILABLE"
            assert int(response.headers["retry-after"]) >= 1
