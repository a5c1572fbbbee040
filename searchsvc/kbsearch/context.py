"""The application context: every service the faces call, built once at start-up and closed at shutdown.

`build_context` is the whole start-up (open the store, load the embedder, wire the services), each
part made by kbsearch.factory.Factory;
`AppContext.aclose` the whole shutdown. The app's lifespan (kbsearch.app) keeps the result in the
app's parts (kbsearch.deps.AppParts); the faces (REST, MCP, the console) reach it through kbsearch.deps,
and the services never do: each gets what it needs as arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kbsearch.aio.runtime import in_thread
from kbsearch.chunker import MarkdownChunker
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import ConfigurationError
from kbsearch.factory import Factory
from kbsearch.llm.chat import ChatClient
from kbsearch.metrics import Metrics
from kbsearch.models import CollectionSignature
from kbsearch.services.access.scope import SourceCatalog
from kbsearch.services.answers.ask import AskService
from kbsearch.services.documents.reads import DocumentReads
from kbsearch.services.documents.repair import repair
from kbsearch.services.documents.service import DocumentService
from kbsearch.services.documents.syncstatus import SyncStatusService
from kbsearch.services.rebuild.rebuild import RebuildService, rebuild_reason
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.querylog import QueryLog
from kbsearch.services.search.service import SearchService
from kbsearch.services.serving import Serving, Target
from kbsearch.services.sources import SourceService
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder
from kbsearch.store.querylog import QueryLogStore
from kbsearch.store.signature import compatible

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class AppContext:
    """What the faces call; what serves the collection (and a rebuild's swap replaces) is `serving`'s."""

    serving: Serving
    catalog: SourceCatalog
    documents: DocumentService
    document_reads: DocumentReads
    sync_status: SyncStatusService
    query_log: QueryLog
    insights: InsightsService
    search: SearchService
    ask: AskService
    rebuild: RebuildService
    sources: SourceService  # what GET /api/v1/sources and MCP's source tools show
    pending_rebuild: str | None  # why the collection needs rebuilding, if it does
    # Closed at shutdown: the configured embedder, the ones that served before a swap, the chat client.
    configured_embedder: EmbeddingProvider
    chat: ChatClient | None
    retired: list[EmbeddingProvider] = field(default_factory=list)

    @property
    def store(self) -> VectorStore:
        return self.serving.store

    @property
    def embedder(self) -> EmbeddingProvider:
        """The one serving queries: the collection's until a rebuild swaps."""
        return self.serving.embedder

    @property
    def sparse(self) -> Bm25Encoder:
        return self.serving.sparse

    @property
    def chunker(self) -> MarkdownChunker:
        return self.serving.chunker

    async def aclose(self) -> None:
        try:
            await self.rebuild.stop()  # its shadow stays, for the next start to resume
            await self.query_log.stop()  # before the store: on a Qdrant server the log shares its client
            await in_thread(self.store.close)
        finally:
            self.documents.work.close()  # its chunking processes
            self.configured_embedder.close()
            for old in self.retired:
                if old is not self.configured_embedder:
                    old.close()
            if self.search.rerank is not None:
                await self.search.rerank.close()
            if self.chat is not None:
                await self.chat.close()
            if self.search.peers is not None:
                await self.search.peers.aclose()


async def build_context(
    factory: Factory,
    *,
    store: VectorStore | None = None,
    embedder: EmbeddingProvider | None = None,
    chat: Callable[[Metrics], ChatClient] | None = None,
    query_log_store: QueryLogStore | None = None,
    embedder_for: Callable[[CollectionSignature], EmbeddingProvider] | None = None,
) -> AppContext:
    """Open the store, load the embedders and wire the services; the arguments override what the settings build."""
    settings, metrics = factory.settings, factory.metrics
    configured = embedder if embedder is not None else factory.create_embedder()
    # Before anything is opened: a chat model with no key stops start-up with nothing to clean up.
    active_chat = chat(metrics) if chat is not None else factory.create_chat()
    rerank = factory.create_rerank_stage(active_chat)
    # A bad peers file or token stops start-up before anything is opened.
    peers = factory.load_peers()
    active_store = store if store is not None else factory.create_store()
    await in_thread(configured.load)
    sparse = Bm25Encoder()
    chunker = factory.create_chunker()
    collection = await open_collection(
        active_store,
        configured,
        sparse,
        chunker,
        check=settings.rebuilds.rebuild == "off",
        embedder_for=embedder_for or factory.create_embedder_for,
    )
    serving = factory.create_serving(active_store, collection.serving, sparse, chunker, collection.served_signature)
    # Before the first request: what a killed process left half-written is emptied now.
    await in_thread(repair, active_store)
    catalog = factory.create_catalog(active_store)
    work = factory.create_document_work(chunker, factory.create_conversion_worker())
    documents = factory.create_document_service(serving, catalog, work)
    query_log = factory.create_query_log(active_store, query_log_store)
    await query_log.start()
    insights = factory.create_insights(query_log, catalog)
    search = factory.create_search_service(serving, catalog, query_log, rerank, factory.create_peer_router(peers))
    ask = factory.create_ask_service(search, serving, active_chat)
    rebuild = factory.create_rebuild_service(
        serving, documents, search, insights, Target(configured, collection.signature)
    )
    rebuild_why = collection.rebuild_why
    if rebuild_why is None and await in_thread(active_store.shadow_exists):
        rebuild_why = "resuming an unfinished rebuild"
    reads = factory.create_document_reads(serving, catalog)
    return AppContext(
        serving=serving,
        catalog=catalog,
        documents=documents,
        document_reads=reads,
        sync_status=factory.create_sync_status(serving, catalog),
        query_log=query_log,
        insights=insights,
        search=search,
        ask=ask,
        rebuild=rebuild,
        sources=factory.create_sources(serving, reads, search),
        pending_rebuild=rebuild_why,
        configured_embedder=configured,
        chat=active_chat,
        retired=collection.retired,
    )


@dataclass(frozen=True, slots=True)
class OpenedCollection:
    """The store's collection, open, and who serves it until a rebuild swaps."""

    signature: CollectionSignature  # what the configured embedder, encoder and chunker would make
    serving: EmbeddingProvider  # the embedder that made the stored vectors (the configured one if they agree)
    served_signature: CollectionSignature  # what made the stored vectors (`signature` when they agree)
    retired: list[EmbeddingProvider]  # closed at shutdown: a request may still hold one
    rebuild_why: str | None  # why the collection needs rebuilding, if it does


async def open_collection(
    store: VectorStore,
    configured: EmbeddingProvider,
    sparse: Bm25Encoder,
    chunker: MarkdownChunker,
    *,
    check: bool,
    embedder_for: Callable[[CollectionSignature], EmbeddingProvider],
) -> OpenedCollection:
    """Open the collection; with `check` off one built otherwise opens as it is, to be rebuilt in the background."""
    signature = CollectionSignature(
        embedder_provider=configured.provider,
        embedder_model=configured.model,
        dimensions=configured.dimensions,
        sparse_encoder=sparse.name,
        embedder_backend=configured.backend,
    )
    try:
        await in_thread(lambda: store.open(signature, check=check))
    except ConfigurationError as exc:
        log.error("cannot open the collection", extra={"reason": str(exc)})
        raise
    stored = await in_thread(store.stored_signature)
    why = rebuild_reason(stored, signature, await in_thread(store.collection_chunker), chunker.fingerprint)
    if stored is None or compatible(stored, signature):
        return OpenedCollection(signature, configured, signature, [], why)
    # Searches need query vectors from the model that made the collection until the swap.
    try:
        serving = embedder_for(stored)
        await in_thread(serving.load)
    except BaseException:
        await in_thread(store.close)  # opened as it is; nothing was served from it
        raise
    if stored.sparse_encoder != sparse.name:
        log.warning(
            "the collection's keyword vectors come from another encoder: keyword results are degraded "
            "until the rebuild is swapped in",
            extra={"stored": stored.sparse_encoder, "configured": sparse.name},
        )
    return OpenedCollection(signature, serving, stored, [serving], why)
