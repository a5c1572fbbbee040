"""Operator configuration, read from `KBOPERATOR_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class OperatorSettings(BaseSettings):
    """Everything the operator needs to know about its environment."""

    model_config = SettingsConfigDict(env_prefix="KBOPERATOR_", extra="ignore")

    search_url: str = Field("http://127.0.0.1:8000", description="Default search service base URL.")
    search_token: SecretStr | None = Field(None, description="Default search service API token.")
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated namespaces to watch; empty = cluster-wide."
    )
    allow_local_repositories: bool = Field(
        False, description="Allow local paths and file:// URLs; they read the operator's own filesystem."
    )
    max_concurrent_syncs: int = Field(4, ge=1, description="Syncs running at once across all sources.")
    cache_dir: Path = Field(Path("/var/cache/kb-operator"), description="Where the cached clones live.")
    full_reconcile_interval: float = Field(
        86400, gt=0, description="Seconds between full reconciles against the service's listing."
    )
    startup_jitter_seconds: float = Field(
        30, ge=0, description="Overdue syncs at start-up are spread over this many seconds."
    )
    min_sync_interval_seconds: float = Field(
        60.0, ge=0, description=(
            "Shortest schedule a source may have (for cron, the shortest gap between two runs); "
            "a shorter one is an invalid spec."
        ),
    )
    metrics_port: int = Field(9090, ge=0, le=65535, description="Prometheus port; 0 disables metrics.")
    http_timeout_seconds: float = Field(60, gt=0, description="Timeout of one search service request.")
    http_max_attempts: int = Field(5, ge=1, description="Tries of one search service request (429/5xx/network).")
    http_backoff_seconds: float = Field(0.5, gt=0, description="First backoff between those tries; doubles.")
    log_level: str = Field("INFO", description="Python log level.")
    retry_backoff_seconds: float = Field(
        30, gt=0, description="First delay before retrying a failed sync or cleanup; doubles each time."
    )
    retry_backoff_max_seconds: float = Field(
        3600, gt=0, description="Longest delay between retries of a failed sync or cleanup."
    )

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def clusterwide(self) -> bool:
        """No namespaces listed means watching every namespace."""
        return not self.namespaces

    def backoff(self, failures: int) -> float:
        """The delay before retry number `failures` (1-based): exponential and capped."""
        exponent = max(failures - 1, 0)
        # Cap the exponent too, so that a long failure streak cannot overflow the float.
        return min(self.retry_backoff_seconds * 2 ** min(exponent, 32), self.retry_backoff_max_seconds)
