"""Hybrid, dense, keyword and literal search over the store."""

from __future__ import annotations

import asyncio
import time
import unicodedata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

from kbsearch import tracing
from kbsearch.aio.fairness import FairTurns
from kbsearch.aio.runtime import embed_call, store_call
from kbsearch.commands import SearchQuery
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.metrics import Metrics
from kbsearch.models import Fusion, QueryLogEntry, SearchHit, SearchOrigin
from kbsearch.peers.rescore import rescored
from kbsearch.peers.router import PeerAnswers, PeerRouter, Unanswered, merge
from kbsearch.services.access.scope import Caller, SourceCatalog, narrow
from kbsearch.services.search.literal import by_occurrences, literal_hits
from kbsearch.services.search.pageweights import PathWeights
from kbsearch.services.search.querylog import QueryLog
from kbsearch.services.search.ranking import PageEvidence, Relevance, collapse_pages, with_relevance
from kbsearch.services.search.rerank import RerankStage
from kbsearch.services.search.versioncheck import require_version
from kbsearch.services.serving import Serving
from kbsearch.settings import SearchSettings

# Chunks fetched per page wanted when collapsing, and the most fetched for one search.
FETCH_PER_PAGE = 8
MAX_FETCH = 200
# Calibrated for the bundled MiniLM on the docs QA dev set (bench/docsqa.py); see docs/user/api.md.
DEFAULT_RELEVANCE = Relevance(midpoint=0.35, steepness=12.0)


def configured_fusion(search: SearchSettings) -> Fusion:
    """Hybrid search's fusion as the SEARCHSVC_FUSION* settings describe it."""
    return Fusion(
        search.fusion,
        search.rrf_k,
        search.fusion_dense_weight,
        search.fusion_keyword_weight,
        search.fusion_full_scores,
    )


@dataclass(frozen=True, slots=True)
class EmbeddedQuery:
    """A search's query vector and the embedder that made it (a rebuild's swap may change it)."""

    embedder: EmbeddingProvider
    vector: list[float]


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    hits: list[SearchHit]
    embed_ms: float  # query embedding (dense and sparse)
    engine_ms: float  # the store's own query time
    relevant_at: float = 0.5  # the relevance threshold: below it a hit is probably not about the query
    rerank_ms: float = 0.0  # the second stage, when one is configured
    store: str = "local"  # the local store's name: a hit with no `stores` of its own came from it
    unanswered: tuple[Unanswered, ...] = ()  # peers in the caller's reach that did not answer
    peers_ms: float = 0.0  # waiting for peers after the local search was done, and re-scoring their hits
    query: EmbeddedQuery | None = field(default=None, repr=False)  # None: no local search ran

    @property
    def nothing_relevant(self) -> bool:
        return all((hit.relevance or 0.0) < self.relevant_at for hit in self.hits)

    def named_hits(self) -> list[SearchHit]:
        """The hits, each naming its store(s): the local store's name where a hit names none."""
        return [h if h.stores else replace(h, stores=(self.store,)) for h in self.hits]

    @property
    def partial(self) -> bool:
        return bool(self.unanswered)

    @property
    def took_ms(self) -> float:
        return self.embed_ms + self.engine_ms + self.rerank_ms + self.peers_ms


