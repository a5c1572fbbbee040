"""Service configuration, read from `SEARCHSVC_*` environment variables (see docs/operations/configuration.md).

`Settings` is made of sections, one per collaborator that reads them (`settings.storage` for the store,
`settings.embedding` for the embedder...), as Gafaelfawr's `Config`; each factory gets only its section.
The variables stay flat (`SEARCHSVC_PORT`, not `SEARCHSVC_HTTP__PORT`), and so do keyword arguments:
`Settings(api_token=...)` puts `api_token` in its section. A new setting goes in the section of the part
that reads it; a new collaborator gets a new section class below and one field on `Settings`.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

ENV_PREFIX = "SEARCHSVC_"
# Host header values of this machine, with any port: the MCP endpoint's default.
LOOPBACK_HOSTS = "127.0.0.1,127.0.0.1:*,localhost,localhost:*,[::1],[::1]:*"


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host`; a name other than localhost may resolve anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def describe(exc: ValidationError) -> str:
    """One line per problem, naming the variable; never the value (it may be a token)."""
    lines = []
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        variable = f"{ENV_PREFIX}{_field_of(error['loc'])}".upper() if _field_of(error["loc"]) else ""
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"  {variable}: {message}" if variable else f"  {message}")
    return "\n".join(lines)


def _field_of(loc: tuple[int | str, ...]) -> str | None:
    """The flat setting an error is about: `("storage", "qdrant_url")` is QDRANT_URL; a section's own check, none."""
    if loc and loc[0] in Settings.sections():
        loc = loc[1:]
    return str(loc[0]) if loc else None


