"""The MCP SDK's own client over streamable HTTP, with a bearer token (and any Host header) on every request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

# What a streamable-HTTP client must accept; the service answers JSON.
ACCEPT = "application/json, text/event-stream"
# The service's own read tools (the write tools and the compatibility ones aside).
CORE_READ_TOOLS = {
    "search_knowledge",
    "fetch_document",
    "get_chunk_context",
    "list_sources",
    "list_documents",
    "resolve_sources",
    "ask_knowledge",
}


@asynccontextmanager
async def mcp_client(base_url: str, token: str | None = None, *, host: str | None = None) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if host:
        headers["host"] = host
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http), cache=None) as client,
    ):
        yield client


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def everything(result: CallToolResult) -> str:
    """All an agent receives from one call, as one string (for leak checks)."""
    return text_of(result) + json.dumps(result.structured_content or {})


def rpc(method: str, params: dict | None = None, request_id: int = 1) -> dict:
    """A JSON-RPC request for a raw POST /mcp (stateless mode needs no initialize first)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
