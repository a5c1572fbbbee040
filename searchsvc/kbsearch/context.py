"""The application context: every service the faces call, built once at start-up and closed at shutdown.

`build_context` is the whole start-up (open the store, load the embedder, wire the services);
`AppContext.aclose` the whole shutdown. The app's lifespan (kbsearch.app) keeps the result in the
app's parts (kbsearch.deps.AppParts); the faces (REST, MCP, the console) reach it through kbsearch.deps,
and the services never do: each gets what it needs as arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kbsearch.aio.fairness import FairTurns
from kbsearch.aio.runtime import in_thread
from kbsearch.chunker import MarkdownChunker
from kbsearch.convert import ConversionLimits, ConversionWorker
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import ConfigurationError
from kbsearch.llm.chat import ChatClient
from kbsearch.metrics import Metrics
from kbsearch.models import CollectionSignature
from kbsearch.peers.client import PeerClient
from kbsearch.peers.config import Peer, load_peers
from kbsearch.peers.router import PeerRouter
from kbsearch.rerank.base import Reranker
from kbsearch.services.access.scope import SourceCatalog
from kbsearch.services.answers.ask import AskService
from kbsearch.services.documents.budget import DocumentBudget, DocumentWork
from kbsearch.services.documents.reads import DocumentReads
from kbsearch.services.documents.repair import repair
from kbsearch.services.documents.service import DocumentService
from kbsearch.services.documents.syncstatus import SyncStatusService
from kbsearch.services.rebuild.rebuild import RebuildService, rebuild_reason
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.querylog import QueryLog
from kbsearch.services.search.ranking import Relevance, shipped_model
from kbsearch.services.search.rerank import ListwiseChat, RerankStage
from kbsearch.services.search.service import SearchService, configured_fusion
from kbsearch.services.serving import Served, Serving, Target
from kbsearch.services.sources import SourceService
from kbsearch.settings import (
    AskSettings,
    ChunkSettings,
    ConversionSettings,
    DocumentSettings,
    PeerSettings,
    QueryLogSettings,
    RebuildSettings,
    RerankSettings,
    SearchSettings,
    Settings,
)
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder
from kbsearch.store.factory import build_store, query_log_beside
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
    settings: Settings,
    metrics: Metrics,
    *,
    store: VectorStore | None = None,
    embedder: EmbeddingProvider | None = None,
    chat: Callable[[Metrics], ChatClient] | None = None,
    query_log_store: QueryLogStore | None = None,
    embedder_for: Callable[[CollectionSignature], EmbeddingProvider] | None = None,
) -> AppContext:
    """Open the store, load the embedders and wire the services; the arguments override what the settings build."""
    from kbsearch.embedders.factory import (
        build_embedder,
        build_embedder_for,
        relevance_calibration,
        relevance_model_name,
    )
    from kbsearch.llm.factory import build_chat

    configured = embedder if embedder is not None else build_embedder(settings.embedding, settings.storage.data_dir)
    # Before anything is opened: a chat model with no key stops start-up with nothing to clean up.
    active_chat = chat(metrics) if chat is not None else build_chat(settings.chat, metrics)
    rerank = rerank_stage(settings.reranking, settings.embedding.local_threads, metrics, active_chat)
    # A bad peers file or token stops start-up before anything is opened.
    peering = settings.peering
    peers = load_peers(peering.peers_file, peering.store_name) if peering.peers_file is not None else []
    active_store = store if store is not None else build_store(settings.storage)
    await in_thread(configured.load)
    sparse = Bm25Encoder()
    chunker = markdown_chunker(settings.chunking, settings.embedding.embedder)
    collection = await open_collection(
        active_store,
        configured,
        sparse,
        chunker,
        check=settings.rebuilds.rebuild == "off",
        embedder_for=embedder_for
        or (lambda stored: build_embedder_for(settings.embedding, settings.storage.data_dir, stored)),
    )
    serving = Serving(
        Served(
            store=active_store,
            embedder=collection.serving,
            sparse=sparse,
            chunker=chunker,
            signature=collection.served_signature,
        )
    )
    # Before the first request: what a killed process left half-written is emptied now.
    await in_thread(repair, active_store)
    catalog = SourceCatalog(active_store)
    documents = document_service(
        settings.documents,
        metrics,
        serving,
        catalog,
        conversion_worker(settings.conversion, metrics),
    )
    query_log = query_log_service(settings.insights, metrics, active_store, query_log_store)
    await query_log.start()
    insights = InsightsService(query_log=query_log, catalog=catalog, low_score=settings.insights.insights_low_score)
    fitted = relevance_model_name(settings.embedding, settings.search)
    relevance = Relevance(
        *relevance_calibration(settings.embedding, settings.search), shipped_model(fitted) if fitted else None
    )
    search = search_service(
        settings.search,
        relevance,
        metrics,
        serving,
        catalog,
        query_log,
        rerank,
        peers=peer_router(settings.peering, metrics, peers),
        store_name=settings.peering.store_name,
    )
    ask = ask_service(settings.answers, metrics, search, serving, active_chat)
    rebuild = rebuild_service(
        settings.rebuilds, metrics, serving, documents, search, insights, Target(configured, collection.signature)
    )
    rebuild_why = collection.rebuild_why
    if rebuild_why is None and await in_thread(active_store.shadow_exists):
        rebuild_why = "resuming an unfinished rebuild"
    reads = DocumentReads(serving, catalog=catalog)
    return AppContext(
        serving=serving,
        catalog=catalog,
        documents=documents,
        document_reads=reads,
        sync_status=SyncStatusService(
            serving, catalog=catalog, max_clock_skew_s=settings.documents.sync_status_max_clock_skew_s
        ),
        query_log=query_log,
        insights=insights,
        search=search,
        ask=ask,
        rebuild=rebuild,
        sources=SourceService(serving, reads=reads, search=search),
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


def markdown_chunker(chunking: ChunkSettings, embedder: str) -> MarkdownChunker:
    min_chars, max_chars = chunking.range_for(embedder)
    return MarkdownChunker(min_chars, max_chars, chunking.chunk_overlap_chars)


def conversion_worker(conversion: ConversionSettings, metrics: Metrics) -> ConversionWorker:
    """The sandboxed child processes that turn PDF, Word, notebooks... into text; its layers are exported."""
    converter = ConversionWorker(
        ConversionLimits(
            memory_bytes=conversion.convert_memory_mb * 1_048_576,
            cpu_seconds=conversion.convert_cpu_seconds,
            wall_seconds=conversion.convert_wall_seconds,
        ),
        conversion.convert_concurrency,
    )
    for layer, active in converter.sandbox.in_force().items():
        metrics.conversion_sandbox.labels(layer).set(int(active))
    return converter


def document_work(documents: DocumentSettings, chunker: MarkdownChunker, converter: ConversionWorker) -> DocumentWork:
    """Conversions and chunking in their own pools, shared by writer, within the per-document budget."""
    return DocumentWork(
        chunker,
        converter,
        budget=DocumentBudget(
            max_chunks=documents.max_document_chunks,
            max_chunk_chars=documents.max_document_chunk_chars,
            chunk_seconds=documents.chunk_seconds,
        ),
        convert_slots=converter.concurrency,
        chunk_slots=documents.chunk_concurrency,
        share=documents.writer_share,
        per_writer=documents.max_pending_writes_per_writer,
    )


def document_service(
    documents: DocumentSettings,
    metrics: Metrics,
    serving: Serving,
    catalog: SourceCatalog,
    converter: ConversionWorker,
) -> DocumentService:
    return DocumentService(
        serving=serving,
        metrics=metrics,
        max_document_bytes=documents.max_document_bytes,
        max_pending_writes=documents.max_pending_writes,
        catalog=catalog,
        max_source_bytes=documents.max_source_bytes,
        work=document_work(documents, serving.chunker, converter),
        max_pending_writes_per_writer=documents.max_pending_writes_per_writer,
        vector_reuse=documents.vector_reuse,
    )


def query_log_service(
    insights: QueryLogSettings, metrics: Metrics, store: VectorStore, query_log_store: QueryLogStore | None
) -> QueryLog:
    """The query log beside the store's collection (or `query_log_store`); with SEARCHSVC_QUERY_LOG=off, none."""
    return QueryLog(
        (query_log_store or query_log_beside(store)) if insights.query_log == "on" else None,
        metrics=metrics,
        guard=store,
        queue_size=insights.query_log_queue_size,
        retention_days=insights.query_log_retention_days,
        max_entries=insights.query_log_max_entries,
        prune_interval_s=insights.query_log_prune_interval_s,
    )


