"""The knowledge base's MCP tools: thin faces over the search, document and document-read services, as REST is.

Each tool's docstring is the description an agent reads. Every call runs with the caller's scope
(kbsearch.mcp.context), and every search passes origin="mcp" for the query log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager, suppress
from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from kbsearch.errors import InvalidRequestError
from kbsearch.mcp import render
from kbsearch.mcp.context import ToolContext, not_found, tool_context, tool_errors, tool_result
from kbsearch.mcp.models import (
    DEFAULT_FETCH_CHARS,
    MAX_CONTEXT_WINDOW,
    MAX_FETCH_CHARS,
    ChunkContext,
    ContextChunk,
    SourcesOverview,
)
from kbsearch.models import SearchMode
from kbsearch.presenters import put_response, search_response, source_documents, source_list, text_page
from kbsearch.schemas.ask import MAX_QUESTION_CHARS, AskRequest, AskResponse, AskSearchEvent
from kbsearch.schemas.documents import (
    DeleteDocumentResponse,
    DocumentText,
    PutDocumentRequest,
    PutDocumentResponse,
    SourceDocumentList,
)
from kbsearch.schemas.fields import Metadata, SourceIdentifier, Uri
from kbsearch.schemas.search import SearchRequest, SearchResponse
from kbsearch.schemas.system import ErrorResponse
from kbsearch.services.answers.ask import AskEvent
from kbsearch.services.documents.reads import MAX_LIST_LIMIT

MAX_URI_CHARS = 2048  # kbsearch.schemas.fields.Uri
# Seconds without any progress after which a long ask sends one anyway.
PROGRESS_HEARTBEAT_S = 10.0

# SearchRequest's fields, named as the tool's arguments in error messages.
SEARCH_ARGUMENTS = {"filter.sourceIdentifier": "sources", "filter.uriPrefix": "uri_prefix", "filter.version": "version"}
ASK_ARGUMENTS = {"filter.uriPrefix": "uri_prefix", "filter.version": "version"}

# The limits in the input schemas are the REST schemas' (kbsearch.schemas), so a client sees them up front;
# the SDK checks them before a tool runs, and the tools validate with the REST models all the same.
Query = Annotated[
    str,
    Field(
        description="What to look for: a question, a phrase or keywords (1-1000 characters).",
        min_length=1,
        max_length=1000,
    ),
]
Limit = Annotated[
    int, Field(description="How many results to return, 1-100: one per page, its best chunk.", ge=1, le=100)
]
Sources = Annotated[
    list[str] | None,
    Field(description="Only these sources (sourceIdentifier values, e.g. 'team-a/handbook').", max_length=100),
]
UriPrefix = Annotated[
    str | None, Field(description="Only documents whose URI starts with this prefix.", max_length=MAX_URI_CHARS)
]
Mode = Annotated[
    SearchMode,
    Field(
        description="hybrid (default): meaning and keywords fused; dense: meaning only; keyword: BM25 (stemmed); "
        "literal: only chunks holding the query exactly as written, whole words (an error message, a flag "
        "such as --dry-run=server, an identifier), most occurrences first; at most 256 characters."
    ),
]
CaseSensitive = Annotated[bool, Field(description="literal mode only: the case must match too (default false).")]
Version = Annotated[
    str | None,
    Field(
        description="Only this documentation version (e.g. '2.21', or 'source@2.21' for one source's); by default "
        "the newest version of each page. A version none of the sources holds is a VERSION_NOT_FOUND error, "
        "listing those that exist: resolve_sources tells them beforehand.",
        min_length=1,
        max_length=64,
    ),
]
DocumentUri = Annotated[
    str, Field(description="The document's URI, as search results give it.", min_length=1, max_length=MAX_URI_CHARS)
]


async def run_search(
    tools: ToolContext,
    query: str,
    limit: int,
    sources: list[str] | None = None,
    uri_prefix: str | None = None,
    mode: SearchMode = "hybrid",
    version: str | None = None,
    case_sensitive: bool = False,
) -> SearchResponse:
    """One scoped search, validated exactly as REST's POST /api/v1/search validates its body."""
    with tool_errors(SEARCH_ARGUMENTS):
        # The REST body's own model and its one to_command(): validated and translated as REST's are.
        command = SearchRequest(
            query=query,
            limit=limit,
            mode=mode,
            case_sensitive=case_sensitive,
            # The wire keys, so an error names the field as REST's does (SEARCH_ARGUMENTS maps them).
            filter={"sourceIdentifier": sources, "uriPrefix": uri_prefix, "version": version},
        ).to_command()
        outcome = await tools.app.search.search(command, tools.caller, origin="mcp")
    return search_response(command, outcome)


