"""Route dependencies: the services built in the app's lifespan."""

from __future__ import annotations

from fastapi import Request

from kbsearch.context import AppContext, context_of
from kbsearch.services.ask import AskService
from kbsearch.services.documents import DocumentService
from kbsearch.services.insights import InsightsService
from kbsearch.services.rebuild import RebuildService
from kbsearch.services.search import SearchService
from kbsearch.services.syncstatus import SyncStatusService


def ready_state(request: Request) -> AppContext:
    return context_of(request.app.state)


def documents_service(request: Request) -> DocumentService:
    return ready_state(request).documents


def search_service(request: Request) -> SearchService:
    return ready_state(request).search


def ask_service(request: Request) -> AskService:
    return ready_state(request).ask


def sync_status_service(request: Request) -> SyncStatusService:
    return ready_state(request).sync_status


def insights_service(request: Request) -> InsightsService:
    return ready_state(request).insights


def rebuild_service(request: Request) -> RebuildService:
    return ready_state(request).rebuild