def search_service(
    search: SearchSettings,
    relevance: Relevance,
    metrics: Metrics,
    serving: Serving,
    catalog: SourceCatalog,
    query_log: QueryLog,
    rerank: RerankStage | None,
    *,
    peers: PeerRouter | None = None,
    store_name: str = "local",
) -> SearchService:
    return SearchService(
        serving=serving,
        metrics=metrics,
        fusion=configured_fusion(search),
        candidates=search.search_candidates,
        catalog=catalog,
        query_log=query_log,
        relevance=relevance,
        relevant_at=search.relevance_threshold,
        turns=FairTurns(search.search_slots, search.max_searches_per_caller),
        rerank=rerank,
        default_path_weights=search.default_path_weights,
        peers=peers,
        store_name=store_name,
    )


def ask_service(
    answers: AskSettings, metrics: Metrics, search: SearchService, serving: Serving, chat: ChatClient | None
) -> AskService:
    return AskService(
        search=search,
        serving=serving,
        chat=chat,
        metrics=metrics,
        results_per_search=answers.ask_results_per_search,
        min_similarity=answers.ask_min_similarity,
        answer_sentences=answers.ask_answer_sentences,
        timeout_s=answers.ask_timeout_s,
    )


def rebuild_service(
    rebuilds: RebuildSettings,
    metrics: Metrics,
    serving: Serving,
    documents: DocumentService,
    search: SearchService,
    insights: InsightsService,
    target: Target,
) -> RebuildService:
    """Background rebuilds into a shadow collection made by the configured embedder, encoder and chunker."""
    return RebuildService(
        serving=serving,
        documents=documents,
        search=search,
        insights=insights,
        metrics=metrics,
        target=target,
        pause_s=rebuilds.rebuild_pause_ms / 1000,
        margin=rebuilds.rebuild_check_margin,
        check_queries=rebuilds.rebuild_check_queries,
    )