async def search_knowledge(
    ctx: Context,
    query: Query,
    limit: Limit = 10,
    sources: Sources = None,
    uri_prefix: UriPrefix = None,
    mode: Mode = "hybrid",
    version: Version = None,
    case_sensitive: CaseSensitive = False,
) -> Annotated[CallToolResult, SearchResponse]:
    """Search the knowledge base. Each result is one page: its best chunk with its title and heading path,
    URI, relevance (0-1, calibrated, results in its order: below 0.5 most are not about the question) and text,
    the newest version first. Read more around a hit with get_chunk_context, or the whole document with fetch_document.
    Unsure which source or version? Call resolve_sources once first, then pass sources and version.
    """
    response = await run_search(tool_context(ctx), query, limit, sources, uri_prefix, mode, version, case_sensitive)
    return tool_result(render.search_text(response), response)


async def ask_knowledge(
    ctx: Context,
    question: Annotated[str, Field(description=f"The question, in plain words (1-{MAX_QUESTION_CHARS} characters).")],
    sources: Sources = None,
    uri_prefix: UriPrefix = None,
    version: Version = None,
) -> Annotated[CallToolResult, AskResponse]:
    """Answer a question from the knowledge base. The answer cites its sources as [n], and every [n] was
    checked: it points at a chunk retrieved for this question, listed under Citations with its URI and the
    cited sentence. When nothing relevant is found the answer says so and cites nothing. Unsure which source or
    version? Call resolve_sources once first.
    """
    tools = tool_context(ctx)
    with tool_errors(ASK_ARGUMENTS):
        request = AskRequest(question=question, sources=sources, filter={"uriPrefix": uri_prefix, "version": version})
    progress = AskProgress(ctx)
    async with progress.heartbeat(), aclosing(tools.app.ask.stream(request, tools.caller)) as events:
        async for event in events:
            if isinstance(event.data, ErrorResponse):
                raise ToolError(f"{event.data.error.code}: {event.data.error.message}")
            if isinstance(event.data, AskResponse):
                return tool_result(render.ask_text(event.data), event.data)
            await progress.step(event)
    raise ToolError("INTERNAL_ERROR: the answer ended without a result")  # an ask always ends with done or error


