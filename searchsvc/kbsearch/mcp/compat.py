"""Compatibility tools, each off by default: dot-ai's manageKnowledge and OpenAI connectors' search/fetch.

manageKnowledge keeps dot-ai's tool name, argument names and answer shapes, so its users switch by
changing a URL; it runs the same code as the REST route dot-ai's controller calls (kbsearch.dotai).
A field an operation does not have is left out, never null. What differs: a search is hybrid
(dense + BM25), `uriFilter` is a URI prefix (dot-ai matched it exactly, so an exact URI still finds
its own document), and failures are tool errors (`isError`, `INVALID_ARGUMENT: …`) rather than
`success: false` inside a successful answer. `interaction_id` is accepted and ignored, as dot-ai
documents it "internal only". It is listed only to callers that may write (it can ingest and delete).

OpenAI's connectors (ChatGPT deep research, the Responses API) call `search(query)` and then
`fetch(id)`, and parse the JSON in the text content, so these two answer with one text item holding
the JSON object their documentation describes (no second structured copy). An id is a document URI:
search returns each document once, at its best chunk, and fetch returns its whole text.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from kbsearch import dotai
from kbsearch.dotai import OPERATIONS, DotAiResult, ManageKnowledgeArguments
from kbsearch.mcp.context import not_found, tool_context, tool_errors
from kbsearch.mcp.tools import run_search

# Chunks an OpenAI `search` reads to find up to OPENAI_DOCUMENTS distinct documents.
OPENAI_CHUNKS = 30
OPENAI_DOCUMENTS = 10


async def manage_knowledge(
    ctx: Context,
    operation: Annotated[
        str,
        Field(
            description='"ingest" adds a document, "search" finds chunks, "deleteByUri" removes a document.',
            json_schema_extra={"enum": list(OPERATIONS)},
        ),
    ],
    content: Annotated[str | None, Field(description="Document content (ingest).")] = None,
    uri: Annotated[
        str | None, Field(description="Full URL identifying the document (ingest, deleteByUri).", max_length=2048)
    ] = None,
    metadata: Annotated[dict[str, Any] | None, Field(description="Metadata stored with the document (ingest).")] = None,
    query: Annotated[str | None, Field(description="Natural language search query (search).", max_length=1000)] = None,
    limit: Annotated[
        int | None, Field(description="Results to return for search, 1-100 (default 10).", ge=1, le=100)
    ] = None,
    uriFilter: Annotated[
        str | None, Field(description="Only documents whose URI starts with this (search).", max_length=2048)
    ] = None,
    interaction_id: Annotated[str | None, Field(description="INTERNAL ONLY - Do not populate.")] = None,
) -> Annotated[CallToolResult, DotAiResult]:
    """Manage the knowledge base: ingest documents, search with natural language, or delete chunks. Use "ingest"
    to store organizational documentation, "search" to find relevant content, or "deleteByUri" to remove all
    chunks for a document.
    """
    tools = tool_context(ctx)
    # The operation is checked here, not by the SDK, so an unknown one is named in our words.
    arguments = ManageKnowledgeArguments.model_construct(
        operation=operation,
        content=content,
        uri=uri,
        metadata=metadata,
        query=query,
        limit=limit,
        uri_filter=uriFilter,
        interaction_id=interaction_id,
    )
    with tool_errors():
        result = await dotai.manage_knowledge(
            arguments, search=tools.app.search, documents=tools.app.documents, caller=tools.caller, origin="mcp"
        )
    return CallToolResult(content=[TextContent(type="text", text=_text(result))], structured_content=result.answer())


def _text(result: DotAiResult) -> str:
    if result.chunks is None:
        return f"{result.operation}: {result.message} ({result.uri})"
    lines = [
        f"[{n}] {c.uri} #{c.chunk_index} (score {c.score:.3f})\n{c.content}" for n, c in enumerate(result.chunks, 1)
    ]
    return "\n\n".join(lines) if lines else result.message


def _json_result(payload: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))])


async def search(
    ctx: Context,
    query: Annotated[
        str, Field(description="What to look for, in natural language or keywords.", min_length=1, max_length=1000)
    ],
) -> CallToolResult:
    """Search the knowledge base. Returns documents (id, title, url); read one with fetch(id)."""
    response = await run_search(tool_context(ctx), query, OPENAI_CHUNKS)
    results: dict[str, dict[str, str]] = {}
    for hit in response.results:
        if hit.uri not in results and len(results) < OPENAI_DOCUMENTS:
            results[hit.uri] = {"id": hit.uri, "title": hit.title or hit.uri, "url": hit.uri}
    return _json_result({"results": list(results.values())})


async def fetch(
    ctx: Context,
    id: Annotated[str, Field(description="A document id from search (its URI).", min_length=1, max_length=2048)],
) -> CallToolResult:
    """Read a whole document found by search: its id, title, text, url and metadata."""
    tools = tool_context(ctx)
    with tool_errors():
        found = await tools.app.document_reads.text(id, tools.caller)
    if found is None:
        raise not_found(id)
    record, body = found
    metadata = {**record.metadata, "checksum": record.checksum, "ingestedAt": record.ingested_at}
    return _json_result({"id": id, "title": record.title or id, "text": body, "url": id, "metadata": metadata})
