"""Operator configuration, read from `KBOPERATOR_*` environment variables."""

from __future__ import annotations

import secrets
from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from kboperator.errors import InvalidSpecError
from kboperator.urlscope import ServicePolicy, parse_service_url


class OperatorSettings(BaseSettings):
    """Everything the operator needs to know about its environment."""

    model_config = SettingsConfigDict(env_prefix="KBOPERATOR_", extra="ignore")

    search_url: str = Field("http://127.0.0.1:8000", description="Default search service base URL.")
    search_token: SecretStr | None = Field(None, description="Default search service API token.")
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated namespaces to watch; empty = cluster-wide."
    )
    allowed_search_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Comma-separated search service URL prefixes a KnowledgeSource may name (scheme, host, port, "
            "path prefix); the default search URL is always allowed."
        ),
    )
    allow_local_repositories: bool = Field(
        False, description="Allow local paths and file:// URLs; they read the operator's own filesystem."
    )
    local_repositories_root: Path | None = Field(
        None,
        description="The one folder local repositories must be in (required when they are allowed); never the cache.",
    )
    ssh_known_hosts_file: Path | None = Field(
        None, description="known_hosts that SSH host keys are checked against, with the Secret's own known_hosts."
    )
    ssh_trust_on_first_use: bool = Field(
        False, description="Accept an unknown SSH host key and pin it in the cache (lost on restart); false refuses it."
    )
    max_concurrent_syncs: int = Field(4, ge=1, description="Syncs running at once across all sources.")
    progress_interval_seconds: float = Field(
        5.0, ge=1, description="A running sync's progress is written to its status and service at most this often."
    )
    progress_every_documents: int = Field(
        100, ge=1, description="...or after this many documents, though never twice within a second."
    )
    cache_dir: Path = Field(Path("/var/cache/kb-operator"), description="Where the cached clones live.")
    partial_clone: bool = Field(
        False,
        description=(
            "Cached clones fetch commits and trees only (--filter=blob:none), then the blobs of the paths sources "
            "select; for monorepos whose documents are a small part. The git server must allow filters."
        ),
    )
    full_reconcile_interval: float = Field(
        86400, gt=0, description="Seconds between full reconciles against the service's listing."
    )
    startup_jitter_seconds: float = Field(
        30, ge=0, description="Overdue syncs at start-up are spread over this many seconds."
    )
    drift_check_interval_seconds: float = Field(
        300,
        ge=0,
        description=(
            "Between syncs, a synced source's counts are read from its search service this often and compared "
            "with what its last sync left (one GET); spec.driftPolicy says what drift leads to. 0 turns it off."
        ),
    )
    min_sync_interval_seconds: float = Field(
        60.0,
        ge=0,
        description=(
            "Shortest schedule a source may have (for cron, the shortest gap between two runs); "
            "a shorter one is an invalid spec."
        ),
    )
    peering_name: str = Field(
        "",
        description=(
            "Name of the kopf peering object the operator's replicas share: the live replica with the "
            "highest priority works, the others wait. Empty: standalone, for exactly one replica."
        ),
    )
    peering_priority: int | None = Field(
        None, ge=0, description="This replica's peering priority; empty: a random one at each start."
    )
    peering_lifetime_seconds: int = Field(
        60,
        ge=10,
        description=(
            "Seconds a replica's peering record lives without a keepalive: how long a replica that died "
            "without saying so (kill -9, lost node) holds the others back."
        ),
    )
    metrics_port: int = Field(9090, ge=0, le=65535, description="Prometheus port; 0 disables metrics.")
    health_port: int = Field(8080, ge=1, le=65535, description="Port of the liveness endpoint, /healthz.")
    webhook_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Port of the webhook receiver (POST /hook/<digest>); 0 (the default) turns it off.",
    )
    webhook_max_body_bytes: int = Field(
        5 * 1024 * 1024, ge=1024, description="Largest webhook delivery body accepted; larger ones get 413."
    )
    webhook_rate_per_minute: float = Field(
        30, gt=0, description="Deliveries accepted per source and minute once its burst is spent; more get 429."
    )
    webhook_burst: int = Field(10, ge=1, description="Deliveries a source may receive at once before its rate applies.")
    freshness_bound_seconds: float = Field(
        0,
        ge=0,
        description=(
            "How far behind the remote a source may fall (push to searchable, and the age of its last successful "
            "sync) before its FreshWithinBound condition turns False with a Warning event; 0 turns the check off. "
            "A source's spec.freshnessBoundSeconds overrides it."
        ),
    )
    max_search_clients: int = Field(
        32,
        ge=1,
        description="HTTP clients to search services kept open; the least recently used is closed beyond that.",
    )
    cleanup_secret_attempts: int = Field(
        5,
        ge=1,
        description=(
            "Cleanup attempts while the source's search-token Secret is unusable (gone with its namespace); "
            "then the finalizer is released with a warning and the documents stay."
        ),
    )
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

    @field_validator("namespaces", "allowed_search_urls", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("search_url")
    @classmethod
    def _check_search_url(cls, value: str) -> str:
        return _service_url(value)

    @field_validator("allowed_search_urls")
    @classmethod
    def _check_allowed(cls, value: list[str]) -> list[str]:
        return [_service_url(url) for url in value]

    @model_validator(mode="after")
    def _check_local_root(self) -> OperatorSettings:
        if not self.allow_local_repositories:
            return self
        if self.local_repositories_root is None:
            raise ValueError("KBOPERATOR_LOCAL_REPOSITORIES_ROOT is required when local repositories are allowed")
        root, cache = self.local_repositories_root.resolve(), self.cache_dir.resolve()
        if root.is_relative_to(cache):
            raise ValueError("KBOPERATOR_LOCAL_REPOSITORIES_ROOT must not be inside KBOPERATOR_CACHE_DIR")
        return self

    @cached_property
    def service_policy(self) -> ServicePolicy:
        """The search services a source may name: search_url and allowed_search_urls."""
        return ServicePolicy(self.search_url, self.allowed_search_urls)

    @cached_property
    def priority(self) -> int:
        """The peering priority; a random one when none is set, so two replicas never tie (a tie pauses both)."""
        if self.peering_priority is not None:
            return self.peering_priority
        return secrets.randbelow(2**31 - 1) + 1

    @property
    def clusterwide(self) -> bool:
        """No namespaces listed means watching every namespace."""
        return not self.namespaces

    def backoff(self, failures: int) -> float:
        """The delay before retry number `failures` (1-based): exponential and capped."""
        exponent = max(failures - 1, 0)
        # Cap the exponent too, so that a long failure streak cannot overflow the float.
        return min(self.retry_backoff_seconds * 2.0 ** min(exponent, 32), self.retry_backoff_max_seconds)


def _service_url(url: str) -> str:
    """The URL in canonical form; a settings error (not an invalid spec) when it cannot be used."""
    try:
        return str(parse_service_url(url))
    except InvalidSpecError as exc:
        raise ValueError(str(exc)) from None
