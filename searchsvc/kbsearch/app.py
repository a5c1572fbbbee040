"""The FastAPI app factory: wires settings, store, embedder and services in the lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from kbsearch import __version__
from kbsearch.api import ask, documents, dotai, insights, rebuild, resource_metadata, search, system
from kbsearch.api.auth import AuthGate
from kbsearch.api.errors import install_error_handlers
from kbsearch.api.hosts import HostAllowList
from kbsearch.api.middleware import RequestContextMiddleware
from kbsearch.chunker import MarkdownChunker
from kbsearch.console import install_console
from kbsearch.convert import ConversionLimits, ConversionWorker
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import ConfigurationError
from kbsearch.llm.chat import ChatClient
from kbsearch.mcp.http import McpFace
from kbsearch.metrics import Metrics
from kbsearch.models import CollectionSignature
from kbsearch.services.access import SourceCatalog
from kbsearch.services.ask import AskService
from kbsearch.services.auth import Authenticator
from kbsearch.services.documents import DocumentService
from kbsearch.services.fairness import FairTurns
from kbsearch.services.insights import InsightsService
from kbsearch.services.querylog import QueryLog
from kbsearch.services.ranking import Relevance
from kbsearch.services.rebuild import RebuildService, rebuild_reason
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
from kbsearch.store.payloads import compatible
from kbsearch.store.querylog import QueryLogStore

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    *,
    store: VectorStore | None = None,
    embedder: EmbeddingProvider | None = None,
    chat: Callable[[Metrics], ChatClient] | None = None,
    query_log_store: QueryLogStore | None = None,
    embedder_for: Callable[[CollectionSignature], EmbeddingProvider] | None = None,
) -> FastAPI:
    """Build the app. `store`, `embedder`, `chat` (a factory given the app's metrics), `query_log_store`
    and `embedder_for` (the embedder that made a collection, from its signature) override the ones the
    settings would build (tests)."""
    settings = settings or Settings()
    metrics = Metrics()
    authenticator = build_authenticator(settings)  # a malformed tokens file stops start-up here

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from kbsearch.embedders.factory import build_embedder, build_embedder_for
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
        min_chars, max_chars = settings.chunk_range
        chunker = MarkdownChunker(min_chars, max_chars, settings.chunk_overlap_chars)
        try:
            # With rebuilds on, a collection built otherwise opens as it is and is rebuilt in the background.
            await in_thread(lambda: active_store.open(signature, check=settings.rebuild == "off"))
        except ConfigurationError as exc:
            log.error("cannot open the collection", extra={"reason": str(exc)})
            raise
        stored = await in_thread(active_store.stored_signature)
        rebuild_why = rebuild_reason(
            stored, signature, await in_thread(active_store.collection_chunker), chunker.fingerprint
        )
        serving_embedder = active_embedder
        retired: list[EmbeddingProvider] = []  # closed at shutdown: a request may still hold one
        if stored is not None and not compatible(stored, signature):
            # Searches need query vectors from the model that made the collection until the swap.
            try:
                serving_embedder = (embedder_for or (lambda s: build_embedder_for(settings, s)))(stored)
                await in_thread(serving_embedder.load)
            except BaseException:
                await in_thread(active_store.close)  # opened as it is; nothing was served from it
                raise
            retired.append(serving_embedder)
            if stored.sparse_encoder != sparse.name:
                log.warning(
                    "the collection's keyword vectors come from another encoder: keyword results are degraded "
                    "until the rebuild is swapped in",
                    extra={"stored": stored.sparse_encoder, "configured": sparse.name},
                )
        # Before the first request: what a killed process left half-written is emptied now.
        await in_thread(repair, active_store)
        state = app.state
        state.store, state.embedder, state.sparse, state.chunker = active_store, serving_embedder, sparse, chunker
        state.catalog = catalog = SourceCatalog(active_store)
        state.documents = DocumentService(
            store=active_store,
            embedder=serving_embedder,
            sparse=sparse,
            chunker=chunker,
            metrics=metrics,
            max_document_bytes=settings.max_document_bytes,
            max_pending_writes=settings.max_pending_writes,
            catalog=catalog,
            converter=ConversionWorker(
                ConversionLimits(
                    memory_bytes=settings.convert_memory_mb * 1_048_576,
                    cpu_seconds=settings.convert_cpu_seconds,
                    wall_seconds=settings.convert_wall_seconds,
                ),
                settings.convert_concurrency,
            ),
            max_source_bytes=settings.max_source_bytes,
        )
        state.sync_status = SyncStatusService(
            store=active_store, catalog=catalog, max_clock_skew_s=settings.sync_status_max_clock_skew_s
        )
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
            embedder=serving_embedder,
            sparse=sparse,
            metrics=metrics,
            fusion=configured_fusion(settings),
            candidates=settings.search_candidates,
            catalog=catalog,
            query_log=query_log,
            relevance=Relevance(settings.relevance_midpoint, settings.relevance_steepness),
            relevant_at=settings.relevance_threshold,
            turns=FairTurns(settings.search_slots, settings.max_searches_per_caller),
        )
        state.ask = AskService(
            search=state.search,
            embedder=serving_embedder,
            chat=active_chat,
            metrics=metrics,
            results_per_search=settings.ask_results_per_search,
            min_similarity=settings.ask_min_similarity,
            answer_sentences=settings.ask_answer_sentences,
            timeout_s=settings.ask_timeout_s,
        )

        def switch_embedder(embedder: EmbeddingProvider) -> None:
            """After a swap: every service embeds with the configured embedder (the search gate is held)."""
            state.documents.use_embedder(embedder)
            state.search.use_embedder(embedder)
            state.ask.embedder = embedder
            state.embedder = embedder

        state.rebuild = rebuild = RebuildService(
            live=active_store,
            documents=state.documents,
            search=state.search,
            insights=state.insights,
            metrics=metrics,
            target_embedder=active_embedder,
            target_signature=signature,
            sparse=sparse,
            chunker=chunker,
            on_swap=switch_embedder,
            pause_s=settings.rebuild_pause_ms / 1000,
            margin=settings.rebuild_check_margin,
            check_documents=settings.rebuild_check_documents,
            check_queries=settings.rebuild_check_queries,
        )
        state.ready = True
        if rebuild_why is None and await in_thread(active_store.shadow_exists):
            rebuild_why = "resuming an unfinished rebuild"
        if rebuild_why is not None and settings.rebuild == "auto":
            rebuild.start(rebuild_why)
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
                await rebuild.stop()  # its shadow stays, for the next start to resume
                await query_log.stop()  # before the store: on a Qdrant server the log shares its client
                await in_thread(active_store.close)
            finally:
                active_embedder.close()
                for old in retired:
                    if old is not active_embedder:
                        old.close()
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
    app.include_router(resource_metadata.router)
    app.include_router(documents.router)
    app.include_router(search.router)
    app.include_router(ask.router)
    app.include_router(insights.router)
    app.include_router(rebuild.router)
    if settings.dotai_api:
        app.include_router(dotai.router)
    app.state.mcp = McpFace(app, settings, authenticator)  # the exact path /mcp, beside the REST routes
    install_console(app)
    app.add_middleware(AuthGate)  # inside the request context, so a 401 gets a request id and a log line
    if not (authenticator.reads_need_token and authenticator.writes_need_token):
        # Open: a browser page could reach us under a rebound name; it cannot when every call needs a token.
        app.add_middleware(HostAllowList, allowed=settings.allowed_host_names)
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
        writes_need_token=not settings.writes_open,
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
            negative_cache_seconds=settings.auth_negative_cache_seconds,
            max_reviews_in_flight=settings.auth_max_reviews_in_flight,
        )
    except Exception as exc:  # noqa: BLE001 - the client's configuration errors have no common base
        raise ConfigurationError(
            f"SEARCHSVC_AUTH_MODE=kubernetes: no Kubernetes API configuration (in-cluster or KUBECONFIG): {exc}"
        ) from None