def rerank_stage(
    reranking: RerankSettings, threads: int, metrics: Metrics, chat: ChatClient | None
) -> RerankStage | None:
    """The second stage SEARCHSVC_RERANK names, or None (off)."""
    from kbsearch.rerank.factory import build_reranker

    reranker: Reranker | None
    if reranking.rerank == "llm":
        assert chat is not None  # the settings' validator: rerank=llm needs SEARCHSVC_LLM_MODEL
        reranker = ListwiseChat(chat, timeout_s=reranking.rerank_timeout_ms / 1000)
    else:
        reranker = build_reranker(reranking, threads)
    if reranker is None:
        return None
    return RerankStage(
        reranker, metrics=metrics, candidates=reranking.rerank_candidates, budget_s=reranking.rerank_timeout_ms / 1000
    )


def peer_router(peering: PeerSettings, metrics: Metrics, peers: list[Peer]) -> PeerRouter | None:
    """The router over the peers of SEARCHSVC_PEERS_FILE, or None (no file, or a file with no peers)."""
    if not peers:
        return None
    log.info("peers configured", extra={"peers": [p.name for p in peers]})
    return PeerRouter(
        peers,
        PeerClient(peering.peer_max_response_bytes),
        metrics,
        timeout_s=peering.peer_timeout_seconds,
        breaker_failures=peering.peer_breaker_failures,
        breaker_reset_s=peering.peer_breaker_reset_seconds,
    )
