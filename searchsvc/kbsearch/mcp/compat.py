"""Compatibility tools, each off by default: dot-ai's manageKnowledge and OpenAI connectors' search/fetch.

manageKnowledge keeps dot-ai's tool name, argument names and answer shapes, so its users switch by
changing a URL. What differs: a search is hybrid (dense + BM25), `uriFilter` is a URI prefix (dot-ai
matched it exactly, so an exact URI still finds its own document), and failures are tool errors
(`isError`) rather than `success: false` inside a successful answer. `interaction_id` is accepted
and ignored, as dot-ai documents it "internal only".

OpenAI's connectors (ChatGPT deep research, the Responses API) call `search(query)` and then
`fetch(id)`, and parse the JSON in the text content, so these two answer with one text item holding
the JSON object their documentation describes (no second structured copy). An id is a document URI:
search returns each document once, at its best chunk, and fetch returns its whole text.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from kbsearch.mcp.context import not_found, tool_context, tool_errors, tool_result
from kbsearch.mcp.models import DotAiChunk, DotAiResult
from kbsearch.mcp.tools import run_search
from kbsearch.models import chunk_point_id
from kbsearch.schemas import PutDocumentRequest

DOTAI_DEFAULT_LIMIT = 10
# Chunks an OpenAI `search` reads to find up to OPENAI_DOCUMENTS distinct documents.
OPENAI_CHUNKS = 30
OPENAI_DOCUMENTS = 10


def _required(value: str | None, name: str, operation: str) -> str:
    if not value:
        raise ToolError(f"INVALID_ARGUMENT: {name} is required for the {operation} operation")
    return value


async def manage_knowledge(
    ctx: Context,
    operation: Annotated[
        Literal["ingest", "search", "deleteByUri"],
        Field(description='"ingest" adds a document, "search" finds chunks, "deleteByUri" removes a document.'),
    ],
    content: Annotated[str | None, Field(description="Document content (ingest).")] = None,
    uri: Annotated[str | None, Field(description="Full URL identifying the document (ingest, deleteByUri).")] = None,
    metadata: Annotated[dict[str, Any] | None, Field(description="Metadata stored with the document (ingest).")] = None,
    query: Annotated[str | None, Field(description="Natural language search query (search).")] = None,
    limit: Annotated[int | None, Field(description="Results to return for search, 1-100 (default 10).")] = None,
    uriFilter: Annotated[str | None, Field(description="Only documents whose URI starts with this (search).")] = None,
    interaction_id: Annotated[str | None, Field(description="INTERNAL ONLY - Do not populate.")] = None,
) -> Annotated[CallToolResult, DotAiResult]:
    """Manage the knowledge base: ingest documents, search with natural language, or delete chunks. Use "ingest"
    to store organizational documentation, "search" to find relevant content, or "deleteByUri" to remove all
    chunks for a document.
    """
    tools = tool_context(ctx)
    if operation == "search":
        text = _required(query, "query", operation)
        response = await run_search(tools, text, DOTAI_DEFAULT_LIMIT if limit is None else limit, uri_prefix=uriFilter)
        chunks = [
            DotAiChunk(
                id=r.id,
                content=r.content,
                score=r.score,
                matchType="hybrid",
                uri=r.uri,
                metadata=r.metadata,
                chunkIndex=r.chunkIndex,
                totalChunks=r.totalChunks,
            )
            for r in response.results
        ]
        message = f"Found {len(chunks)} matching chunks" if chunks else "No matching documents found"
        found = DotAiResult(operation="search", message=message, chunks=chunks, totalMatches=len(chunks), query=text)
        return tool_result(_text(found), found)
    target = _required(uri, "uri", operation)
    with tool_errors():
        if operation == "ingest":
            request = PutDocumentRequest(
                uri=target, content=_required(content, "content", operation), metadata=metadata or {}
            )
            put = await tools.documents.put(request, tools.caller)
            result = DotAiResult(
                operation="ingest",
                message=f"Document {put.status}: {put.chunks} chunks",
                uri=target,
                chunksCreated=put.chunks,
                chunkIds=[chunk_point_id(target, i) for i in range(put.chunks)],
            )
        else:
            deleted = await tools.documents.delete(target, None, tools.caller)
            message = (
                f"Deleted {deleted} chunks for URI" if deleted else "No chunks found for URI (or not visible to you)"
            )
            result = DotAiResult(operation="deleteByUri", message=message, uri=target, chunksDeleted=deleted)
    return tool_result(_text(result), result)


def _text(result: DotAiResult) -> str:
    if result.chunks is None:
        return f"{result.operation}: {result.message} ({result.uri})"
    lines = [
        f"[{n}] {c.uri} #{c.chunkIndex} (score {c.score:.3f})\n{c.content}" for n, c in enumerate(result.chunks, 1)
    ]
    return "\n\n".join(lines) if lines else result.message


def _json_result(payload: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))])


async def search(
    ctx: Context, query: Annotated[str, Field(description="What to look for, in natural language or keywords.")]
) -> CallToolResult:
    """Search the knowledge base. Returns documents (id, title, url); read one with fetch(id)."""
    response = await run_search(tool_context(ctx), query, OPENAI_CHUNKS)
    results: dict[str, dict[str, str]] = {}
    for hit in response.results:
        if hit.uri not in results and len(results) < OPENAI_DOCUMENTS:
            results[hit.uri] = {"id": hit.uri, "title": hit.title or hit.uri, "url": hit.uri}
    return _json_result({"results": list(results.values())})


async def fetch(
    ctx: Context, id: Annotated[str, Field(description="A document id from search (its URI).")]
) -> CallToolResult:
    """Read a whole document found by search: its id, title, text, url and metadata."""
    tools = tool_context(ctx)
    with tool_errors():
        found = await tools.documents.text(id, tools.caller)
    if found is None:
        raise not_found(id)
    record, body = found
    metadata = {**record.metadata, "checksum": record.checksum, "ingestedAt": record.ingested_at}
    return _json_result({"id": id, "title": record.title or id, "text": body, "url": id, "metadata": metadata})
