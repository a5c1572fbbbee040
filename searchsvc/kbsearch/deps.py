"""What a face's handler gets: the app's context and its services, each alias written once.

REST routes and console pages declare `search: SearchDep`, `documents: DocumentsDep` and so on;
an MCP tool gets the same context through `context(request)` (kbsearch.mcp.context). Before the
lifespan has built the context, and while it closes it, every one of them is NOT_READY (503).
The caller is each face's own: REST's `ReaderDep`/`WriterDep` (kbsearch.api.auth), the console's
session cookie, MCP's endpoint.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from kbsearch.context import AppContext, context_of
from kbsearch.services.access.auth import KnownSources
from kbsearch.services.answers.ask import AskService
from kbsearch.services.document_reads import DocumentReads
from kbsearch.services.documents import DocumentService
from kbsearch.services.insights import InsightsService
from kbsearch.services.rebuild.rebuild import RebuildService
from kbsearch.services.search import SearchService
from kbsearch.services.syncstatus import SyncStatusService


def context(request: HTTPConnection) -> AppContext:
    """The app's context, or NOT_READY while it starts or stops."""
    return context_of(request.app.state)


def client_address(request: HTTPConnection) -> str | None:
    """The caller's address (the proxy's X-Forwarded-For when the proxy is trusted, as uvicorn applies it)."""
    return request.client.host if request.client is not None else None


def known_sources(request: HTTPConnection) -> KnownSources:
    """The sources a Kubernetes caller's scope is read against, looked up only if a TokenReview needs them."""

    async def known() -> list[str]:
        return sorted(await context(request).catalog.known())

    return known


ContextDep = Annotated[AppContext, Depends(context)]


def _documents(ctx: ContextDep) -> DocumentService:
    return ctx.documents


def _document_reads(ctx: ContextDep) -> DocumentReads:
    return ctx.document_reads


def _search(ctx: ContextDep) -> SearchService:
    return ctx.search


def _ask(ctx: ContextDep) -> AskService:
    return ctx.ask


def _sync_status(ctx: ContextDep) -> SyncStatusService:
    return ctx.sync_status


def _insights(ctx: ContextDep) -> InsightsService:
    return ctx.insights


def _rebuild(ctx: ContextDep) -> RebuildService:
    return ctx.rebuild


DocumentsDep = Annotated[DocumentService, Depends(_documents)]
DocumentReadsDep = Annotated[DocumentReads, Depends(_document_reads)]
SearchDep = Annotated[SearchService, Depends(_search)]
AskDep = Annotated[AskService, Depends(_ask)]
SyncStatusDep = Annotated[SyncStatusService, Depends(_sync_status)]
InsightsDep = Annotated[InsightsService, Depends(_insights)]
RebuildDep = Annotated[RebuildService, Depends(_rebuild)]
