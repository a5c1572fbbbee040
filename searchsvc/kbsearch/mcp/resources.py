"""MCP resources and prompts: the sources as one resource, each document through a template, one prompt.

Resources are read with the caller's scope, exactly as the tools are (kbsearch.mcp.context):
`kb://sources` is list_sources' own body, and `kb://documents/{+uri}` reads a document through
the service method fetch_document uses, so a document outside the caller's scope is "not found",
in the same words as one that does not exist. The document's URI is the template's one variable,
in reserved expansion (`{+uri}`): its `:` and `/` stay as they are, anything else outside the URI
alphabet (`?`, `#`, `%`, a space) is percent-encoded, and the SDK decodes it once before the lookup.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.server.mcpserver.resources import Resource, ResourceSecurity
from pydantic import Field

from kbsearch.mcp.context import not_found, tool_context, tool_errors
from kbsearch.mcp.tools import sources_overview
from kbsearch.schemas.ask import MAX_QUESTION_CHARS

SOURCES_URI = "kb://sources"
DOCUMENT_TEMPLATE = "kb://documents/{+uri}"
JSON = "application/json"
# A document's body as stored: the text every format was converted to (markdown for most).
DOCUMENT_MIME = "text/markdown"


@contextmanager
def resource_errors() -> Iterator[None]:
    """A tool-style failure (`CODE: message`) as a resource error: the SDK passes its words on (-32603)."""
    try:
        yield
    except ToolError as exc:
        raise ResourceError(str(exc)) from None


class CallerResource(Resource):
    """A fixed resource whose content depends on who reads it.

    The SDK reads a fixed resource without the request's context, so KnowledgeServer.read_resource
    reads this one through `read_for` (kbsearch.mcp.server); `read` is never reached on /mcp.
    """

    reader: Callable[[Context[Any, Any]], Awaitable[str]] = Field(exclude=True)

    async def read(self) -> str:
        raise ResourceError("UNAUTHENTICATED: this resource is read only behind the service's /mcp endpoint")

    async def read_for(self, ctx: Context[Any, Any]) -> str:
        return await self.reader(ctx)


async def sources_json(ctx: Context[Any, Any]) -> str:
    """list_sources' structured answer, as JSON: the sources the caller may read."""
    with resource_errors():
        overview = await sources_overview(tool_context(ctx))
    return json.dumps(overview.model_dump(mode="json", by_alias=True), ensure_ascii=False)


async def read_document(uri: str, ctx: Context[Any, Any]) -> str:
    """A document's whole text (ingest caps a document at 1 MiB, so this is bounded)."""
    with resource_errors():
        tools = tool_context(ctx)
        with tool_errors():
            found = await tools.app.document_reads.text(uri, tools.caller)
    if found is None:
        # Unknown and out of scope read alike; -32602, as for a URI no resource matches.
        raise ResourceNotFoundError(str(not_found(uri)))
    return found[1]


def answer_with_citations(
    question: Annotated[
        str,
        Field(
            description=f"The question, in plain words (1-{MAX_QUESTION_CHARS} characters).",
            min_length=1,
            max_length=MAX_QUESTION_CHARS,
        ),
    ],
) -> list[Message]:
    """Answer a question from the knowledge base, citing the documents' URIs."""
    return [
        UserMessage(
            "Answer the question below from the knowledge base only.\n"
            "1. Call resolve_sources once with the product or source name and the task, to learn which "
            "sources and versions fit.\n"
            "2. Call search_knowledge with the question, passing the sources and version it suggested; read "
            "more around a hit with get_chunk_context or the whole document with fetch_document.\n"
            "3. Answer in your own words, and cite every statement with the URI of the document it comes "
            "from (as search results give it). If nothing relevant is found, say so and cite nothing.\n\n"
            f"Question: {question}"
        )
    ]


def register(server: MCPServer) -> None:
    """Add the resources, the document template and the prompt to `server`."""
    server.add_resource(
        CallerResource(
            uri=SOURCES_URI,
            name="sources",
            title="Sources",
            description="The sources you may read, with their document and chunk counts, last sync and versions "
            "(list_sources' answer).",
            mime_type=JSON,
            reader=sources_json,
        )
    )
    # The URI names a stored document, never a file: `..` or a leading `/` in it is no path to guard.
    server.resource(
        DOCUMENT_TEMPLATE,
        name="document",
        title="A document",
        description="A document's full text, by its URI as search results give it (percent-encode ?, # and %).",
        mime_type=DOCUMENT_MIME,
        security=ResourceSecurity(exempt_params={"uri"}),
    )(read_document)
    server.add_prompt(Prompt.from_function(answer_with_citations, title="Answer with citations"))
