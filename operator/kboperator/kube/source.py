"""A KnowledgeSource's spec, typed (resource.KnowledgeSourceSpec), with every check git cannot make."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kboperator.errors import InvalidSpecError
from kboperator.kube.resource import KnowledgeSourceSpec
from kboperator.models import Credentials, RepoSpec, SyncSpec
from kboperator.repourl import RepoLocation
from kboperator.schedule import Schedule
from kboperator.sync.prepared import PreparedSync, prepare
from kboperator.urlscope import ServicePolicy

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
    prepared: PreparedSync  # without credentials: those are read only when a sync runs
    ssh: bool
    secret_name: str | None
    schedule: Schedule
    suspend: bool
    deletion_policy: str
    service: ServiceRef
    spec_hash: str

    @property
    def sync(self) -> SyncSpec:
        return self.prepared.spec

    @property
    def location(self) -> RepoLocation:
        return self.prepared.repo.location

    def with_credentials(self, credentials: Credentials | None) -> PreparedSync:
        """The prepared sync to hand to the engine, now with the repository credentials."""
        return self.prepared.with_credentials(credentials)


def source_id(namespace: str, name: str) -> str:
    """The sourceIdentifier of every document of a KnowledgeSource."""
    return f"{namespace}/{name}"


def service_ref(spec: Mapping[str, Any]) -> ServiceRef:
    """spec.searchService, leniently: cleanup needs it even when the rest of the spec is broken."""
    service = spec.get("searchService") or {}
    secret = service.get("secretRef") or {}
    return ServiceRef(service.get("url") or None, secret.get("name") or None, secret.get("key"))


def typed_service_ref(spec: KnowledgeSourceSpec) -> ServiceRef:
    """spec.searchService of a typed spec (not yet checked against the allow-list)."""
    search = spec.search_service
    secret_ref = search.secret_ref if search else None
    return ServiceRef(
        search.url if search else None,
        secret_ref.name if secret_ref else None,
        secret_ref.key if secret_ref else None,
    )


def parse_source(
    namespace: str,
    name: str,
    spec: Mapping[str, Any] | KnowledgeSourceSpec,
    *,
    allow_local: bool,
    min_interval: float = 0.0,
    services: ServicePolicy | None = None,
    local_root: Path | None = None,
    forbidden: Sequence[Path] = (),
) -> Source:
    """Type the spec (unless already typed; defaults applied) and validate; InvalidSpecError says what is
    wrong, without secrets.

    `min_interval`: the shortest schedule allowed, in seconds (see Schedule.parse);
    `services`: the search services a source may name (None: any http(s) URL, for tests);
    `local_root`, `forbidden`: where local repositories may and may not be (see parse_repo_url).
    """
    typed = spec if isinstance(spec, KnowledgeSourceSpec) else KnowledgeSourceSpec.parse(spec)
    repository = typed.repository
    sync = SyncSpec(
        source_id=source_id(namespace, name),
        repo=RepoSpec(url=repository.url, ref=repository.ref),
        include=tuple(typed.paths),
        exclude=tuple(typed.exclude),
        max_file_size=typed.max_file_size_bytes,
        metadata=typed.metadata,
        allow_local=allow_local,
        version_pattern=typed.version_pattern,
        path_weights=typed.path_weights,
    )
    prepared = prepare(sync, local_root=local_root, forbidden=forbidden)
    service = typed_service_ref(typed)
    if service.url is not None and not _SERVICE_URL.match(service.url):
        raise InvalidSpecError(f"spec.searchService.url {service.url!r} is not an http(s) URL")
    if services is not None:
        services.target(service.url)
    if service.legacy_key not in (None, SEARCH_TOKEN_KEY):
        raise InvalidSpecError(
            f"spec.searchService.secretRef.key {service.legacy_key!r} is not supported: the token is always "
            f"read from the key {SEARCH_TOKEN_KEY!r}; remove the field and store the token under that key"
        )
    # The service URL is part of the hash: a new service holds none of the documents yet.
    digest = hashlib.sha256(f"{sync.document_set_key()}|{service.url or ''}".encode()).hexdigest()[:16]
    return Source(
        source_id=sync.source_id,
        namespace=namespace,
        prepared=prepared,
        ssh=prepared.repo.location.kind == "ssh",
        secret_name=repository.secret_ref.name if repository.secret_ref else None,
        schedule=Schedule.parse(typed.schedule, min_interval=min_interval),
        suspend=typed.suspend,
        deletion_policy=typed.deletion_policy,
        service=service,
        spec_hash=digest,
    )
