"""One turn's view of a KnowledgeSource object: its body parsed once, at the top of the handler.

Every reader of the object in a turn (statemachine.decide, the webhook refresh, the freshness
bound, the cleanup) reads this, never the raw body. The spec is typed once
(resource.KnowledgeSourceSpec) and prepared once (source.parse_source). A spec that does not type
still yields the few fields that deletion, suspension, webhooks and cleanup need, read leniently
(`_lenient`), so that a broken spec can still be suspended and deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.errors import InvalidSpecError
from kboperator.kube.resource import KnowledgeSourceSpec
from kboperator.kube.source import ServiceRef, Source, parse_source, service_ref, source_id, typed_service_ref
from kboperator.settings import OperatorSettings

__all__ = ["Observed", "observe"]


@dataclass(frozen=True)
class Observed:
    """A KnowledgeSource as one turn of its loop (or its cleanup) sees it."""

    namespace: str
    name: str
    generation: Any
    deleting: bool
    #: The sync-request annotation's value, if any.
    request: Any
    #: The parsed and prepared spec; None when it is invalid (`invalid` says why).
    source: Source | None
    invalid: InvalidSpecError | None
    suspend: bool
    deletion_policy: str
    service: ServiceRef
    webhook_secret: str | None
    freshness_bound_seconds: int | None
    repository_url: str | None
    #: spec.driftPolicy: Auto, Manual or Ignore (statemachine.drift_check_time).
    drift_policy: str

    @property
    def source_id(self) -> str:
        return source_id(self.namespace, self.name)

    def freshness_bound(self, default: float) -> float:
        """spec.freshnessBoundSeconds when set (and positive), else the operator's default."""
        value = self.freshness_bound_seconds
        return float(value) if value is not None and value > 0 else default


def observe(body: Mapping[str, Any], settings: OperatorSettings) -> Observed:
    """Parse the object once; an invalid spec is recorded, never raised."""
    meta, raw = body.get("metadata") or {}, body.get("spec") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    source: Source | None = None
    invalid: InvalidSpecError | None = None
    typed: KnowledgeSourceSpec | None = None
    try:
        typed = KnowledgeSourceSpec.parse(raw)
        source = parse_source(
            namespace, name, typed,
            allow_local=settings.allow_local_repositories, min_interval=settings.min_sync_interval_seconds,
            services=settings.service_policy, local_root=settings.local_repositories_root,
            forbidden=[settings.cache_dir],
        )  # fmt: skip
    except InvalidSpecError as exc:
        invalid = exc
    common = {
        "namespace": namespace,
        "name": name,
        "generation": meta.get("generation"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "request": (meta.get("annotations") or {}).get(SYNC_REQUEST_ANNOTATION),
        "source": source,
        "invalid": invalid,
    }
    if typed is None:
        return Observed(**common, **_lenient(raw))
    webhook_ref = typed.webhook.secret_ref if typed.webhook else None
    return Observed(
        **common,
        suspend=typed.suspend,
        deletion_policy=typed.deletion_policy,
        service=typed_service_ref(typed),
        webhook_secret=webhook_ref.name if webhook_ref else None,
        freshness_bound_seconds=typed.freshness_bound_seconds,
        repository_url=typed.repository.url,
        drift_policy=typed.drift_policy,
    )


def _lenient(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a spec that does not type still gives: enough to suspend, delete and clean up."""
    bound = spec.get("freshnessBoundSeconds")
    url = (spec.get("repository") or {}).get("url")
    return {
        "suspend": bool(spec.get("suspend")),
        "deletion_policy": "Retain" if spec.get("deletionPolicy") == "Retain" else "Delete",
        "service": service_ref(spec),
        "webhook_secret": ((spec.get("webhook") or {}).get("secretRef") or {}).get("name") or None,
        "freshness_bound_seconds": bound if isinstance(bound, int) and not isinstance(bound, bool) else None,
        "repository_url": url if isinstance(url, str) else None,
        "drift_policy": "Ignore",  # a spec that does not type is never synced, so never checked either
    }
