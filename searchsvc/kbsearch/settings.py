"""Service configuration, read from `SEARCHSVC_*` environment variables (see README)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SEARCHSVC_", extra="ignore")

    # HTTP
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    api_token: SecretStr | None = Field(None, description="Bearer token required for writes.")
    read_token: SecretStr | None = Field(
        None, description="Bearer token required for reads, when set. The API token also reads."
    )
    max_document_bytes: int = Field(1_048_576, ge=1, description="Largest document content, in UTF-8 bytes.")
    max_body_bytes: int = Field(
        8 * 1_048_576, ge=1024, description="Largest request body; JSON escaping can inflate content."
    )
    max_pending_writes: int = Field(
        64, ge=1, description="Writes queued beyond this are refused with 429 and Retry-After."
    )
    log_level: str = Field("INFO", description="Python log level.")

    # Vector store
    store: Literal["edge", "qdrant"] = Field("edge", description="edge: embedded Qdrant Edge; qdrant: a server.")
    data_dir: Path = Field(Path("data"), description="Where the embedded store keeps its files.")
    edge_flush_interval_s: float = Field(
        1.0, ge=0, description="Embedded store: seconds between WAL fsyncs (group commit); 0 syncs every write."
    )
    min_free_disk_mb: int = Field(
        128, ge=1, description="Embedded store: below this many MiB free on the data volume, writes get 503."
    )
    collection: str = Field("knowledge", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Collection name.")
    qdrant_url: str | None = Field(None, description="Qdrant server URL, for store=qdrant.")
    qdrant_api_key: SecretStr | None = Field(None, description="Qdrant server API key.")
    qdrant_timeout_s: float = Field(30.0, gt=0, description="Qdrant request timeout.")

    # Embeddings
    embedder: Literal["local", "openai"] = Field("local", description="local: bundled MiniLM; openai: an API.")
    local_model: str = Field(
        "all-MiniLM-L6-v2", description="Model name or path for the local embedder (bundled by default)."
    )
    local_batch_size: int = Field(32, ge=1, description="Batch size for the local model.")
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

    # Chunking (characters). Defaults fit MiniLM's 256-token window.
    chunk_min_chars: int | None = Field(None, ge=50, description="Smallest chunk; default by embedder.")
    chunk_max_chars: int | None = Field(None, ge=100, description="Largest chunk; default by embedder.")
    chunk_overlap_chars: int = Field(0, ge=0, description="Characters shared by neighbouring chunks.")

    # Hybrid search
    # k=2 (also Qdrant's own default) scored best on SciFact train: 0.735 nDCG@10 vs 0.724 at 60.
    rrf_k: int = Field(2, ge=1, description="RRF constant k; larger flattens rank differences.")
    search_candidates: int = Field(
        100, ge=1, le=1000, description="Candidates each of dense and sparse search feeds into fusion."
    )

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.read_token is not None and self.api_token is None:
            raise ValueError("SEARCHSVC_READ_TOKEN without SEARCHSVC_API_TOKEN would leave writes open; set both")
        if self.store == "qdrant" and not self.qdrant_url:
            raise ValueError("SEARCHSVC_QDRANT_URL is required when SEARCHSVC_STORE=qdrant")
        lo, hi = self.chunk_range
        if lo > hi:
            raise ValueError(f"chunk_min_chars ({lo}) must not exceed chunk_max_chars ({hi})")
        if self.chunk_overlap_chars >= lo:
            raise ValueError("chunk_overlap_chars must be smaller than chunk_min_chars")
        return self

    @property
    def chunk_range(self) -> tuple[int, int]:
        """(min, max) chunk characters: ~500-800 for MiniLM, larger for OpenAI models."""
        default = (500, 800) if self.embedder == "local" else (1000, 2000)
        return (self.chunk_min_chars or default[0], self.chunk_max_chars or default[1])
