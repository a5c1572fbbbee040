"""The FastAPI app factory: wires settings, store, embedder and services in the lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from kbsearch import __version__
from kbsearch.api import ask, documents, insights, search, system
from kbsearch.api.auth import Authenticator, AuthGate
from kbsearch.api.errors import install_error_handlers
from kbsearch.api.middleware import RequestContextMiddleware
from kbsearch.chunker import MarkdownChunker
from kbsearch.console import install_console
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import ConfigurationError
from kbsearch.llm.chat import ChatClient
from kbsearch.mcp.http import McpFace
from kbsearch.metrics import Metrics
from kbsearch.models import CollectionSignature
from kbsearch.services.access import SourceCatalog
from kbsearch.services.ask import AskService
from kbsearch.services.documents import DocumentService
from kbsearch.services.insights import InsightsService
from kbsearch.services.querylog import QueryLog
from kbsearch.services.repair import repair
from kbsearch.services.runtime import in_thread
from kbsearch.services.search import SearchService, configured_fusion
from kbsearch.services.syncstatus import SyncStatusService
from kbsearch.services.tokens import StaticTokens, legacy_entries

if TYPE_CHECKING:
    from kbsearch.services.kubeauth import KubernetesAuth
from kbsearch.settings import Settings
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder
from kbsearch.store.querylog import QueryLogStore

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    *,
    store: VectorStore | None = None,
    embedder: EmbeddingProvider | None = None,
    chat: Callable[[Metrics], ChatClient] | None = None,
    query_log_store: QueryLogStore | None = None,
) -> FastAPI:
    """Build the app. `store`, `embedder`, `chat` (a factory given the app's metrics) and `query_log_store`
    override the ones the settings would build (tests)."""
    settings = settings or Settings()
    metrics = Metrics()
    authenticator = build_authenticator(settings)  # a malformed tokens file stops start-up here

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from kbsearch.embedders.factory import build_embedder
        from kbsearch.llm.factory import build_chat
        from kbsearch.store.factory import build_store, query_log_beside

        active_embedder = embedder if embedder is not None else build_embedder(settings)
        # Before anything is opened: a chat model with no key stops start-up with nothing to clean up.
        active_chat = chat(metrics) if chat is not None else build_chat(settings, metrics)
        active_store = store if store is not None else build_store(settings)
        await in_thread(active_embedder.load)
        sparse = Bm25Encoder()
        signature = CollectionSignature(
            embedder_provider=active_embedder.provider,
            embedder_model=active_embedder.model,
            dimensions=active_embedder.dimensions,
            sparse_encoder=sparse.name,
            embedder_backend=active_embedder.backend,
        )
        try:
            await in_thread(active_store.open, signature)
        except ConfigurationError as exc:
            log.error("cannot open the collection", extra={"reason": str(exc)})
            raise
        # Before the first request: what a killed process left half-written is emptied now.
        await in_thread(repair, active_store)
        min_chars, max_chars = settings.chunk_range
        chunker = MarkdownChunker(min_chars, max_chars, settings.chunk_overlap_chars)
        state = app.state
        state.store, state.embedder, state.sparse, state.chunker = active_store, active_embedder, sparse, chunker
        state.catalog = catalog = SourceCatalog(active_store)
        state.documents = DocumentService(
            store=active_store,
            embedder=active_embedder,
            sparse=sparse,
            chunker=chunker,
            metrics=metrics,
            max_document_bytes=settings.max_document_bytes,
            max_pending_writes=settings.max_pending_writes,
            catalog=catalog,
        )
        state.sync_status = SyncStatusService(store=active_store, catalog=catalog)
        state.query_log = query_log = QueryLog(
            (query_log_store or query_log_beside(active_store)) if settings.query_log == "on" else None,
            metrics=metrics,
            guard=active_store,
            queue_size=settings.query_log_queue_size,
            retention_days=settings.query_log_retention_days,
            max_entries=settings.query_log_max_entries,
            prune_interval_s=settings.query_log_prune_interval_s,
        )
        await query_log.start()
        state.insights = InsightsService(query_log=query_log, catalog=catalog, low_score=settings.insights_low_score)
        state.search = SearchService(
            store=active_store,
            embedder=active_embedder,
            sparse=sparse,
            metrics=metrics,
            fusion=configured_fusion(settings),
            candidates=settings.search_candidates,
            catalog=catalog,
            query_log=query_log,
        )
        state.ask = AskService(
            search=state.search,
            embedder=active_embedder,
            chat=active_chat,
            metrics=metrics,
            results_per_search=settings.ask_results_per_search,
            min_similarity=settings.ask_min_similarity,
            answer_sentences=settings.ask_answer_sentences,
            timeout_s=settings.ask_timeout_s,
        )
        state.ready = True
        log.info(
            "ready",
            extra={"store": active_store.backend, "embedder": active_embedder.model, "ask": state.ask.mode},
        )
        try:
            mcp: McpFace = app.state.mcp
            async with mcp.running():  # MCP's session manager lives as long as the services it calls
                yield
        finally:
            state.ready = False
            try:
                await query_log.stop()  # before the store: on a Qdrant server the log shares its client
                await in_thread(active_store.close)
            finally:
                active_embedder.close()
                if active_chat is not None:
                    await active_chat.close()

    app = FastAPI(
        title="Knowledge search service",
        version=__version__,
        description="One-document ingest, hybrid search and bulk delete over Qdrant.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.authenticator = authenticator
    app.state.metrics = metrics
    app.state.ready = False
    install_error_handlers(app)
    app.include_router(system.router)
    app.include_router(documents.router)
    app.include_router(search.router)
    app.include_router(ask.router)
    app.include_router(insights.router)
    app.state.mcp = McpFace(app, settings, authenticator)  # the exact path /mcp, beside the REST routes
    install_console(app)
    app.add_middleware(AuthGate)  # inside the request context, so a 401 gets a request id and a log line
    app.add_middleware(
        RequestContextMiddleware,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.request_body_timeout_s,
    )
    return app


def build_authenticator(settings: Settings) -> Authenticator:
    secret = settings.api_token.get_secret_value() if settings.api_token else None
    read = settings.read_token.get_secret_value() if settings.read_token else None
    tokens = StaticTokens(settings.tokens_file, legacy_entries(secret, read))
    return Authenticator(
        tokens,
        reads_need_token=settings.authenticates or read is not None,
        writes_need_token=settings.authenticates or secret is not None,
        kubernetes=_kubernetes_auth(settings) if settings.auth_mode == "kubernetes" else None,
    )


def _kubernetes_auth(settings: Settings) -> KubernetesAuth:
    from kbsearch.services.kubeauth import KubernetesAuth  # the client is slow to import; tokens mode skips it

    try:
        return KubernetesAuth.from_environment(
            audiences=settings.audiences,
            writers=settings.writers,
            cache_seconds=settings.auth_cache_seconds,
            cache_size=settings.auth_cache_size,
            timeout_s=settings.auth_timeout_seconds,
        )
    except Exception as exc:  # noqa: BLE001 - the client's configuration errors have no common base
        raise ConfigurationError(
            f"SEARCHSVC_AUTH_MODE=kubernetes: no Kubernetes API configuration (in-cluster or KUBECONFIG): {exc}"
        ) from None
