"""Route dependencies: the services built in the app's lifespan."""

from __future__ import annotations

from fastapi import Request
from starlette.datastructures import State

from kbsearch.errors import NotReadyError
from kbsearch.services.ask import AskService
from kbsearch.services.documents import DocumentService
from kbsearch.services.insights import InsightsService
from kbsearch.services.rebuild import RebuildService
from kbsearch.services.search import SearchService
from kbsearch.services.syncstatus import SyncStatusService


def ready_state(request: Request) -> State:
    state: State = request.app.state
    if not getattr(state, "ready", False):
        raise NotReadyError("the service is still starting: store or embedder not loaded yet")
    return state


def documents_service(request: Request) -> DocumentService:
    service: DocumentService = ready_state(request).documents
    return service


def search_service(request: Request) -> SearchService:
    service: SearchService = ready_state(request).search
    return service


def ask_service(request: Request) -> AskService:
    service: AskService = ready_state(request).ask
    return service


def sync_status_service(request: Request) -> SyncStatusService:
    service: SyncStatusService = ready_state(request).sync_status
    return service


def insights_service(request: Request) -> InsightsService:
    service: InsightsService = ready_state(request).insights
    return service


def rebuild_service(request: Request) -> RebuildService:
    service: RebuildService = ready_state(request).rebuild
    return service
