"""The one place the search service's services are built (Gafaelfawr's `Factory.create_*` is the model).

`Factory(settings, metrics)` makes each service from its settings section and the collaborators it is
given; kbsearch.context.build_context calls it in start-up order. No other module calls a service's
constructor (tests/test_layout.py holds it), so following one setting means reading one method here.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from kbsearch.aio.fairness import FairTurns
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
from kbsearch.services.access.auth import Authenticator
from kbsearch.services.access.scope import SourceCatalog
from kbsearch.services.access.tokens import StaticTokens, legacy_entries
from kbsearch.services.answers.ask import AskService
from kbsearch.services.documents.batching import EmbeddingBatcher
from kbsearch.services.documents.budget import DocumentBudget, DocumentWork
from kbsearch.services.documents.prep import DocumentPreparer
from kbsearch.services.documents.reads import DocumentReads
from kbsearch.services.documents.service import DocumentService
from kbsearch.services.documents.syncstatus import SyncStatusService
from kbsearch.services.rebuild.rebuild import RebuildService
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.querylog import QueryLog
from kbsearch.services.search.ranking import Relevance, shipped_model
from kbsearch.services.search.rerank import ListwiseChat, RerankStage
from kbsearch.services.search.service import SearchService
from kbsearch.services.serving import Served, Serving, Target
from kbsearch.services.sources import SourceService
from kbsearch.settings import Settings
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder
from kbsearch.store.factory import build_store, query_log_beside
from kbsearch.store.querylog import QueryLogStore

if TYPE_CHECKING:
    from kbsearch.services.access.kubernetes import KubernetesAuth

__all__ = ["Factory"]

log = logging.getLogger(__name__)

# A rebuild's shadow takes any document the live collection holds, whatever today's size limit.
UNLIMITED_BYTES = 1 << 40


class Factory:
    """Builds the service's parts from its settings; each `create_*` reads only its own section."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics

    # --- who may call ------------------------------------------------------------------------

    def create_authenticator(self) -> Authenticator:
        """Static tokens, the tokens file and, in Kubernetes mode, TokenReviews; a bad tokens file raises here."""
        auth = self.settings.auth
        secret = auth.api_token.get_secret_value() if auth.api_token else None
        read = auth.read_token.get_secret_value() if auth.read_token else None
        tokens = StaticTokens(auth.tokens_file, legacy_entries(secret, read))
        return Authenticator(
            tokens,
            reads_need_token=auth.authenticates or read is not None,
            writes_need_token=not auth.writes_open,
            kubernetes=self._kubernetes_auth() if auth.auth_mode == "kubernetes" else None,
        )

    def _kubernetes_auth(self) -> KubernetesAuth:
        # The client is slow to import; tokens mode skips it.
        from kbsearch.services.access.kubernetes import KubernetesAuth

        auth = self.settings.auth
        try:
            return KubernetesAuth.from_environment(
                audiences=auth.audiences,
                writers=auth.writers,
                cache_seconds=auth.auth_cache_seconds,
                cache_size=auth.auth_cache_size,
                timeout_s=auth.auth_timeout_seconds,
                negative_cache_seconds=auth.auth_negative_cache_seconds,
                max_reviews_in_flight=auth.auth_max_reviews_in_flight,
                max_reviews_per_client=auth.auth_max_reviews_per_client,
            )
        except Exception as exc:  # noqa: BLE001 - the client's configuration errors have no common base
            raise ConfigurationError(
                f"SEARCHSVC_AUTH_MODE=kubernetes: no Kubernetes API configuration (in-cluster or KUBECONFIG): {exc}"
            ) from None

    # --- what serves the collection ----------------------------------------------------------

    def create_store(self) -> VectorStore:
        return build_store(self.settings.storage, self.settings.http.memory_limit_bytes())

    def create_embedder(self) -> EmbeddingProvider:
        """The configured embedder, not loaded."""
        from kbsearch.embedders.factory import build_embedder

        return build_embedder(self.settings.embedding, self.settings.storage.data_dir)

    def create_embedder_for(self, stored: CollectionSignature) -> EmbeddingProvider:
        """The embedder that made a collection of signature `stored`, not loaded."""
        from kbsearch.embedders.factory import build_embedder_for

        return build_embedder_for(self.settings.embedding, self.settings.storage.data_dir, stored)

    def create_chat(self) -> ChatClient | None:
        """The chat model of SEARCHSVC_LLM_MODEL, or None (extractive answers)."""
        from kbsearch.llm.factory import build_chat

        return build_chat(self.settings.chat, self.metrics)

    def create_chunker(self) -> MarkdownChunker:
        chunking = self.settings.chunking
        min_chars, max_chars = chunking.range_for(self.settings.embedding.embedder)
        return MarkdownChunker(min_chars, max_chars, chunking.chunk_overlap_chars)

    def create_serving(
        self,
        store: VectorStore,
        embedder: EmbeddingProvider,
        sparse: Bm25Encoder,
        chunker: MarkdownChunker,
        signature: CollectionSignature,
    ) -> Serving:
        return Serving(Served(store=store, embedder=embedder, sparse=sparse, chunker=chunker, signature=signature))

    def create_catalog(self, store: VectorStore) -> SourceCatalog:
        return SourceCatalog(store)

    # --- the write path ----------------------------------------------------------------------

    def create_conversion_worker(self) -> ConversionWorker:
        """The sandboxed child processes that turn PDF, Word, notebooks... into text; its layers are exported."""
        conversion = self.settings.conversion
        converter = ConversionWorker(
            ConversionLimits(
                memory_bytes=conversion.convert_memory_mb * 1_048_576,
                cpu_seconds=conversion.convert_cpu_seconds,
                wall_seconds=conversion.convert_wall_seconds,
            ),
            conversion.convert_concurrency,
        )
        for layer, active in converter.sandbox.in_force().items():
            self.metrics.conversion_sandbox.labels(layer).set(int(active))
        return converter

    def create_document_work(self, chunker: MarkdownChunker, converter: ConversionWorker) -> DocumentWork:
        """Conversions and chunking in their own pools, shared by writer, within the per-document budget."""
        documents = self.settings.documents
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

    def create_document_service(self, serving: Serving, catalog: SourceCatalog, work: DocumentWork) -> DocumentService:
        documents = self.settings.documents
        return DocumentService(
            serving=serving,
            metrics=self.metrics,
            catalog=catalog,
            work=work,
            prep=self.create_document_preparer(
                serving,
                work,
                catalog,
                max_document_bytes=documents.max_document_bytes,
                max_source_bytes=documents.max_source_bytes,
            ),
            settings=documents,
        )

    def create_document_preparer(
        self,
        serving: Serving,
        work: DocumentWork,
        catalog: SourceCatalog,
        *,
        max_document_bytes: int,
        max_source_bytes: int,
    ) -> DocumentPreparer:
        return DocumentPreparer(
            serving=serving,
            metrics=self.metrics,
            work=work,
            max_document_bytes=max_document_bytes,
            max_source_bytes=max_source_bytes,
            batcher_for=self.create_embedding_batcher,
            catalog=catalog,
            vector_reuse=self.settings.documents.vector_reuse,
        )

    def create_embedding_batcher(self, embedder: EmbeddingProvider) -> EmbeddingBatcher:
        """The write path's calls to `embedder`: batched across concurrent documents, writers in turns."""
        return EmbeddingBatcher(embedder, embedder.turn_texts)

    def create_document_reads(self, serving: Serving, catalog: SourceCatalog) -> DocumentReads:
        return DocumentReads(serving, catalog=catalog)

    def create_sync_status(self, serving: Serving, catalog: SourceCatalog) -> SyncStatusService:
        return SyncStatusService(
            serving,
            catalog=catalog,
            max_clock_skew_s=self.settings.documents.sync_status_max_clock_skew_s,
            metrics=self.metrics,
        )

    # --- the read path -----------------------------------------------------------------------

    def create_query_log(self, store: VectorStore, query_log_store: QueryLogStore | None = None) -> QueryLog:
        """The query log beside the store's collection (or `query_log_store`); with SEARCHSVC_QUERY_LOG=off, none."""
        insights = self.settings.insights
        return QueryLog(
            (query_log_store or query_log_beside(store)) if insights.query_log == "on" else None,
            insights,
            metrics=self.metrics,
            guard=store,
        )

    def create_insights(self, query_log: QueryLog, catalog: SourceCatalog) -> InsightsService:
        low_score = self.settings.insights.insights_low_score
        return InsightsService(query_log=query_log, catalog=catalog, low_score=low_score)

    def create_relevance(self) -> Relevance:
        """The calibrated relevance: the fitted model of the embedder, or the curve (SEARCHSVC_RELEVANCE_*)."""
        from kbsearch.embedders.factory import relevance_calibration, relevance_model_name

        settings = self.settings
        fitted = relevance_model_name(settings.embedding, settings.search)
        return Relevance(
            *relevance_calibration(settings.embedding, settings.search), shipped_model(fitted) if fitted else None
        )

    def create_rerank_stage(self, chat: ChatClient | None) -> RerankStage | None:
        """The second stage SEARCHSVC_RERANK names, or None (off)."""
        from kbsearch.rerank.factory import build_reranker

        reranking = self.settings.reranking
        reranker: Reranker | None
        if reranking.rerank == "llm":
            assert chat is not None  # the settings' validator: rerank=llm needs SEARCHSVC_LLM_MODEL
            reranker = ListwiseChat(chat, timeout_s=reranking.rerank_timeout_ms / 1000)
        else:
            reranker = build_reranker(reranking, self.settings.embedding.local_threads)
        if reranker is None:
            return None
        return RerankStage(
            reranker,
            metrics=self.metrics,
            candidates=reranking.rerank_candidates,
            budget_s=reranking.rerank_timeout_ms / 1000,
        )

    def load_peers(self) -> list[Peer]:
        """The peers of SEARCHSVC_PEERS_FILE; a bad file or token raises here."""
        peering = self.settings.peering
        return load_peers(peering.peers_file, peering.store_name) if peering.peers_file is not None else []

    def create_peer_router(self, peers: list[Peer]) -> PeerRouter | None:
        """The router over the peers of SEARCHSVC_PEERS_FILE, or None (no file, or a file with no peers)."""
        if not peers:
            return None
        peering = self.settings.peering
        log.info("peers configured", extra={"peers": [p.name for p in peers]})
        return PeerRouter(
            peers,
            PeerClient(peering.peer_max_response_bytes),
            self.metrics,
            timeout_s=peering.peer_timeout_seconds,
            breaker_failures=peering.peer_breaker_failures,
            breaker_reset_s=peering.peer_breaker_reset_seconds,
        )

    def create_search_service(
        self,
        serving: Serving,
        catalog: SourceCatalog,
        query_log: QueryLog,
        rerank: RerankStage | None,
        peers: PeerRouter | None,
    ) -> SearchService:
        search = self.settings.search
        return SearchService(
            search,
            serving=serving,
            metrics=self.metrics,
            catalog=catalog,
            query_log=query_log,
            relevance=self.create_relevance(),
            turns=FairTurns(search.search_slots, search.max_searches_per_caller),
            rerank=rerank,
            peers=peers,
            store_name=self.settings.peering.store_name,
        )

    def create_ask_service(self, search: SearchService, serving: Serving, chat: ChatClient | None) -> AskService:
        return AskService(
            search=search,
            serving=serving,
            chat=chat,
            metrics=self.metrics,
            settings=self.settings.answers,
        )

    def create_sources(self, serving: Serving, reads: DocumentReads, search: SearchService) -> SourceService:
        return SourceService(serving, reads=reads, search=search)

    # --- rebuilds ----------------------------------------------------------------------------

    def create_rebuild_service(
        self,
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
            metrics=self.metrics,
            target=target,
            shadow_documents=functools.partial(self.create_shadow_documents, serving, target, documents.work),
            shadow_search=functools.partial(self.create_shadow_search, serving, target),
            settings=self.settings.rebuilds,
        )

    def create_shadow_serving(self, serving: Serving, target: Target, shadow: VectorStore) -> Serving:
        """The shadow collection, served by the configured embedder, encoder and chunker."""
        return self.create_serving(shadow, target.embedder, serving.sparse, serving.chunker, target.signature)

    def create_shadow_documents(
        self, serving: Serving, target: Target, work: DocumentWork, shadow: VectorStore
    ) -> DocumentService:
        """The rebuild's writer into its shadow: any document the live collection holds, whatever today's
        size limit, with the serving converter and budget (re-chunking takes turns with live writes)."""
        shadow_serving = self.create_shadow_serving(serving, target, shadow)
        catalog = self.create_catalog(shadow)
        return DocumentService(
            serving=shadow_serving,
            metrics=self.metrics,
            catalog=catalog,
            work=work,
            prep=self.create_document_preparer(
                shadow_serving, work, catalog, max_document_bytes=UNLIMITED_BYTES, max_source_bytes=UNLIMITED_BYTES
            ),
            # The rebuild's copies never wait in the live queue's bounds.
            settings=self.settings.documents.model_copy(
                update={"max_pending_writes": 1 << 30, "max_pending_writes_per_writer": 1 << 30}
            ),
        )

    def create_shadow_search(self, serving: Serving, target: Target, shadow: VectorStore) -> SearchService:
        """The search a rebuild's self-check runs on its shadow: the live search's settings, nothing logged."""
        return SearchService(
            self.settings.search,
            serving=self.create_shadow_serving(serving, target, shadow),
            metrics=self.metrics,
            catalog=self.create_catalog(shadow),
        )
