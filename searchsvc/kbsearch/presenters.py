"""What the faces show alike: the API's bodies built from domain values, error bodies, refused-input messages.

REST returns these bodies, MCP's tools return them as structured output, and the console shows
their messages, so a search, a source list or a refused field reads the same through every face.
Nothing here reaches the app's context: each function is given what it shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from kbsearch.commands import DocumentWritten, SearchQuery
from kbsearch.models import SearchOrigin, SyncStatus
from kbsearch.schemas.documents import DocumentText, PutDocumentResponse, SourceDocumentList
from kbsearch.schemas.search import SearchResponse, SearchResult, UnansweredPeer
from kbsearch.schemas.sources import (
    SourceInfo,
    SourceList,
    SourceMatchInfo,
    SyncProgressInfo,
    SyncStatusInfo,
    VersionInfo,
)
from kbsearch.services.access.scope import Caller
from kbsearch.services.documents.reads import DocumentPage, SourceDocuments
from kbsearch.services.search.service import SearchOutcome
from kbsearch.services.sources import SourceService


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The API's error body, `{"error": {"code", "message", "details"}}`, with its status."""
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def field_problems(
    exc: ValidationError | RequestValidationError, names: Mapping[str, str] | None = None, *, default: str = "body"
) -> list[dict[str, str]]:
    """Each refused field as `{"field", "message", "type"}`: pydantic's message, never the input (it may be a
    megabyte of document). `names` maps a schema field (say `filter.uriPrefix`) to the name the caller
    used (`uri_prefix`); a field at the top of the body is `default`."""
    names = names or {}
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error.get("loc", ())) or default
        name = next((names[f] for f in names if field == f or field.startswith(f + ".")), field)
        problems.append({"field": name, "message": error.get("msg", ""), "type": error.get("type", "")})
    return problems


MessageStyle = Literal["counted", "first", "all", "bare"]


def validation_message(
    exc: ValidationError | RequestValidationError,
    names: Mapping[str, str] | None = None,
    *,
    style: MessageStyle = "counted",
    default: str = "body",
) -> str:
    """One message for a refused input, in a face's own style:

    - `counted` (REST bodies): the first problem, `field: message`, and how many more there are;
    - `first` (REST's GET search): the first problem alone;
    - `all` (MCP tools, dot-ai): every problem, `field: message` joined by `; `, without pydantic's
      `Value error, ` prefix;
    - `bare` (console forms, which show it beside the field): the first message alone, without that prefix.
    """
    problems = field_problems(exc, names, default=default)
    if style == "all":
        return "; ".join(f"{p['field']}: {_plain(p['message'])}" for p in problems)
    first = problems[0] if problems else {"field": default, "message": "invalid request", "type": ""}
    if style == "bare":
        return _plain(first["message"])
    message = f"{first['field']}: {first['message']}"
    if style == "counted" and len(problems) > 1:
        message += f" (and {len(problems) - 1} more problem(s))"
    return message


def _plain(message: str) -> str:
    return message.removeprefix("Value error, ")


def put_response(written: DocumentWritten) -> PutDocumentResponse:
    """The body of a PUT of a document: REST's, the MCP put tool's and dotai's."""
    return PutDocumentResponse.model_validate(written, from_attributes=True)


def search_response(request: SearchQuery, outcome: SearchOutcome) -> SearchResponse:
    """The response body of a search: REST's, and the MCP search tool's structured output."""
    # A hit's fields are the result's, by the same names; a hit without a calibrated relevance shows 0.
    results = [
        SearchResult.model_validate(
            replace(h, relevance=h.relevance or 0.0, stores=h.stores or (outcome.store,)), from_attributes=True
        )
        for h in outcome.hits
    ]
    return SearchResponse(
        query=request.query,
        mode=request.mode,
        results=results,
        took_ms=round(outcome.took_ms, 3),
        nothing_relevant=outcome.nothing_relevant,
        partial=outcome.partial,
        unanswered_peers=[UnansweredPeer(name=u.name, reason=u.reason) for u in outcome.unanswered],
    )


async def source_list(
    service: SourceService, caller: Caller, query: str | None = None, *, origin: SearchOrigin = "api"
) -> SourceList:
    """GET /api/v1/sources's body (with ?query=, the sources that fit it): MCP's list_sources and resolve_sources."""
    sources = []
    for view in await service.overview(caller, query, origin=origin):
        stats = view.stats
        sync, progress = sync_infos(stats.sync)
        sources.append(
            SourceInfo(
                source_identifier=stats.source_identifier,
                documents=stats.documents,
                chunks=stats.chunks,
                last_ingested_at=stats.last_ingested_at,
                sync=sync,
                progress=progress,
                last_synced_at=sync.synced_at if sync is not None else None,
                versions=[VersionInfo(version=v, chunks=n) for v, n in view.versions],
                unversioned_chunks=view.unversioned_chunks,
                quality=view.quality,
                match=SourceMatchInfo.model_validate(view.match, from_attributes=True) if view.match else None,
            )
        )
    return SourceList(sources=sources)


def sync_infos(status: SyncStatus | None) -> tuple[SyncStatusInfo | None, SyncProgressInfo | None]:
    """A stored status as the API shows it: the last outcome (None before one), and the running sync's progress."""
    if status is None:
        return None, None
    sync = SyncStatusInfo.model_validate(status, from_attributes=True) if status.phase is not None else None
    progress = status.progress
    return sync, SyncProgressInfo.model_validate(progress, from_attributes=True) if progress else None


def text_page(page: DocumentPage) -> DocumentText:
    """A page of a document's text: REST's body and the MCP fetch tool's structured output."""
    record = page.record
    return DocumentText(
        uri=record.uri,
        title=record.title,
        source_identifier=record.source_identifier,
        checksum=record.checksum,
        metadata=record.metadata,
        ingested_at=record.ingested_at,
        total_chars=page.total_chars,
        start=page.start,
        end=page.end,
        next_start=page.next_start,
        text=page.text,
    )


def source_documents(page: SourceDocuments) -> SourceDocumentList:
    return SourceDocumentList.model_validate(page, from_attributes=True)
