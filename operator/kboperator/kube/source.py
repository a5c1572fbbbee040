"""A KnowledgeSource's spec with the CRD defaults applied and every check git cannot make."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kboperator.errors import InvalidSpecError
from kboperator.models import Credentials, RepoSpec, SyncSpec
from kboperator.repourl import RepoLocation, parse_repo_url, validate_ref
from kboperator.schedule import Schedule
from kboperator.sync.documents import validate_spec
from kboperator.urlscope import ServicePolicy

DEFAULT_PATHS = ("**/*.md",)
DEFAULT_SCHEDULE = "@every 1h"
DEFAULT_MAX_FILE_SIZE = 1_048_576
SEARCH_TOKEN_KEY = "token"
_SERVICE_URL = re.compile(r"^https?://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?(/[^\s@]*)?$")


@dataclass(frozen=True)
class ServiceRef:
    """A per-source search service override: a URL, and the Secret holding its token (key `token`)."""

    url: str | None
    secret_name: str | None
    #: The deprecated spec.searchService.secretRef.key, when given: anything but `token` is invalid.
    legacy_key: str | None = None


@dataclass(frozen=True)
class Source:
    """Everything the operator needs from one KnowledgeSource object."""

    source_id: str
    namespace: str
    sync: SyncSpec  # without credentials: those are read only when a sync runs
    location: RepoLocation
    ssh: bool
    secret_name: str | None
    schedule: Schedule
    suspend: bool
    deletion_policy: str
    service: ServiceRef
    spec_hash: str

    def with_credentials(self, credentials: Credentials | None) -> SyncSpec:
        """The SyncSpec to hand to the engine, now with the repository credentials."""
        return replace(self.sync, repo=replace(self.sync.repo, credentials=credentials))


def source_id(namespace: str, name: str) -> str:
    """The sourceIdentifier of every document of a KnowledgeSource."""
    return f"{namespace}/{name}"


def service_ref(spec: Mapping[str, Any]) -> ServiceRef:
    """spec.searchService, leniently: cleanup needs it even when the rest of the spec is broken."""
    service = spec.get("searchService") or {}
    secret = service.get("secretRef") or {}
    return ServiceRef(service.get("url") or None, secret.get("name") or None, secret.get("key"))


def parse_source(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    *,
    allow_local: bool,
    min_interval: float = 0.0,
    services: ServicePolicy | None = None,
    local_root: Path | None = None,
    forbidden: Sequence[Path] = (),
) -> Source:
    """Apply defaults and validate; InvalidSpecError says what is wrong, without secrets.

    `min_interval`: the shortest schedule allowed, in seconds (see Schedule.parse);
    `services`: the search services a source may name (None: any http(s) URL, for tests);
    `local_root`, `forbidden`: where local repositories may and may not be (see parse_repo_url).
    """
    repository = spec.get("repository") or {}
    url = repository.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidSpecError("spec.repository.url is required")
    ref = repository.get("ref") or "main"
    location = parse_repo_url(url, allow_local=allow_local, local_root=local_root, forbidden=forbidden)
    validate_ref(ref)
    sync = SyncSpec(
        source_id=source_id(namespace, name),
        repo=RepoSpec(url=url, ref=ref),
        include=tuple(spec.get("paths") or DEFAULT_PATHS),
        exclude=tuple(spec.get("exclude") or ()),
        max_file_size=_positive_int(spec.get("maxFileSizeBytes", DEFAULT_MAX_FILE_SIZE)),
        metadata=dict(spec.get("metadata") or {}),
        allow_local=allow_local,
        version_pattern=spec.get("versionPattern") or None,
    )
    validate_spec(sync)
    service = service_ref(spec)
    if service.url is not None and not _SERVICE_URL.match(service.url):
        raise InvalidSpecError(f"spec.searchService.url {service.url!r} is not an http(s) URL")
    if services is not None:
        services.target(service.url)
    if service.legacy_key not in (None, SEARCH_TOKEN_KEY):
        raise InvalidSpecError(
            f"spec.searchService.secretRef.key {service.legacy_key!r} is not supported: the token is always "
            f"read from the key {SEARCH_TOKEN_KEY!r}; remove the field and store the token under that key"
        )
    policy = spec.get("deletionPolicy") or "Delete"
    if policy not in ("Delete", "Retain"):
        raise InvalidSpecError(f"spec.deletionPolicy must be Delete or Retain, not {policy!r}")
    secret = (repository.get("secretRef") or {}).get("name") or None
    # The service URL is part of the hash: a new service holds none of the documents yet.
    digest = hashlib.sha256(f"{sync.document_set_key()}|{service.url or ''}".encode()).hexdigest()[:16]
    return Source(
        source_id=sync.source_id,
        namespace=namespace,
        sync=sync,
        location=location,
        ssh=location.kind == "ssh",
        secret_name=secret,
        schedule=Schedule.parse(str(spec.get("schedule") or DEFAULT_SCHEDULE), min_interval=min_interval),
        suspend=bool(spec.get("suspend", False)),
        deletion_policy=policy,
        service=service,
        spec_hash=digest,
    )


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSpecError(f"spec.maxFileSizeBytes must be a positive integer, not {value!r}")
    return value