def names(value: str | None) -> list[str]:
    """The items of a comma-separated setting."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


class Section(BaseSettings):
    # Errors never show the input: a token's value must not reach a log or a terminal. A section
    # alone reads its own variables (`StoreSettings()`); inside Settings it is given them.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)


class HttpSettings(Section):
    """The HTTP server and what every route answers: address, proxies, body limits, Host names (kbsearch.server)."""

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    trusted_proxies: str = Field(
        "127.0.0.1",
        description="Comma-separated proxy addresses (or `*`) whose X-Forwarded-Proto and -For are believed.",
    )
    log_level: str = Field("INFO", description="Python log level.")
    max_body_bytes: int = Field(
        8 * 1_048_576, ge=1024, description="Largest request body; JSON escaping can inflate content."
    )
    request_header_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a client has to send a request's headers before the connection is closed."
    )
    request_body_timeout_s: float = Field(
        60.0, gt=0, description="Seconds a client has to send a whole request body before a 408."
    )
    public_url: str | None = Field(
        None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="The URL clients reach this service at (https://kb.example.com); named in the OAuth resource "
        "metadata and 401 challenges instead of the request's Host. Unset: the Host, never cached.",
    )
    allowed_hosts: str | None = Field(
        None,
        description="Comma-separated Host values every route answers while reads or writes need no token "
        "(421 otherwise; same forms as SEARCHSVC_MCP_ALLOWED_HOSTS); unset: SEARCHSVC_MCP_ALLOWED_HOSTS's.",
    )
    mcp_allowed_hosts: str = Field(
        LOOPBACK_HOSTS,
        description="Comma-separated Host values /mcp answers (host, host:port, host:* for any port, * for any host).",
    )

    @field_validator("public_url")
    @classmethod
    def _no_trailing_slash(cls, url: str | None) -> str | None:
        return url.rstrip("/") if url is not None else None

    @property
    def mcp_hosts(self) -> list[str]:
        return names(self.mcp_allowed_hosts)

    @property
    def allowed_host_names(self) -> list[str]:
        return names(self.allowed_hosts) if self.allowed_hosts is not None else self.mcp_hosts


class AuthSettings(Section):
    """Who may call: static tokens, the tokens file, Kubernetes TokenReviews (kbsearch.app.build_authenticator)."""

    api_token: SecretStr | None = Field(None, description="Bearer token required for writes.")
    read_token: SecretStr | None = Field(
        None, description="Bearer token required for reads, when set. The API token also reads."
    )
    auth_mode: Literal["tokens", "kubernetes"] = Field(
        "tokens", description="tokens: static tokens only; kubernetes: static tokens, then a TokenReview."
    )
    tokens_file: Path | None = Field(
        None, description="YAML file of named tokens with write rights and source patterns; re-read on change."
    )
    kubernetes_audiences: str | None = Field(
        None, description="Comma-separated TokenReview audiences; empty: the API server's default."
    )
    kubernetes_writers: str | None = Field(
        None, description="Comma-separated Kubernetes usernames that may write (every source)."
    )
    auth_cache_seconds: float = Field(
        30.0, ge=0, description="Lifetime of cached TokenReview and SubjectAccessReview decisions."
    )
    auth_negative_cache_seconds: float = Field(
        5.0,
        ge=0,
        description="Kubernetes mode: how long a token a TokenReview refused stays refused without asking again.",
    )
    auth_max_reviews_in_flight: int = Field(
        16, ge=1, description="Kubernetes mode: TokenReviews and SubjectAccessReviews sent at once; the rest wait."
    )
    auth_max_reviews_per_client: int = Field(
        4, ge=1, description="Kubernetes mode: TokenReviews sent at once for one client address; the rest wait."
    )
    auth_cache_size: int = Field(10_000, ge=1, description="Entries each authentication cache holds at most.")
    auth_timeout_seconds: float = Field(5.0, gt=0, description="Timeout of one TokenReview or SubjectAccessReview.")
    allow_unauthenticated_writes: bool = Field(
        False, description="Start without an API token on a non-loopback address, with writes open to all."
    )

    @field_validator("api_token", "read_token")
    @classmethod
    def _usable_token(cls, token: SecretStr | None) -> SecretStr | None:
        # A token no request can present would refuse every call while the service looks healthy.
        if token is None:
            return None
        value = token.get_secret_value()
        if not value:
            raise ValueError("is set but empty; unset it or give it a value")
        if value != value.strip() or not all(0x20 <= ord(ch) < 0x7F for ch in value):
            raise ValueError(
                "must be printable ASCII without leading or trailing whitespace (often a trailing newline "
                "from a file or `echo`); a bearer token like it could never match"
            )
        return token

    @model_validator(mode="after")
    def _both_tokens(self) -> AuthSettings:
        if self.read_token is not None and self.api_token is None:
            raise ValueError("SEARCHSVC_READ_TOKEN without SEARCHSVC_API_TOKEN would leave writes open; set both")
        return self

    @property
    def authenticates(self) -> bool:
        """Whether every API call needs a token (reads included): a tokens file or Kubernetes mode."""
        return self.tokens_file is not None or self.auth_mode == "kubernetes"

    @property
    def writes_open(self) -> bool:
        """Whether anyone may write without a token (no API token, no tokens file, not Kubernetes mode)."""
        return not self.authenticates and self.api_token is None

    @property
    def audiences(self) -> list[str]:
        return names(self.kubernetes_audiences)

    @property
    def writers(self) -> list[str]:
        return names(self.kubernetes_writers)


class CompatSettings(Section):
    """What other clients expect: dot-ai's tool and REST routes, OpenAI connectors' tools (kbsearch.mcp)."""

    mcp_compat_dotai: bool = Field(
        False, description="Also offer dot-ai's manageKnowledge tool (operation ingest, search or deleteByUri)."
    )
    mcp_compat_openai: bool = Field(
        False, description="Also offer the search and fetch tools that OpenAI's connectors expect."
    )
    dotai_api: bool = Field(
        False,
        description=(
            "Also serve dot-ai's REST routes (POST /api/v1/tools/manageKnowledge, "
            "DELETE /api/v1/knowledge/source/{id}, POST /api/v1/knowledge/ask), so dot-ai's controller and UI "
            "work unchanged."
        ),
    )


class DocumentSettings(Section):
    """The write path's limits: document sizes, chunking budget, queued writes (DocumentService)."""

    max_document_bytes: int = Field(1_048_576, ge=1, description="Largest document content, in UTF-8 bytes.")
    max_source_bytes: int = Field(
        5 * 1_048_576,
        ge=1,
        description="Largest file of a converted format (PDF, Word, notebook, HTML...), in bytes after "
        "base64 decoding; its converted text must still fit max_document_bytes.",
    )
    max_document_chunks: int = Field(
        5000, ge=1, description="Chunks one document may make; past it 422 DOCUMENT_TOO_COMPLEX, nothing stored."
    )
    max_document_chunk_chars: int = Field(
        4 * 1_048_576,
        ge=1,
        description="Characters of chunk text one document may make in all; past it 422 DOCUMENT_TOO_COMPLEX.",
    )
    chunk_seconds: float = Field(
        30.0, gt=0, description="CPU seconds chunking one document may use; past it 422 DOCUMENT_TOO_COMPLEX."
    )
    chunk_concurrency: int = Field(2, ge=1, description="Documents chunked at once; more wait their turn.")
    writer_share: int = Field(
        0,
        ge=0,
        description="Conversions, and chunkings, one writer runs at once; 0: half of each's concurrency, at least 1.",
    )
    max_pending_writes: int = Field(
        64, ge=1, description="Writes queued beyond this are refused with 429 and Retry-After."
    )
    max_pending_writes_per_writer: int = Field(
        32,
        ge=1,
        description="One writer's writes queued at once (a scoped token, or one team's sources); past it 429 "
        "TOO_MANY_WRITES.",
    )
    sync_status_max_clock_skew_s: float = Field(
        300.0, ge=0, description="A sync status dated further ahead of this service's clock is refused (422)."
    )


