"""dot-ai's REST routes, so its controller and its UI switch to this service by changing a URL.

Served only with SEARCHSVC_DOTAI_API=true. The three routes dot-ai's programs call, with dot-ai's
envelopes (`{"success", "data", "meta"}`, and `{"success": false, "error": {"code", "message"}}`
with an honest HTTP status on failure):

- `POST /api/v1/tools/manageKnowledge`: the dot-ai-controller's ingest and deleteByUri (and search);
  `data.result` is the tool's answer, as dot-ai's REST tool endpoint parses it from the tool's text.
- `DELETE /api/v1/knowledge/source/{sourceIdentifier}` (the identifier's `/` sent as %2F): the
  controller's clean-up when a GitKnowledgeSource is deleted.
- `POST /api/v1/knowledge/ask` (`query`, optional `limit` and `uriFilter`): dot-ai UI's answers.

Thin faces over DocumentService, SearchService and AskService, with the same tokens and scopes as
every other route: a read-only token may search and ask, only a writer may ingest or delete. A
refused token is answered in the API's own error body (the check runs before the route), which
dot-ai's UI reads the same way (`error.message`). The MCP tool `manageKnowledge`
(kbsearch.mcp.compat) runs the same `manage_knowledge` (kbsearch.dotai).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel

from kbsearch.api.auth import ReaderDep, WriterDep
from kbsearch.api.params import SOURCE_PATH, SourceIdPath
from kbsearch.deps import AskDep, DocumentReadsDep, DocumentsDep, SearchDep
from kbsearch.dotai import DotAiArgumentError, ManageKnowledgeArguments, manage_knowledge
from kbsearch.errors import ServiceError
from kbsearch.logging import request_id
from kbsearch.presenters import validation_message
from kbsearch.schemas.ask import AskCitation, AskRequest, AskResponse, AskSearchEvent, AskSource
from kbsearch.schemas.system import ErrorResponse
from kbsearch.services.access.scope import Caller
from kbsearch.services.answers.ask import AskService
from kbsearch.services.documents.reads import DocumentReads

API_VERSION = "v1"
TOOL = "manageKnowledge"
router = APIRouter(
    prefix="/api/v1",
    tags=["dot-ai"],
    responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 413, 422, 503)},
)


def _meta() -> dict[str, Any]:
    meta: dict[str, Any] = {"timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")}
    if rid := request_id.get():
        meta["requestId"] = rid
    meta["version"] = API_VERSION
    return meta


def _success(data: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"success": True, "data": data, "meta": _meta()})


def _failure(exc: ServiceError) -> JSONResponse:
    headers = {"Retry-After": str(exc.details.get("retryAfterSeconds", 1))} if exc.retryable else None
    body = {"success": False, "error": {"code": exc.code, "message": exc.message}, "meta": _meta()}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


@router.post(f"/tools/{TOOL}")
async def manage_knowledge_tool(
    body: Annotated[dict[str, Any], Body()], searches: SearchDep, documents: DocumentsDep, caller: ReaderDep
) -> JSONResponse:
    """dot-ai's tool endpoint for manageKnowledge: `{"operation": "ingest"|"search"|"deleteByUri", ...}`.

    Ingest and deleteByUri need a writer's token (403 otherwise); search reads within the caller's scope.
    """
    started = time.perf_counter()
    try:
        try:
            arguments = ManageKnowledgeArguments.model_validate(body)
        except ValidationError as exc:
            raise DotAiArgumentError(validation_message(exc, style="all")) from None
        result = await manage_knowledge(arguments, search=searches, documents=documents, caller=caller, origin="api")
    except ServiceError as exc:
        return _failure(exc)
    took_ms = round((time.perf_counter() - started) * 1000)
    return _success({"result": result.answer(), "tool": TOOL, "executionTime": took_ms})


@router.delete(f"/knowledge/source/{SOURCE_PATH}")
async def delete_knowledge_source(
    sourceIdentifier: SourceIdPath, documents: DocumentsDep, caller: WriterDep
) -> JSONResponse:
    """Delete every document of one source (dot-ai-controller's clean-up of a deleted GitKnowledgeSource)."""
    try:
        _, chunks = await documents.delete_source(sourceIdentifier, caller)
    except ServiceError as exc:
        return _failure(exc)
    return _success({"sourceIdentifier": sourceIdentifier, "chunksDeleted": chunks})


class KnowledgeAskBody(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="ignore", populate_by_name=True)

    query: StrictStr
    limit: Annotated[StrictInt, Field(ge=1, le=100)] | None = None
    uri_filter: StrictStr | None = None


@router.post("/knowledge/ask")
async def knowledge_ask(
    body: Annotated[dict[str, Any], Body()], asks: AskDep, documents: DocumentReadsDep, caller: ReaderDep
) -> JSONResponse:
    """dot-ai UI's question box: `{"query", "limit"?, "uriFilter"?}` answered as `{answer, sources, chunks}`.

    The answer is this service's grounded answer (its [n] markers checked); `sources` are the
    documents it cites, `chunks` the chunks retrieved for it (at most `limit`), best first.
    """
    try:
        try:
            ask_body = KnowledgeAskBody.model_validate(body)
            request = AskRequest(question=ask_body.query, filter={"uriPrefix": ask_body.uri_filter or None})
        except ValidationError as exc:
            raise DotAiArgumentError(
                validation_message(exc, {"question": "query", "filter.uriPrefix": "uriFilter"}, style="all"),
                code="INVALID_REQUEST",
            ) from None
        answer, retrieved = await _ask(asks, request, caller)
        chunks = await _chunks(documents, caller, retrieved[: ask_body.limit] if ask_body.limit else retrieved)
    except ServiceError as exc:
        return _failure(exc)
    return _success({"answer": answer.answer, "sources": _sources(answer.citations), "chunks": chunks})


async def _ask(asks: AskService, request: AskRequest, caller: Caller) -> tuple[AskResponse, list[AskSource]]:
    """The answer, and every chunk retrieved for it, most relevant first (the answer's own lists drop cited scores)."""
    retrieved: list[AskSource] = []
    answer: AskResponse | None = None
    async for event in asks.stream(request, caller):
        if isinstance(event.data, AskSearchEvent):
            retrieved.extend(event.data.sources)
        elif isinstance(event.data, AskResponse):
            answer = event.data
        elif isinstance(event.data, ErrorResponse):
            error = event.data.error
            failure = ServiceError(error.message, code=error.code, details=error.details)
            failure.status_code = event.status  # the ask's own status: 502, 503, 504...
            raise failure
    assert answer is not None, "an ask ends with its done event or an error"
    return answer, sorted(retrieved, key=lambda s: s.relevance, reverse=True)


def _sources(citations: list[AskCitation]) -> list[dict[str, str]]:
    seen: dict[str, dict[str, str]] = {}
    for citation in citations:
        seen.setdefault(citation.uri, {"uri": citation.uri, "title": citation.title or citation.uri})
    return list(seen.values())


async def _chunks(documents: DocumentReads, caller: Caller, sources: list[AskSource]) -> list[dict[str, Any]]:
    chunks = []
    for source in sources:
        stored = await documents.chunks(source.uri, caller, first=source.chunk_index, last=source.chunk_index + 1)
        if stored:  # deleted since the ask read it: leave it out
            chunks.append(
                {
                    "content": stored[0].content,
                    "uri": source.uri,
                    # dot-ai's UI shows `score` as a percentage: the calibrated relevance, never the fusion's.
                    "score": source.relevance,
                    "chunkIndex": source.chunk_index,
                }
            )
    return chunks