class SearchService:
    def __init__(
        self,
        settings: SearchSettings,
        *,
        serving: Serving,
        metrics: Metrics,
        catalog: SourceCatalog,
        query_log: QueryLog | None = None,
        relevance: Relevance = DEFAULT_RELEVANCE,
        turns: FairTurns | None = None,
        rerank: RerankStage | None = None,
        peers: PeerRouter | None = None,
        store_name: str = "local",
    ) -> None:
        self.peers = peers if peers is not None and peers.peers else None
        self.store_name = store_name
        self.turns = turns
        self.rerank = rerank
        self.path_weights = PathWeights(
            lambda text: self.serving.sparse.tokens(text), defaults=settings.default_path_weights
        )
        # The store, embedder and encoder, and the gate every search holds shared and a rebuild's
        # swap exclusively: no query is embedded by one model and answered from a collection built by another.
        self.serving = serving
        self.query_log = query_log
        self.catalog = catalog
        self.metrics = metrics
        self.fusion = configured_fusion(settings)
        self.candidates = settings.search_candidates
        self.relevance = relevance
        self.relevant_at = settings.relevance_threshold

    async def search_unlogged(self, request: SearchQuery, caller: Caller) -> SearchOutcome:
        """A search kept out of the query log (the service's own, such as a rebuild's self-check)."""
        outcome, _ = await self._search(request, caller)
        return outcome

    async def search(
        self, request: SearchQuery, caller: Caller, *, origin: SearchOrigin = "api", ask_peers: bool = True
    ) -> SearchOutcome:
        """The caller's search; `origin` names the face it came through (REST, MCP, console, ask).
        `ask_peers=False`: this store alone (a peer's own search, which must not fan out again).

        Every search, whatever its face, is recorded in the query log here, and only here. With peers,
        they are asked at once and waited for outside the caller's turn (their time is not local work).
        """
        with tracing.retrieval(self.store_name, request.limit, request.mode) as span:
            outcome = await self._search_traced(request, caller, origin=origin, ask_peers=ask_peers)
            span.retrieved(outcome.hits, tracing.documents_shown())
        return outcome

    async def _search_traced(
        self, request: SearchQuery, caller: Caller, *, origin: SearchOrigin, ask_peers: bool
    ) -> SearchOutcome:
        asking = None
        if self.peers is not None and ask_peers:
            asking = asyncio.create_task(self.peers.ask(request, caller.scope.patterns, caller.scope.allows))
        try:
            async with self._turn(caller):
                outcome, sources = await self._search(request, caller)
        except BaseException:
            if asking is not None:
                asking.cancel()
            raise
        if asking is not None:
            outcome = await self._merged(request, caller, outcome, asking)
        if self.query_log is not None:
            self.query_log.record(
                QueryLogEntry(
                    at=time.time(),
                    origin=origin,
                    query=request.query,
                    results=len(outcome.hits),
                    # The calibrated relevance, not the fusion's score: "low score" must mean the same
                    # under every fusion (the insights' low-score list reads it).
                    top_score=max((h.relevance or 0.0 for h in outcome.hits), default=None),
                    latency_ms=round(outcome.took_ms, 3),
                    caller=caller.name,
                    sources=sources,
                )
            )
        if not outcome.hits and self.peers is None and ask_peers:
            # Nothing found: say so if the version itself is absent (peers might hold it, so not with peers).
            await require_version(self.serving.store, request.filter, sources)
        return outcome

    async def _merged(
        self, request: SearchQuery, caller: Caller, local: SearchOutcome, asking: asyncio.Task[PeerAnswers]
    ) -> SearchOutcome:
        """The local outcome with the peers' hits merged in by relevance, naming the peers that did not answer.

        A peer's relevance is its claim: its hits are re-scored here, by this service's model and
        calibration, in the caller's turn (the embedding is local work) and under the gate (one model)."""
        assert self.peers is not None
        started = time.perf_counter()
        answers = await asking
        peer_hits = answers.hits
        if any(peer_hits):
            async with self._turn(caller), self.serving.shared():
                query = local.query
                if query is None or query.embedder is not self.serving.embedder:
                    query = await self._embed_query(caller, request.query)
                sparse = self.serving.sparse
                query_stems, stems = sparse.tokens(request.query), sparse.tokens
                peer_hits = await rescored(
                    peer_hits,
                    query.vector,
                    self.serving.embedder.partition(caller.partition),
                    lambda hits, scores, mores: self.relevance.ranked(hits, scores, mores, query_stems, stems),
                )
        hits = merge(local.hits, peer_hits, request.limit, collapse=request.collapse, local_store=self.store_name)
        self.peers.count_contributions(hits)
        waited = (time.perf_counter() - started) * 1000
        return replace(local, hits=hits, unanswered=tuple(answers.unanswered), peers_ms=waited)

    @asynccontextmanager
    async def _turn(self, caller: Caller) -> AsyncIterator[None]:
        if self.turns is None:
            yield
        else:
            async with self.turns.turn(caller.name):  # one caller's burst waits behind others' turns
                yield

    async def _embed_query(self, caller: Caller, query: str) -> EmbeddedQuery:
        """The query's vector, in the caller's own cache partition: a hit on another caller's query would
        show in the timing. NFKC as the keyword lane and the PDF text have it: "ﬂow" asks for "flow"."""
        embedder = self.serving.embedder
        with tracing.embedding(embedder.provider, embedder.model):
            vector = await embed_call(
                embedder.partition(caller.partition).embed_query, unicodedata.normalize("NFKC", query)
            )
        return EmbeddedQuery(embedder, vector)

    async def _search(self, request: SearchQuery, caller: Caller) -> tuple[SearchOutcome, list[str] | None]:
        """The outcome, and the sources the search was scoped to (None: every source)."""
        async with self.serving.shared():
            return await self._search_held(request, caller)

    async def _search_held(self, request: SearchQuery, caller: Caller) -> tuple[SearchOutcome, list[str] | None]:
        started = time.perf_counter()
        # The caller's scope is part of the engine filter, so `limit` is filled from what it may see.
        with tracing.span("scope resolution"):
            sources = narrow(request.filter.source_identifiers, await caller.scope.resolve(self.catalog))
        if sources == []:
            elapsed = (time.perf_counter() - started) * 1000
            empty = SearchOutcome(
                hits=[], embed_ms=0.0, engine_ms=elapsed, relevant_at=self.relevant_at, store=self.store_name
            )
            return empty, sources
        # Keyword mode embeds the query too: not to rank, but for every hit's relevance.
        query = await self._embed_query(caller, request.query)
        dense = query.vector
        store, encoder = self.serving.store, self.serving.sparse
        sparse = encoder.encode_query(request.query) if request.mode != "dense" else None
        embedded = time.perf_counter()

        search_filter = replace(request.filter, source_identifiers=sources)
        literal = request.mode == "literal"
        # Collapsing needs more chunks than pages: several chunks and versions of one page compete; a
        # literal search drops the engine's chunks that do not hold the text exactly.
        wide = request.collapse or literal
        fetch = min(MAX_FETCH, max(self.candidates, request.limit * FETCH_PER_PAGE)) if wide else request.limit
        with tracing.engine(store.backend, store.collection, request.mode):
            hits = await store_call(
                lambda: store.search(
                    mode=request.mode,
                    dense=dense,
                    sparse=sparse,
                    filter=search_filter,
                    limit=fetch,
                    candidates=max(self.candidates, fetch),
                    fusion=self.fusion,
                    phrase=request.query if literal else None,
                )
            )
        evidence = PageEvidence(
            encoder.tokens(request.query), encoder.tokens, self.path_weights.for_query(request.query)
        )
        if literal:
            hits = literal_hits(hits, request.query, case_sensitive=request.case_sensitive)
        if request.collapse:
            # A literal search cuts after ordering by occurrences, not by relevance.
            hits = collapse_pages(hits, len(hits) if literal else request.limit, self.relevance, evidence)
        else:
            hits = with_relevance(hits, self.relevance, evidence)
        if literal:
            hits = by_occurrences(hits)[: request.limit]
        ranked = time.perf_counter()
        # The one second stage of every face: it reorders by meaning, which a literal search does not ask for.
        if self.rerank is not None and not literal:
            hits = await self.rerank.rerank(request.query, hits)
        finished = time.perf_counter()
        outcome = SearchOutcome(
            hits=hits,
            embed_ms=(embedded - started) * 1000,
            engine_ms=(ranked - embedded) * 1000,
            relevant_at=self.relevant_at,
            rerank_ms=(finished - ranked) * 1000,
            store=self.store_name,
            query=query,
        )
        self.metrics.search_seconds.labels(request.mode, "embed").observe(outcome.embed_ms / 1000)
        self.metrics.search_seconds.labels(request.mode, "engine").observe(outcome.engine_ms / 1000)
        return outcome, sources
