"""Run the real search service app in-process for tests, on either store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

from kbsearch.app import create_app
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.llm.chat import ChatClient
from kbsearch.metrics import Metrics
from kbsearch.models import CollectionSignature
from kbsearch.settings import Settings
from kbsearch.store.base import VectorStore
from kbsearch.store.querylog import QueryLogStore
from tests.support.hashing import HashingEmbedder

STORE_KINDS = ("edge", "qdrant-local")
# localhost: in open mode every route checks Host against SEARCHSVC_ALLOWED_HOSTS (loopback names).
BASE_URL = "http://localhost"
# A 401's WWW-Authenticate from the app served by `serve`: where its RFC 9728 metadata is.
CHALLENGE = f'Bearer resource_metadata="{BASE_URL}/.well-known/oauth-protected-resource"'


def make_store(kind: str, data_dir: Path, collection: str = "test") -> VectorStore:
    if kind == "edge":
        from kbsearch.store.edge.store import EdgeStore

        return EdgeStore(data_dir, collection)
    if kind == "qdrant-local":
        from qdrant_client import QdrantClient

        from kbsearch.store.qdrant_server import QdrantServerStore

        return QdrantServerStore(QdrantClient(":memory:"), collection)
    raise ValueError(kind)


def hashing_embedder_for(signature: CollectionSignature) -> EmbeddingProvider:
    """The test embedder that made a collection, from its signature (for the rebuild's serving embedder)."""
    if signature.embedder_provider != "hashing":
        raise ValueError(f"tests make collections with the hashing embedder, not {signature.embedder_provider}")
    return HashingEmbedder(signature.dimensions, signature.embedder_model)


@asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan and give a client that talks to it through ASGI."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client


@asynccontextmanager
async def running_service(
    store_kind: str,
    data_dir: Path,
    *,
    embedder: EmbeddingProvider | None = None,
    chat: Callable[[Metrics], ChatClient] | None = None,
    store: VectorStore | None = None,
    query_log_store: QueryLogStore | None = None,
    **settings: object,
) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with the hashing embedder on the given store kind (or on `store`, made by make_store).

    A collection made by another hashing embedder is served, while it is rebuilt, by one like it.
    """
    app = create_app(
        Settings(data_dir=data_dir, **settings),
        store=store or make_store(store_kind, data_dir),
        embedder=embedder if embedder is not None else HashingEmbedder(),  # an empty CachedEmbedder is falsy
        chat=chat,
        query_log_store=query_log_store,
        embedder_for=hashing_embedder_for,
    )
    async with serve(app) as client:
        client.app = app  # type: ignore[attr-defined]  # lets tests reach the app (kbsearch.deps.context_of)
        yield client


@asynccontextmanager
async def configured_service(
    data_dir: Path, store: VectorStore, **settings: object
) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with the embedder its settings name (the real OpenAI embedder, say), not a test one.

    A collection made by the hashing embedder is served, until a rebuild swaps, by one like it.
    """
    app = create_app(Settings(data_dir=data_dir, **settings), store=store, embedder_for=hashing_embedder_for)  # type: ignore[arg-type]
    async with serve(app) as client:
        client.app = app  # type: ignore[attr-defined]  # lets tests reach the app (kbsearch.deps.context_of)
        yield client


def settings_of(env: dict[str, str]) -> dict[str, str]:
    """SEARCHSVC_* variables as Settings keyword arguments."""
    return {k.removeprefix("SEARCHSVC_").lower(): v for k, v in env.items() if k.startswith("SEARCHSVC_")}


def scraped(client: httpx.AsyncClient) -> str:
    """The metrics of the app `running_service` serves, as its metrics listener would serve them
    (kbsearch.metrics.metrics_listener; the API port has no /metrics)."""
    from prometheus_client import generate_latest

    from kbsearch.deps import parts_of

    return generate_latest(parts_of(client.app).metrics.registry).decode()  # type: ignore[attr-defined]
