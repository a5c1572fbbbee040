"""The sections of the read path and what makes its vectors: embedder, chunks, search, rerank, answers, log, rebuilds.

Each section is a `BaseSettings` of its own: alone it reads its own `SEARCHSVC_*` variables; inside
`Settings` (kbsearch.settings) it is given them, by their flat names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from kbsearch.settings.base import Section

__all__ = [
    "AskSettings",
    "ChatSettings",
    "ChunkSettings",
    "EmbedderSettings",
    "PeerSettings",
    "QueryLogSettings",
    "RebuildSettings",
    "RerankSettings",
    "SearchSettings",
]


class EmbedderSettings(Section):
    """The embedder: the bundled or a fetched local model, or an OpenAI-compatible API (kbsearch.embedders.factory)."""

    embedder: Literal["local", "openai"] = Field("local", description="local: bundled MiniLM; openai: an API.")
    local_model: str = Field(
        "all-MiniLM-L6-v2",
        description="Local model: all-MiniLM-L6-v2 (bundled), bge-small-en-v1.5 (fetched), or a model folder's path.",
    )
    local_batch_size: int = Field(32, ge=1, description="Batch size for the local model.")
    local_batch_tokens: int = Field(
        512, ge=1, le=65_536, description="ONNX backends: padded tokens per model run (small runs stay in cache)."
    )
    # onnx-int8: the fastest backend within 0.005 hybrid nDCG@10 of torch on SciFact train (bench/README.md).
    local_backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        "onnx-int8", description="How the local model runs: torch, onnx (fp32, same vectors) or onnx-int8 (quantised)."
    )
    local_threads: int = Field(
        0, ge=0, description="Threads of one local-model inference; 0: every CPU the process may use."
    )
    onnx_dir: Path | None = Field(
        None, description="Folder of the ONNX exports, made at first start if missing; default: DATA_DIR/.onnx."
    )
    models_dir: Path | None = Field(
        None,
        description="Folder of fetched local models (`make bge-model`), one folder each; default: DATA_DIR/.models.",
    )
    openai_base_url: str | None = Field(None, description="OpenAI-compatible endpoint; default is OpenAI.")
    openai_api_key: SecretStr | None = Field(None, description="API key for the OpenAI-compatible endpoint.")
    openai_model: str = Field("text-embedding-3-small", description="Embedding model name.")
    openai_dimensions: int | None = Field(
        None, ge=1, description="Requested vector size; the first response is checked against it."
    )
    openai_batch_size: int = Field(128, ge=1, le=2048, description="Texts per embeddings request.")
    openai_max_retries: int = Field(5, ge=0, description="Retries on 429/5xx/network errors, with backoff.")
    openai_timeout_s: float = Field(60.0, gt=0, description="Per-request timeout.")
    embed_cache_size: int = Field(20_000, ge=0, description="Vectors kept in the text-hash cache; 0 disables.")

    def onnx_export_dir(self, data_dir: Path) -> Path:
        """Where the ONNX exports live; `.onnx` cannot be a collection name, so it never meets one."""
        return self.onnx_dir if self.onnx_dir is not None else data_dir / ".onnx"

    def local_models_dir(self, data_dir: Path) -> Path:
        """Where fetched local models live, `<dir>/<model name>/`; `.models` is never a collection name."""
        return self.models_dir if self.models_dir is not None else data_dir / ".models"


class ChunkSettings(Section):
    """Chunk sizes, in characters; the defaults depend on the embedder (`Settings.chunk_range`): they fit MiniLM's
    256-token window."""

    chunk_min_chars: int | None = Field(None, ge=50, description="Smallest chunk; default by embedder.")
    chunk_max_chars: int | None = Field(None, ge=100, description="Largest chunk; default by embedder.")
    chunk_overlap_chars: int = Field(0, ge=0, description="Characters shared by neighbouring chunks.")

    def range_for(self, embedder: str) -> tuple[int, int]:
        """(min, max) chunk characters: ~500-800 for MiniLM, larger for OpenAI models."""
        default = (500, 800) if embedder == "local" else (1000, 2000)
        return (self.chunk_min_chars or default[0], self.chunk_max_chars or default[1])


class SearchSettings(Section):
    """Hybrid search: fusion of the dense and keyword lanes (inside the engine), turns, relevance (SearchService).

    Fusion defaults: the best setting measured on SciFact train (bench/README.md)."""

    fusion: Literal["rrf", "dbsf"] = Field(
        "dbsf", description="rrf: reciprocal rank fusion; dbsf: distribution-based score fusion (normalised scores)."
    )
    rrf_k: int = Field(2, ge=1, description="RRF constant k; larger flattens rank differences.")
    fusion_dense_weight: float = Field(
        1.0, ge=0, le=100, allow_inf_nan=False, description="Weight of the dense (embedding) lane in fusion."
    )
    fusion_keyword_weight: float = Field(
        1.0, ge=0, le=100, allow_inf_nan=False, description="Weight of the keyword (BM25) lane in fusion."
    )
    fusion_full_scores: bool = Field(
        True, description="Each lane scores every candidate of both lanes before fusion (not 0 where it missed one)."
    )
    max_concurrent_searches: int = Field(
        0, ge=0, description="Searches that run at once, handed out in turn by caller; 0: two per CPU (at least 4)."
    )
    max_searches_per_caller: int = Field(
        32, ge=1, description="One caller's searches running or waiting; past it 429 TOO_MANY_SEARCHES, Retry-After."
    )
    search_candidates: int = Field(
        100, ge=1, le=1000, description="Candidates each of dense and sparse search feeds into fusion."
    )
    default_path_weights: bool = Field(
        True,
        description="Rank blog and news posts, proposals and design documents, changelogs, generated CLI "
        "reference and contributor guides below other pages (unless the question names them); a document's "
        "rankWeight wins.",
    )
    relevance_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="A hit whose calibrated relevance is below this is not relevant: search says nothing relevant, "
        "and an answer that cites only such hits is not grounded.",
    )
    relevance_model: Literal["fitted", "curve"] = Field(
        "fitted",
        description="fitted: relevance (and the order of results) from the model fitted for the local embedder "
        "(services/search/relevance_models.json, refit: `python -m bench.calibrate`), monotone in the page "
        "evidence, so the order is the page evidence's; curve: the logistic curve over the cosine alone (below), "
        "results in the page evidence's order. An embedder with no fitted model uses the curve.",
    )
    relevance_midpoint: float = Field(
        0.35, ge=-1, le=1, description="Relevance calibration: the query-chunk cosine that maps to relevance 0.5."
    )
    relevance_steepness: float = Field(
        12.0, gt=0, le=100, description="Relevance calibration: the logistic curve's slope over the cosine."
    )

    @model_validator(mode="after")
    def _some_lane_weighs(self) -> SearchSettings:
        if self.fusion_dense_weight == 0 and self.fusion_keyword_weight == 0:
            raise ValueError(
                "SEARCHSVC_FUSION_DENSE_WEIGHT and SEARCHSVC_FUSION_KEYWORD_WEIGHT are both 0, so hybrid "
                "search would rank nothing; give at least one lane a weight above 0"
            )
        return self

    @property
    def search_slots(self) -> int:
        if self.max_concurrent_searches:
            return self.max_concurrent_searches
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(4, 2 * usable)  # a search also waits on the store (a Qdrant server is a network hop)


class RerankSettings(Section):
    """A second stage that reorders the first pages of every search, off by default (kbsearch.rerank.factory)."""

    rerank: Literal["off", "local", "remote", "llm"] = Field(
        "off",
        description="Second-stage reranker: local (an ONNX cross-encoder in SEARCHSVC_RERANK_MODEL_DIR), "
        "remote (a /rerank endpoint at SEARCHSVC_RERANK_URL) or llm (listwise, by SEARCHSVC_LLM_MODEL).",
    )
    rerank_model_dir: Path | None = Field(
        None, description="rerank=local: a directory holding one .onnx cross-encoder and its tokenizer.json."
    )
    rerank_url: str | None = Field(None, description="rerank=remote: the full URL of the /rerank endpoint.")
    rerank_api_key: SecretStr | None = Field(None, description="rerank=remote: the endpoint's API key, if any.")
    rerank_model: str | None = Field(None, description="rerank=remote: the model name sent (cohere protocol).")
    rerank_protocol: Literal["cohere", "tei"] = Field(
        "cohere", description="rerank=remote: cohere (Cohere, Jina, vLLM, Infinity) or tei (Text Embeddings Inference)."
    )
    rerank_candidates: int = Field(20, ge=2, le=100, description="First-stage pages the reranker reorders.")
    rerank_timeout_ms: float = Field(
        1000, gt=0, description="The reranker's time budget per search; past it the first-stage order is served."
    )
    rerank_max_tokens: int = Field(
        512, ge=16, le=8192, description="rerank=local: longest query+passage pair, in tokens."
    )

    @model_validator(mode="after")
    def _reranker_named(self) -> RerankSettings:
        if self.rerank == "local" and self.rerank_model_dir is None:
            raise ValueError(
                "SEARCHSVC_RERANK=local needs SEARCHSVC_RERANK_MODEL_DIR (a cross-encoder's .onnx and tokenizer.json)"
            )
        if self.rerank == "remote" and not self.rerank_url:
            raise ValueError("SEARCHSVC_RERANK=remote needs SEARCHSVC_RERANK_URL (the /rerank endpoint)")
        return self


class ChatSettings(Section):
    """The OpenAI-compatible chat model that answers asks (and ranks, for rerank=llm) (kbsearch.llm.factory)."""

    llm_model: str | None = Field(
        None, description="Chat model for ask; unset: extractive answers from the local embedder, no network."
    )
    llm_base_url: str | None = Field(None, description="OpenAI-compatible chat endpoint; default is OpenAI.")
    llm_api_key: SecretStr | None = Field(None, description="API key for the chat endpoint.")
    llm_timeout_s: float = Field(30.0, gt=0, description="Timeout of one chat request (connect, and between bytes).")
    llm_max_retries: int = Field(3, ge=0, le=10, description="Retries of a chat request on 429/5xx/connection errors.")
    llm_max_wait_s: float = Field(
        10.0, ge=0, description="Longest backoff or Retry-After wait; a server asking for longer is not retried."
    )
    llm_max_tokens: int = Field(1024, ge=16, description="Most tokens one chat answer may have.")

    @model_validator(mode="after")
    def _model_named(self) -> ChatSettings:
        if self.llm_model is None and (self.llm_base_url is not None or self.llm_api_key is not None):
            raise ValueError(
                "SEARCHSVC_LLM_BASE_URL or SEARCHSVC_LLM_API_KEY is set but SEARCHSVC_LLM_MODEL is not; "
                "set the chat model too (or unset both for extractive answers)"
            )
        return self


class AskSettings(Section):
    """Ask: grounded answers with citations, by the chat model or, without one, extractive (AskService)."""

    ask_timeout_s: float = Field(120.0, gt=0, description="Longest time one ask may take, every search and turn.")
    ask_results_per_search: int = Field(5, ge=1, le=20, description="Chunks each ask search retrieves.")
    ask_min_similarity: float = Field(
        0.3, ge=-1, le=1, description="Extractive ask: a sentence less similar than this to the question is not used."
    )
    ask_min_relevance: float = Field(
        0.25,
        ge=0,
        le=1,
        description="An answer is given, and grounded, when it cites a chunk of at least this calibrated relevance: "
        "lower than SEARCHSVC_RELEVANCE_THRESHOLD, because quoting the likeliest page is worth it at a lower "
        "probability than calling a result relevant (bench.docsqa: off-topic questions' top relevance stays under it).",
    )
    ask_answer_sentences: int = Field(
        5,
        ge=1,
        le=10,
        description="Extractive ask: passages (sentences, with the code or list they introduce) at most.",
    )


class QueryLogSettings(Section):
    """The query log and the insights read from it (QueryLog, InsightsService)."""

    query_log: Literal["on", "off"] = Field(
        "on", description="Record every search (query text, caller name, counts) for insights; off records nothing."
    )
    query_log_retention_days: int = Field(30, ge=1, description="Query log entries older than this are deleted.")
    query_log_max_entries: int = Field(
        200_000, ge=1, description="The query log keeps at most this many entries, the newest."
    )
    query_log_queue_size: int = Field(
        10_000, ge=1, description="Entries waiting to be written; past it new ones are dropped and counted."
    )
    query_log_prune_interval_s: float = Field(
        600.0, gt=0, description="Seconds between two retention passes over the query log."
    )
    insights_low_score: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Insights list a query as low-score when the calibrated relevance of its best result stays "
        "below this.",
    )


class RebuildSettings(Section):
    """Background rebuilds and their self-check (RebuildService; docs/operations/upgrades-and-reindex.md)."""

    rebuild: Literal["auto", "off"] = Field(
        "auto",
        description="auto: when the embedder, keyword encoder or chunker differs from the collection's, serve the "
        "collection as it is and rebuild a new one in the background; off: refuse to start instead.",
    )
    rebuild_pause_ms: float = Field(
        5.0, ge=0, description="Pause after each document a rebuild copies, so searches and writes go first."
    )
    # Wide enough for what the proxy queries favour (the current collection's answers to logged
    # queries, an embedding style): the v1 -> v2 chunker moved dense by -0.054 on the Argo CD docs
    # (bench/LOG.md); a broken embedder moves it by far more than this.
    rebuild_check_margin: float = Field(
        0.1,
        ge=0,
        le=1,
        description="A rebuilt collection is refused only if, in some search mode, its self-check MRR@10 is below "
        "the current collection's by more than this, and worse with 95% confidence (a paired bootstrap).",
    )
    rebuild_check_queries: int = Field(
        100,
        ge=0,
        description="Queries the self-check asks at most, drawn in turn from every source's titles and headings, "
        "a quarter at most from the query log's most frequent queries of the last 7 days.",
    )


class PeerSettings(Section):
    """Peers: other knowledge-base services every search also asks (kbsearch.peers)."""

    peers_file: Path | None = Field(None, description="YAML file of peers (name, url, tokenFile, scopes); unset: none.")
    store_name: str = Field(
        "local", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description="This store's name in hits' `stores`."
    )
    peer_timeout_seconds: float = Field(2.0, gt=0, le=60, description="A peer's time budget per search (default).")
    peer_max_response_bytes: int = Field(
        4_194_304, ge=1024, description="Largest answer read from a peer; a bigger one is left out (oversized)."
    )
    peer_breaker_failures: int = Field(3, ge=1, description="Consecutive failures that open a peer's circuit breaker.")
    peer_breaker_reset_seconds: float = Field(30.0, ge=0, description="Seconds an open breaker waits before a probe.")
