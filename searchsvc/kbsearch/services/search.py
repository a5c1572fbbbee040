"""Hybrid, dense and keyword search over the store."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.metrics import Metrics
from kbsearch.models import Fusion, QueryLogEntry, SearchFilter, SearchHit, SearchOrigin
from kbsearch.schemas import SearchRequest
from kbsearch.services.access import Caller, SourceCatalog, narrow
from kbsearch.services.querylog import QueryLog
from kbsearch.services.runtime import embed_call, store_call
from kbsearch.settings import Settings
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder


def configured_fusion(settings: Settings) -> Fusion:
    """Hybrid search's fusion as the SEARCHSVC_FUSION* settings describe it."""
    return Fusion(
        settings.fusion,
        settings.rrf_k,
        settings.fusion_dense_weight,
        settings.fusion_keyword_weight,
        settings.fusion_full_scores,
    )


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    hits: list[SearchHit]
    embed_ms: float  # query embedding (dense and sparse)
    engine_ms: float  # the store's own query time

    @property
    def took_ms(self) -> float:
        return self.embed_ms + self.engine_ms


class SearchService:
    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: EmbeddingProvider,
        sparse: Bm25Encoder,
        metrics: Metrics,
        fusion: Fusion,
        candidates: int,
        catalog: SourceCatalog,
        query_log: QueryLog | None = None,
    ) -> None:
        self.store = store
        self.query_log = query_log
        self.catalog = catalog
        self.embedder = embedder
        self.sparse = sparse
        self.metrics = metrics
        self.fusion = fusion
        self.candidates = candidates

    async def search(self, request: SearchRequest, caller: Caller, *, origin: SearchOrigin = "api") -> SearchOutcome:
        """The caller's search; `origin` names the face it came through (REST, MCP, console, ask).

        Every search, whatever its face, is recorded in the query log here, and only here.
        """
        outcome, sources = await self._search(request, caller)
        if self.query_log is not None:
            self.query_log.record(
                QueryLogEntry(
                    at=time.time(),
                    origin=origin,
                    query=request.query,
                    results=len(outcome.hits),
                    top_score=max((h.score for h in outcome.hits), default=None),
                    latency_ms=round(outcome.took_ms, 3),
                    caller=caller.name,
                    sources=sources,
                )
            )
        return outcome

    async def _search(self, request: SearchRequest, caller: Caller) -> tuple[SearchOutcome, list[str] | None]:
        """The outcome, and the sources the search was scoped to (None: every source)."""
        started = time.perf_counter()
        raw = request.filter
        requested = [raw.sourceIdentifier] if isinstance(raw.sourceIdentifier, str) else raw.sourceIdentifier
        # The caller's scope is part of the engine filter, so `limit` is filled from what it may see.
        sources = narrow(requested, await caller.scope.resolve(self.catalog))
        if sources == []:
            return SearchOutcome(hits=[], embed_ms=0.0, engine_ms=(time.perf_counter() - started) * 1000), sources
        dense = await embed_call(self.embedder.embed_query, request.query) if request.mode != "keyword" else None
        sparse = self.sparse.encode_query(request.query) if request.mode != "dense" else None
        embedded = time.perf_counter()

        search_filter = SearchFilter(source_identifiers=sources, uri_prefix=raw.uriPrefix, metadata=raw.metadata)
        hits = await store_call(
            lambda: self.store.search(
                mode=request.mode,
                dense=dense,
                sparse=sparse,
                filter=search_filter,
                limit=request.limit,
                candidates=max(self.candidates, request.limit),
                fusion=self.fusion,
            )
        )
        finished = time.perf_counter()
        outcome = SearchOutcome(hits=hits, embed_ms=(embedded - started) * 1000, engine_ms=(finished - embedded) * 1000)
        self.metrics.search_seconds.labels(request.mode, "embed").observe(outcome.embed_ms / 1000)
        self.metrics.search_seconds.labels(request.mode, "engine").observe(outcome.engine_ms / 1000)
        return outcome, sources
