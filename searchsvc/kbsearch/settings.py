"""Service configuration, read from `SEARCHSVC_*` environment variables (see README)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "SEARCHSVC_"


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
        variable = f"{ENV_PREFIX}{error['loc'][0]}".upper() if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"  {variable}: {message}" if variable else f"  {message}")
    return "\n".join(lines)


class Settings(BaseSettings):
    # Errors never show the input: a token's value must not reach a log or a terminal.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)

    # HTTP
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
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
    auth_cache_size: int = Field(10_000, ge=1, description="Entries each authentication cache holds at most.")
    auth_timeout_seconds: float = Field(5.0, gt=0, description="Timeout of one TokenReview or SubjectAccessReview.")
    allow_unauthenticated_writes: bool = Field(
        False, description="Start without an API token on a non-loopback address, with writes open to all."
    )
    max_document_bytes: int = Field(1_048_576, ge=1, description="Largest document content, in UTF-8 bytes.")
    max_body_bytes: int = Field(
        8 * 1_048_576, ge=1024, description="Largest request body; JSON escaping can inflate content."
    )
    request_header_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a client has to send a request's headers before the connection is closed."
    )
    request_body_timeout_s: float = Field(
        60.0, gt=0, description="Seconds a client has to send a whole request body before a 408."
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
    def _check(self) -> Settings:
        if self.read_token is not None and self.api_token is None:
            raise ValueError("SEARCHSVC_READ_TOKEN without SEARCHSVC_API_TOKEN would leave writes open; set both")
        if (
            self.api_token is None
            and self.tokens_file is None
            and self.auth_mode == "tokens"
            and not is_loopback(self.host)
            and not self.allow_unauthenticated_writes
        ):
            raise ValueError(
                f"SEARCHSVC_HOST={self.host} is reachable from other machines and SEARCHSVC_API_TOKEN is not "
                "set, so anyone there could write and delete documents: set SEARCHSVC_API_TOKEN (or "
                "SEARCHSVC_TOKENS_FILE), or "
                "SEARCHSVC_ALLOW_UNAUTHENTICATED_WRITES=true to accept open writes"
            )
        if self.store == "qdrant" and not self.qdrant_url:
            raise ValueError("SEARCHSVC_QDRANT_URL is required when SEARCHSVC_STORE=qdrant")
        lo, hi = self.chunk_range
        if lo > hi:
            raise ValueError(f"chunk_min_chars ({lo}) must not exceed chunk_max_chars ({hi})")
        if self.chunk_overlap_chars >= lo:
            raise ValueError("chunk_overlap_chars must be smaller than chunk_min_chars")
        return self

    @property
    def authenticates(self) -> bool:
        """Whether every API call needs a token (reads included): a tokens file or Kubernetes mode."""
        return self.tokens_file is not None or self.auth_mode == "kubernetes"

    @staticmethod
    def _names(value: str | None) -> list[str]:
        return [item.strip() for item in (value or "").split(",") if item.strip()]

    @property
    def audiences(self) -> list[str]:
        return self._names(self.kubernetes_audiences)

    @property
    def writers(self) -> list[str]:
        return self._names(self.kubernetes_writers)

    @property
    def onnx_export_dir(self) -> Path:
        """Where the ONNX exports live; `.onnx` cannot be a collection name, so it never meets one."""
        return self.onnx_dir if self.onnx_dir is not None else self.data_dir / ".onnx"

    @property
    def chunk_range(self) -> tuple[int, int]:
        """(min, max) chunk characters: ~500-800 for MiniLM, larger for OpenAI models."""
        default = (500, 800) if self.embedder == "local" else (1000, 2000)
        return (self.chunk_min_chars or default[0], self.chunk_max_chars or default[1])
