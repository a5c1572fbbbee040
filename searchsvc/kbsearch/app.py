"""The FastAPI app factory: the faces and middleware; the lifespan builds the services (kbsearch.context)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager

from fastapi import FastAPI

from kbsearch import __version__, tracing
from kbsearch.aio.bodies import BodyBudget
from kbsearch.api import ask, documents, dotai, insights, rebuild, resource_metadata, search, system
from kbsearch.api.apidocs import install_api_docs
from kbsearch.api.auth import AuthGate
from kbsearch.api.errors import install_error_handlers
from kbsearch.api.hosts import HostAllowList
from kbsearch.api.middleware import RequestContextMiddleware
from kbsearch.console import install_console
from kbsearch.context import build_context
from kbsearch.deps import AppParts
from kbsearch.deps import install as install_parts
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.factory import Factory
from kbsearch.llm.chat import ChatClient
from kbsearch.mcp.http import McpFace
from kbsearch.metrics import Metrics, metrics_listener
from kbsearch.models import CollectionSignature
from kbsearch.settings import Settings
from kbsearch.store.base import VectorStore
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
    factory = Factory(settings, metrics)
    authenticator = factory.create_authenticator()  # a malformed tokens file stops start-up here

    parts = AppParts(settings=settings, metrics=metrics, authenticator=authenticator)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with ExitStack() as listeners:
            listeners.enter_context(tracing.installed(settings.telemetry))  # closed last: flushes every span
            if settings.http.metrics_port is not None:  # its own port, never the API's (kbsearch.metrics)
                port = listeners.enter_context(
                    metrics_listener(metrics.registry, settings.http.host, settings.http.metrics_port)
                )
                log.info("metrics listener started", extra={"host": settings.http.host, "port": port})
            async with serving(app):
                yield

    @asynccontextmanager
    async def serving(app: FastAPI) -> AsyncIterator[None]:
        context = await build_context(
            factory,
            store=store,
            embedder=embedder,
            chat=chat,
            query_log_store=query_log_store,
            embedder_for=embedder_for,
        )
        parts.context = context  # ready: the faces reach it from here on
        if context.pending_rebuild is not None and settings.rebuilds.rebuild == "auto":
            context.rebuild.start(context.pending_rebuild)
        log.info(
            "ready",
            extra={
                "store": context.store.backend,
                "embedder": context.configured_embedder.model,
                "ask": context.ask.mode,
            },
        )
        try:
            async with mcp.running():  # MCP's session manager lives as long as the services it calls
                yield
        finally:
            parts.context = None  # not ready: new requests get NOT_READY while it closes
            await context.aclose()

    app = FastAPI(
        title="Knowledge search service",
        version=__version__,
        description="One-document ingest, hybrid search and bulk delete over Qdrant.",
        lifespan=lifespan,
        docs_url=None,  # served from the service's own files instead of a CDN: install_api_docs
        redoc_url=None,
    )
    install_parts(app, parts)
    install_api_docs(app)
    install_error_handlers(app)
    app.include_router(system.router)
    app.include_router(resource_metadata.router)
    app.include_router(documents.router)
    app.include_router(search.router)
    app.include_router(ask.router)
    app.include_router(insights.router)
    app.include_router(rebuild.router)
    if settings.compat.dotai_api:
        app.include_router(dotai.router)
    mcp = McpFace(app, settings.http, settings.compat, authenticator)  # the exact path /mcp, beside the REST routes
    install_console(app)
    total, per_caller = settings.http.body_budget(settings.http.memory_limit_bytes())
    # Inside the request context, so a 401 (and a body refused for the budget) gets a request id and a log line.
    app.add_middleware(AuthGate, budget=BodyBudget(total, per_caller), max_body_bytes=settings.http.max_body_bytes)
    if not (authenticator.reads_need_token and authenticator.writes_need_token):
        # Open: a browser page could reach us under a rebound name; it cannot when every call needs a token.
        app.add_middleware(HostAllowList, allowed=settings.http.allowed_host_names)
    app.add_middleware(
        RequestContextMiddleware,
        metrics=metrics,
        max_body_bytes=settings.http.max_body_bytes,
        body_timeout_s=settings.http.request_body_timeout_s,
    )
    return app