class ConversionSettings(Section):
    """The sandboxed conversions of PDF, Word, notebooks... (kbsearch.convert.ConversionWorker)."""

    convert_memory_mb: int = Field(
        512, ge=128, description="Address space of one conversion's child process, in MiB (RLIMIT_AS)."
    )
    convert_cpu_seconds: int = Field(
        30, ge=1, description="CPU seconds one conversion may use before its child process is stopped (RLIMIT_CPU)."
    )
    convert_wall_seconds: float = Field(
        60.0, gt=0, description="Seconds one conversion may take in all before its child process is killed."
    )
    convert_concurrency: int = Field(2, ge=1, description="Conversions running at once; more wait their turn.")


class StoreSettings(Section):
    """The vector store: embedded Qdrant Edge or a Qdrant server (kbsearch.store.factory)."""

    store: Literal["edge", "qdrant"] = Field("edge", description="edge: embedded Qdrant Edge; qdrant: a server.")
    data_dir: Path = Field(Path("data"), description="Where the embedded store keeps its files.")
    edge_flush_interval_s: float = Field(
        1.0, ge=0, description="Embedded store: seconds between WAL fsyncs (group commit); 0 syncs every write."
    )
    edge_index_threshold: int = Field(
        20_000,
        ge=0,
        description="Embedded store: unindexed vectors that start a background HNSW build (child process); 0: never.",
    )
    edge_index_threads: int = Field(1, ge=1, description="Embedded store: threads of the background HNSW build.")
    min_free_disk_mb: int = Field(
        128, ge=1, description="Embedded store: below this many MiB free on the data volume, writes get 503."
    )
    collection: str = Field("knowledge", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Collection name.")
    qdrant_url: str | None = Field(None, description="Qdrant server URL, for store=qdrant.")
    qdrant_api_key: SecretStr | None = Field(None, description="Qdrant server API key.")
    qdrant_timeout_s: float = Field(30.0, gt=0, description="Qdrant request timeout.")

    @model_validator(mode="after")
    def _server_named(self) -> StoreSettings:
        if self.store == "qdrant" and not self.qdrant_url:
            raise ValueError("SEARCHSVC_QDRANT_URL is required when SEARCHSVC_STORE=qdrant")
        return self


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


class _FlatEnvironment(EnvSettingsSource):
    """`SEARCHSVC_<FIELD>` for every section's fields and Settings' own: the variables stay flat."""

    def __call__(self) -> dict[str, Any]:
        sections = Settings.sections()
        values = {name: value for name, value in super().__call__().items() if name not in sections}
        for section in sections.values():
            values.update(EnvSettingsSource(section)())
        return values


class Settings(BaseSettings):
    """The service's settings, one section per collaborator; flat names in and out of the environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)

    http: HttpSettings = Field(default_factory=HttpSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    compat: CompatSettings = Field(default_factory=CompatSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    conversion: ConversionSettings = Field(default_factory=ConversionSettings)
    storage: StoreSettings = Field(default_factory=StoreSettings)
    embedding: EmbedderSettings = Field(default_factory=EmbedderSettings)
    chunking: ChunkSettings = Field(default_factory=ChunkSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    reranking: RerankSettings = Field(default_factory=RerankSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    answers: AskSettings = Field(default_factory=AskSettings)
    insights: QueryLogSettings = Field(default_factory=QueryLogSettings)
    rebuilds: RebuildSettings = Field(default_factory=RebuildSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments first, then the flat variables; both flat, routed to sections by _route.
        return (init_settings, _FlatEnvironment(settings_cls))

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """Each section's attribute name and class."""
        return {
            name: field.annotation
            for name, field in cls.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, Section)
        }

    @classmethod
    def variables(cls) -> dict[str, FieldInfo]:
        """Every setting by its flat name (`api_token`, read from SEARCHSVC_API_TOKEN), in sections or not."""
        sections = cls.sections()
        found = {name: field for name, field in cls.model_fields.items() if name not in sections}
        for section in sections.values():
            found.update(section.model_fields)
        return found

    @model_validator(mode="before")
    @classmethod
    def _route(cls, data: Any) -> Any:
        """Flat keys (`api_token=...`, or SEARCHSVC_API_TOKEN) go to their section; a given section is kept."""
        if not isinstance(data, dict):
            return data
        sections = cls.sections()
        home = {field: name for name, kind in sections.items() for field in kind.model_fields}
        routed: dict[str, Any] = {key: value for key, value in data.items() if key not in home}
        for key, value in data.items():
            if key in home:
                section = routed.get(home[key], {})
                if isinstance(section, BaseModel):  # a section given whole, and one of its fields beside it
                    section = section.model_dump(exclude_unset=True)
                routed[home[key]] = {**section, key: value}
        for name in sections:
            # Inside Settings a missing section is made of its defaults, not read again from the environment.
            routed.setdefault(name, {})
        return routed

    @model_validator(mode="after")
    def _check(self) -> Settings:
        """What no one section can judge alone."""
        auth, host = self.auth, self.http.host
        if (
            auth.api_token is None
            and not auth.authenticates
            and not is_loopback(host)
            and not auth.allow_unauthenticated_writes
        ):
            raise ValueError(
                f"SEARCHSVC_HOST={host} is reachable from other machines and SEARCHSVC_API_TOKEN is not "
                "set, so anyone there could write and delete documents: set SEARCHSVC_API_TOKEN (or "
                "SEARCHSVC_TOKENS_FILE), or "
                "SEARCHSVC_ALLOW_UNAUTHENTICATED_WRITES=true to accept open writes"
            )
        if self.reranking.rerank == "llm" and self.chat.llm_model is None:
            raise ValueError("SEARCHSVC_RERANK=llm needs SEARCHSVC_LLM_MODEL (the chat model that ranks)")
        lo, hi = self.chunk_range
        if lo > hi:
            raise ValueError(f"chunk_min_chars ({lo}) must not exceed chunk_max_chars ({hi})")
        if self.chunking.chunk_overlap_chars >= lo:
            raise ValueError("chunk_overlap_chars must be smaller than chunk_min_chars")
        return self

    @property
    def chunk_range(self) -> tuple[int, int]:
        """(min, max) chunk characters for the configured embedder."""
        return self.chunking.range_for(self.embedding.embedder)
