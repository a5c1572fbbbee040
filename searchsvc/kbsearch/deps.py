"""What a face's handler gets: the app's parts and its services, each alias written once.

The app factory (kbsearch.app) keeps one `AppParts` on the app, installed here; nothing else touches
`app.state`. REST routes and console pages declare `search: SearchDep`, `documents: DocumentsDep` and
so on; an MCP tool gets the same context through `context(request)` (kbsearch.mcp.context). Before the
lifespan has built the context, and while it closes it, every one of them is NOT_READY (503).
The caller is each face's own: REST's `ReaderDep`/`WriterDep` (kbsearch.api.auth), the console's
session cookie, MCP's endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends
from starlette.applications import Starlette
from starlette.requests import HTTPConnection

from kbsearch.context import AppContext
from kbsearch.errors import NotReadyError
from kbsearch.metrics import Metrics
from kbsearch.services.access.auth import Authenticator, KnownSources
from kbsearch.services.answers.ask import AskService
from kbsearch.services.documents.reads import DocumentReads
from kbsearch.services.documents.service import DocumentService
from kbsearch.services.documents.syncstatus import SyncStatusService
from kbsearch.services.rebuild.rebuild import RebuildService
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.service import SearchService
from kbsearch.services.sources import SourceService
from kbsearch.settings import Settings

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class AppParts:
    """Everything one app holds for its whole life, in one typed place (Gafaelfawr's ProcessContext).

    `settings`, `metrics` and `authenticator` are made with the app; `context` is set by the lifespan
    once the store and embedder are ready and cleared before it closes them. `faces` holds a face's own
    state by its type (the console's templates and sessions), as this layer cannot name the faces' types.
    """

    settings: Settings
    metrics: Metrics
    authenticator: Authenticator
    context: AppContext | None = None
    faces: dict[type[Any], Any] = field(default_factory=dict)

    def add_face(self, state: object) -> None:
        self.faces[type(state)] = state


def install(app: Starlette, parts: AppParts) -> None:
    app.state.parts = parts


def parts_of(app: Starlette) -> AppParts:
    parts: AppParts = app.state.parts
    return parts


def context_of(app: Starlette) -> AppContext:
    """The app's context, or NOT_READY (503) while it starts or stops."""
    context = parts_of(app).context
    if context is None:
        raise NotReadyError("the service is still starting: store or embedder not loaded yet")
    return context


def parts(request: HTTPConnection) -> AppParts:
    return parts_of(request.app)


def context(request: HTTPConnection) -> AppContext:
    """The app's context, or NOT_READY while it starts or stops."""
    return context_of(request.app)


def is_ready(request: HTTPConnection) -> bool:
    return parts(request).context is not None


def settings(request: HTTPConnection) -> Settings:
    return parts(request).settings


def metrics(request: HTTPConnection) -> Metrics:
    return parts(request).metrics


def authenticator(request: HTTPConnection) -> Authenticator:
    return parts(request).authenticator


def face_state(request: HTTPConnection, kind: type[T]) -> T:
    """A face's own state, as the face installed it (`AppParts.add_face`)."""
    state: T = parts(request).faces[kind]
    return state


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


def _sources(ctx: ContextDep) -> SourceService:
    return ctx.sources


def _rebuild(ctx: ContextDep) -> RebuildService:
    return ctx.rebuild


DocumentsDep = Annotated[DocumentService, Depends(_documents)]
DocumentReadsDep = Annotated[DocumentReads, Depends(_document_reads)]
SearchDep = Annotated[SearchService, Depends(_search)]
AskDep = Annotated[AskService, Depends(_ask)]
SyncStatusDep = Annotated[SyncStatusService, Depends(_sync_status)]
InsightsDep = Annotated[InsightsService, Depends(_insights)]
RebuildDep = Annotated[RebuildService, Depends(_rebuild)]
SourcesDep = Annotated[SourceService, Depends(_sources)]
