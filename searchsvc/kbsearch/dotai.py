"""dot-ai's manageKnowledge: its arguments, its answers, and the one implementation behind both its faces.

REST serves it to dot-ai's controller (kbsearch.api.dotai, with dot-ai's envelopes) and MCP as the
`manageKnowledge` tool (kbsearch.mcp.compat); both run `manage_knowledge` below with the caller's
own scope, so the two answer alike.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from kbsearch.errors import InvalidRequestError
from kbsearch.models import MetadataValue, SearchOrigin, chunk_point_id
from kbsearch.presenters import validation_message
from kbsearch.schemas.documents import PutDocumentRequest
from kbsearch.schemas.fields import Metadata
from kbsearch.schemas.search import SearchRequest
from kbsearch.services.access.scope import Caller
from kbsearch.services.documents.service import DocumentService
from kbsearch.services.search.service import SearchService

OPERATIONS = ("ingest", "search", "deleteByUri")
DEFAULT_LIMIT = 10


class DotAiArgumentError(InvalidRequestError):
    """An argument dot-ai's manageKnowledge refuses (400, `INVALID_ARGUMENT: …` in the MCP tool)."""

    status_code = 400
    code = "INVALID_ARGUMENT"


class _Output(BaseModel):
    # dot-ai's keys are camelCase; the attributes are snake_case, as in kbsearch.schemas.
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", populate_by_name=True)


class DotAiChunk(_Output):
    id: str
    content: str
    score: float
    match_type: Literal["hybrid", "semantic", "keyword"]
    uri: str
    metadata: dict[str, MetadataValue]
    chunk_index: int
    total_chunks: int


class DotAiResult(_Output):
    """dot-ai's manageKnowledge answers, one model for its three operations.

    A field an operation does not have is left out of the answer (dump with exclude_none), as
    dot-ai leaves it out: a strict client's schema allows it absent, never null.
    """

    success: Literal[True] = True
    operation: Literal["ingest", "search", "deleteByUri"]
    message: str
    uri: str | SkipJsonSchema[None] = None
    chunks_created: int | SkipJsonSchema[None] = None
    chunk_ids: list[str] | SkipJsonSchema[None] = None
    chunks: list[DotAiChunk] | SkipJsonSchema[None] = None
    total_matches: int | SkipJsonSchema[None] = None
    query: str | SkipJsonSchema[None] = None
    chunks_deleted: int | SkipJsonSchema[None] = None

    def answer(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ManageKnowledgeArguments(BaseModel):
    """The tool's arguments; dot-ai ignores fields it does not know, and so does this."""

    model_config = ConfigDict(alias_generator=to_camel, extra="ignore", populate_by_name=True)

    operation: StrictStr
    content: StrictStr | None = None
    uri: StrictStr | None = None
    metadata: Metadata | None = None
    query: StrictStr | None = None
    limit: StrictInt | None = None
    uri_filter: StrictStr | None = None
    interaction_id: StrictStr | None = Field(None, alias="interaction_id")  # dot-ai's own spelling


def _required(value: str | None, name: str, operation: str) -> str:
    if not value:
        raise DotAiArgumentError(f"{name} is required for the {operation} operation")
    return value


async def manage_knowledge(
    arguments: ManageKnowledgeArguments,
    *,
    search: SearchService,
    documents: DocumentService,
    caller: Caller,
    origin: SearchOrigin,
) -> DotAiResult:
    """One manageKnowledge call; a refused argument raises DotAiArgumentError, a service failure its error."""
    operation = arguments.operation
    if operation == "search":
        text = _required(arguments.query, "query", operation)
        try:
            request = SearchRequest(
                query=text,
                limit=DEFAULT_LIMIT if arguments.limit is None else arguments.limit,
                filter={"uriPrefix": arguments.uri_filter},
            ).to_command()
        except ValidationError as exc:
            raise DotAiArgumentError(validation_message(exc, {"filter.uriPrefix": "uriFilter"}, style="all")) from None
        outcome = await search.search(request, caller, origin=origin)
        chunks = [
            DotAiChunk(
                id=h.id,
                content=h.content,
                score=h.relevance or 0.0,  # calibrated [0, 1]: dot-ai shows it as a percentage
                match_type="hybrid",
                uri=h.uri,
                metadata=h.metadata,
                chunk_index=h.chunk_index,
                total_chunks=h.total_chunks,
            )
            for h in outcome.hits
        ]
        message = f"Found {len(chunks)} matching chunks" if chunks else "No matching documents found"
        return DotAiResult(operation="search", message=message, chunks=chunks, total_matches=len(chunks), query=text)
    if operation not in OPERATIONS:
        raise DotAiArgumentError(f"operation must be one of {', '.join(OPERATIONS)}, not {operation!r}")
    target = _required(arguments.uri, "uri", operation)
    if operation == "ingest":
        content = _required(arguments.content, "content", operation)
        try:
            put_body = PutDocumentRequest(uri=target, content=content, metadata=arguments.metadata or {})
        except ValidationError as exc:
            raise DotAiArgumentError(validation_message(exc, style="all")) from None
        put = await documents.put(put_body.to_command(), caller)
        return DotAiResult(
            operation="ingest",
            message=f"Document {put.status}: {put.chunks} chunks",
            uri=target,
            chunks_created=put.chunks,
            chunk_ids=[chunk_point_id(target, i) for i in range(put.chunks)],
        )
    deleted = await documents.delete(target, None, caller)
    message = f"Deleted {deleted} chunks for URI" if deleted else "No chunks found for URI (or not visible to you)"
    return DotAiResult(operation="deleteByUri", message=message, uri=target, chunks_deleted=deleted)