class AskProgress:
    """Progress notifications of one ask, when the client sent a progressToken (otherwise the SDK drops them).

    One per search and at most one a second while the answer is written, and a heartbeat every
    PROGRESS_HEARTBEAT_S while nothing else happens (a model slow to start), so a proxy or load
    balancer between agent and service never sees the response stream idle for long.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.count = 0
        self.last = 0.0

    async def report(self, message: str) -> None:
        self.count += 1
        self.last = time.monotonic()
        await self.ctx.report_progress(self.count, None, message)

    async def step(self, event: AskEvent) -> None:
        if isinstance(event.data, AskSearchEvent):
            await self.report(f"searched {event.data.query!r}: {event.data.results} chunks")
        elif time.monotonic() - self.last >= 1.0:
            await self.report("writing the answer")

    @asynccontextmanager
    async def heartbeat(self) -> AsyncIterator[None]:
        async def beat() -> None:
            while True:
                await asyncio.sleep(PROGRESS_HEARTBEAT_S)
                if time.monotonic() - self.last >= PROGRESS_HEARTBEAT_S:
                    await self.report("still answering")

        task = asyncio.create_task(beat(), name="ask-progress")
        try:
            await self.report("answering")
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task


async def fetch_document(
    ctx: Context,
    uri: DocumentUri,
    start: Annotated[int, Field(description="Character offset to start at; 0 is the beginning.", ge=0)] = 0,
    max_chars: Annotated[
        int, Field(description=f"Characters to return, 1-{MAX_FETCH_CHARS}.", ge=1, le=MAX_FETCH_CHARS)
    ] = DEFAULT_FETCH_CHARS,
) -> Annotated[CallToolResult, DocumentText]:
    """Read a document's full text, in order, one page at a time. When nextStart is not null, call again
    with start=nextStart to read on.
    """
    if start < 0:
        raise ToolError(f"INVALID_ARGUMENT: start must be 0 or more, not {start}")
    if not 1 <= max_chars <= MAX_FETCH_CHARS:
        raise ToolError(f"INVALID_ARGUMENT: max_chars must be 1 to {MAX_FETCH_CHARS}, not {max_chars}")
    tools = tool_context(ctx)
    with tool_errors():
        try:
            found = await tools.app.document_reads.page(uri, tools.caller, start, max_chars)
        except InvalidRequestError as exc:  # a start past the end: the tool's own argument, named as such
            raise ToolError(f"INVALID_ARGUMENT: {exc.message}") from None
    if found is None:
        raise not_found(uri)
    page = text_page(found)
    return tool_result(render.document_text(page), page)


async def get_chunk_context(
    ctx: Context,
    uri: DocumentUri,
    chunk_index: Annotated[
        int, Field(description="The chunk's index, as a search result's chunkIndex gives it.", ge=0)
    ],
    window: Annotated[
        int, Field(description=f"Chunks to include on each side, 0-{MAX_CONTEXT_WINDOW}.", ge=0, le=MAX_CONTEXT_WINDOW)
    ] = 2,
) -> Annotated[CallToolResult, ChunkContext]:
    """The chunks around one chunk of a document, in order: the text just before and after a search hit."""
    if chunk_index < 0:
        raise ToolError(f"INVALID_ARGUMENT: chunk_index must be 0 or more, not {chunk_index}")
    if not 0 <= window <= MAX_CONTEXT_WINDOW:
        raise ToolError(f"INVALID_ARGUMENT: window must be 0 to {MAX_CONTEXT_WINDOW}, not {window}")
    tools = tool_context(ctx)
    with tool_errors():
        chunks = await tools.app.document_reads.chunks(
            uri, tools.caller, first=max(0, chunk_index - window), last=chunk_index + window + 1
        )
        if not any(chunk.chunk_index == chunk_index for chunk in chunks):
            record = await tools.app.document_reads.document(uri, tools.caller)
            if record is None:
                raise not_found(uri)
            raise ToolError(
                f"INVALID_ARGUMENT: chunk_index {chunk_index} is out of range: {uri!r} has {record.chunks} chunks"
            )
    first = chunks[0]
    context = ChunkContext(
        uri=first.uri,
        title=first.title,
        source_identifier=first.source_identifier,
        chunk_index=chunk_index,
        total_chunks=first.total_chunks,
        chunks=[
            ContextChunk(chunk_index=c.chunk_index, headings=c.headings, content=c.content, start=c.start, end=c.end)
            for c in chunks
        ],
    )
    return tool_result(render.context_text(context), context)


async def list_sources(ctx: Context) -> Annotated[CallToolResult, SourcesOverview]:
    """The sources you may read, with their document and chunk counts, last sync and versions: what there is."""
    overview = await sources_overview(tool_context(ctx))
    return tool_result(render.sources_text(overview), overview)


async def sources_overview(tools: ToolContext, query: str | None = None) -> SourcesOverview:
    """The sources the caller may read (those fitting `query`, best first): list_sources' and kb://sources' body."""
    with tool_errors():
        listing = await source_list(tools.app.sources, tools.caller, query, origin="mcp")
    return SourcesOverview(
        documents=sum(s.documents for s in listing.sources),
        chunks=sum(s.chunks for s in listing.sources),
        sources=listing.sources,
    )


async def list_documents(
    ctx: Context,
    source: Annotated[SourceIdentifier, Field(description="The source's sourceIdentifier, as list_sources gives it.")],
    prefix: Annotated[Uri | None, Field(description="Only documents whose URI starts with this prefix.")] = None,
    cursor: Annotated[
        str | None, Field(description="The nextCursor of the previous page; omit for the first.", max_length=64)
    ] = None,
    limit: Annotated[int, Field(description=f"Documents per page, 1-{MAX_LIST_LIMIT}.", ge=1, le=MAX_LIST_LIMIT)] = 100,
) -> Annotated[CallToolResult, SourceDocumentList]:
    """The documents of one source: URI, title, last write and version, one page at a time. When nextCursor
    is not null, call again with cursor=nextCursor. Read one with fetch_document.
    """
    tools = tool_context(ctx)
    with tool_errors():
        page = await tools.app.document_reads.source_documents(
            source, tools.caller, prefix=prefix, limit=limit, cursor=cursor
        )
    listing = source_documents(page)
    return tool_result(render.source_documents_text(listing), listing)


async def resolve_sources(
    ctx: Context,
    query: Annotated[
        str,
        Field(
            description="The product or source name and the task, e.g. 'cert-manager 1.16 renew a certificate' "
            "(1-1000 characters).",
            min_length=1,
            max_length=1000,
        ),
    ],
) -> Annotated[CallToolResult, SourcesOverview]:
    """Call first, once per question: which sources (and versions) fit a name and a task, best first, each with
    its documents, last sync, versions present and why it matched. Then search_knowledge or ask_knowledge with
    sources=[sourceIdentifier] and version (or version='source@version'). A few calls per question at most.
    """
    overview = await sources_overview(tool_context(ctx), query)
    return tool_result(render.sources_text(overview), overview)


async def ingest_document(
    ctx: Context,
    uri: Annotated[
        str,
        Field(
            description="The document's URI: where it lives, e.g. its URL in git.",
            min_length=1,
            max_length=MAX_URI_CHARS,
        ),
    ],
    content: Annotated[
        str,
        Field(
            description="The document: its text, or with content_encoding 'base64' its file's bytes base64-encoded "
            "(required for pdf and docx). At most 1 MiB."
        ),
    ],
    metadata: Annotated[
        Metadata | None,
        Field(description="Metadata to store with it; 'sourceIdentifier' names the source it belongs to."),
    ] = None,
    content_type: Annotated[
        str | None,
        Field(
            description="The format: a media type ('application/pdf', 'text/html') or a name ('pdf', 'rst', "
            "'asciidoc', 'mdx', 'ipynb'). By default the URI's extension decides; otherwise markdown.",
            min_length=1,
            max_length=255,
        ),
    ] = None,
    content_encoding: Annotated[
        Literal["utf-8", "base64"],
        Field(description="'base64' when content holds the file's bytes base64-encoded."),
    ] = "utf-8",
) -> Annotated[CallToolResult, PutDocumentResponse]:
    """Store a document, or replace the one stored under the same URI. Markdown, MDX, reStructuredText,
    AsciiDoc, HTML, notebooks, plain text, PDF and Word files are converted to text first. Storing the same
    content and metadata again changes nothing (status 'unchanged').
    """
    tools = tool_context(ctx)
    with tool_errors():
        command = PutDocumentRequest(
            uri=uri,
            content=content,
            metadata=metadata or {},
            content_type=content_type,
            content_encoding=content_encoding,
        ).to_command()
        response = put_response(await tools.app.documents.put(command, tools.caller))
    return tool_result(render.put_text(response), response)


async def delete_document(ctx: Context, uri: DocumentUri) -> Annotated[CallToolResult, DeleteDocumentResponse]:
    """Delete a document and all its chunks."""
    tools = tool_context(ctx)
    with tool_errors():
        if await tools.app.document_reads.document(uri, tools.caller) is None:
            raise not_found(uri)
        response = DeleteDocumentResponse(
            uri=uri, chunks_deleted=await tools.app.documents.delete(uri, None, tools.caller)
        )
    return tool_result(render.delete_text(response), response)
