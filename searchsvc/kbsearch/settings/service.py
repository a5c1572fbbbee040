"""The sections of the service's edges: how it is reached, who may call, what a write may cost, where it stores.

Each section is a `BaseSettings` of its own: alone it reads its own `SEARCHSVC_*` variables
(`StoreSettings()`); inside `Settings` (kbsearch.settings) it is given them, by their flat names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from kbsearch.settings.base import LOOPBACK_HOSTS, Section, names

__all__ = [
    "AuthSettings",
    "CompatSettings",
    "ConversionSettings",
    "DocumentSettings",
    "HttpSettings",
    "StoreSettings",
]


# Peak bytes of memory per body byte while a body is parsed: JSON of small objects ({},{},...) takes
# about 25 bytes a byte in Python objects, the body itself two more (docs/operations/memory.md).
BODY_EXPANSION = 32
# What one open connection may hold of a body not yet asked for: uvicorn stops reading a socket past
# 64 KiB buffered, asyncio reads 256 KiB at a time; with h11's own buffer, under half a MiB.
CONNECTION_BUFFER_BYTES = 512 * 1024


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
    body_bytes_in_flight: int = Field(
        0,
        ge=0,
        description="Request body bytes read and handled at once, all callers together; a body past it is "
        "refused unread with 503 SERVICE_BUSY and Retry-After. 0: a quarter of the memory limit over "
        f"{BODY_EXPANSION} (what parsing a body may cost per byte), at least twice max_body_bytes; without a "
        "known limit, four times max_body_bytes.",
    )
    body_bytes_in_flight_per_caller: int = Field(
        0,
        ge=0,
        description="Request body bytes one caller (a token; without tokens, a client address) has read and "
        "handled at once; past it 429 BODY_BUDGET_EXCEEDED, unread, with Retry-After. 0: a quarter of "
        "body_bytes_in_flight, at least max_body_bytes.",
    )
    memory_limit_mb: int = Field(
        0,
        ge=0,
        description="The container's memory limit in MiB, from which the body budget is derived and which the "
        "embedded store's index builds are checked against (the chart passes limits.memory); 0: the cgroup's "
        "memory.max when there is one.",
    )
    malloc_mmap_threshold_bytes: int = Field(
        262_144,
        ge=0,
        description="glibc: allocations from this size up get their own mapping, returned to the system when "
        "freed, so memory comes back after a burst of large bodies; 0: glibc's own sliding threshold.",
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
    # Metrics name the peers and show when searches run: never on the API port (kbsearch.metrics).
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Port of the Prometheus metrics listener (GET /metrics, no token), on SEARCHSVC_HOST; keep it "
        "reachable by monitoring alone. Unset: no metrics are served. The API port never serves them.",
    )

    @model_validator(mode="after")
    def _metrics_apart(self) -> HttpSettings:
        if self.metrics_port == self.port:
            raise ValueError("SEARCHSVC_METRICS_PORT must differ from SEARCHSVC_PORT")
        return self

    @field_validator("public_url")
    @classmethod
    def _no_trailing_slash(cls, url: str | None) -> str | None:
        return url.rstrip("/") if url is not None else None

    def memory_limit_bytes(self, cgroup: Path = Path("/sys/fs/cgroup/memory.max")) -> int | None:
        """The memory this process may use: memory_limit_mb, or its cgroup's (v2) limit; None when unbounded."""
        if self.memory_limit_mb:
            return self.memory_limit_mb * 1_048_576
        try:
            value = cgroup.read_text().strip()
        except OSError:  # no cgroup v2 here (a laptop, cgroup v1)
            return None
        return int(value) if value.isdigit() else None  # "max": no limit

    def body_budget(self, memory_limit_bytes: int | None) -> tuple[int, int]:
        """(all callers', one caller's) body bytes in flight, derived where set to 0."""
        one = self.max_body_bytes
        total = self.body_bytes_in_flight
        if not total:
            total = max(2 * one, memory_limit_bytes // 4 // BODY_EXPANSION) if memory_limit_bytes else 4 * one
        per_caller = self.body_bytes_in_flight_per_caller or max(one, total // 4)
        return max(total, per_caller), per_caller

    @property
    def mcp_hosts(self) -> list[str]:
        return names(self.mcp_allowed_hosts)

    @property
    def allowed_host_names(self) -> list[str]:
        return names(self.allowed_hosts) if self.allowed_hosts is not None else self.mcp_hosts


class AuthSettings(Section):
    """Who may call: static tokens, the tokens file, Kubernetes TokenReviews (Factory.create_authenticator)."""

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
        description=(
            "Characters stored with one document's chunks in all (text, plus the title, tags and headings "
            "each carries); past it 422 DOCUMENT_TOO_COMPLEX."
        ),
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
    vector_reuse: Literal["readable", "source", "off"] = Field(
        "readable",
        description="Where a write looks for a stored vector of the same chunk text before embedding it: "
        "readable (the sources the writing caller may read), source (its own source only), off (none).",
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
    qdrant_shards: int = Field(
        1,
        ge=1,
        le=1024,
        description="Qdrant server: shards (shard_number) of each collection the service creates; "
        "a cluster spreads them over its nodes. An existing collection keeps its own.",
    )
    qdrant_replication_factor: int = Field(
        1,
        ge=1,
        le=16,
        description="Qdrant server: copies of each shard (replication_factor) in a collection the service "
        "creates; 2 or more lets a cluster lose a node and keep serving. An existing collection keeps its own.",
    )
    qdrant_ready_timeout_s: float = Field(
        2.0, gt=0, le=30, description="Qdrant server: seconds /readyz waits for its count of the collection."
    )

    @model_validator(mode="after")
    def _server_named(self) -> StoreSettings:
        if self.store == "qdrant" and not self.qdrant_url:
            raise ValueError("SEARCHSVC_QDRANT_URL is required when SEARCHSVC_STORE=qdrant")
        return self
