"""The KnowledgeSource objects and statuses the state machine's tests build: one source, kb/docs,
synced at 11:30 and planned again for 12:30, seen at NOW (12:00)."""

from __future__ import annotations

import datetime
from typing import Any

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.source import parse_source
from kboperator.models import FileIssue, SyncResult
from kboperator.settings import OperatorSettings

NOW = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
SETTINGS = OperatorSettings(full_reconcile_interval=86400, min_sync_interval_seconds=60)
SPEC = {"repository": {"url": "https://github.com/acme/docs"}, "schedule": "@every 1h"}
#: What a sync leaves for the drift check to compare with.
BASELINE = {"collectionEpoch": "e1", "expectedDocumentCount": 3}
#: The conditions of a source whose drift check found drift.
DRIFTED = [{"type": "DriftDetected", "status": "True", "reason": "ServiceDrifted", "message": "why",
            "lastTransitionTime": "t"}]  # fmt: skip


def body(spec: dict[str, Any] | None = None, generation: int = 1, request: str | None = None) -> dict[str, Any]:
    annotations = {SYNC_REQUEST_ANNOTATION: request} if request else {}
    meta = {"name": "docs", "namespace": "kb", "generation": generation, "annotations": annotations}
    return {"metadata": meta, "spec": spec or SPEC}


def synced(**changes: Any) -> dict[str, Any]:
    """The status after a successful sync at 11:30, planned again for 12:30."""
    spec_hash = parse_source("kb", "docs", SPEC, allow_local=False).spec_hash
    status = {
        "phase": "Synced",
        "observedGeneration": 1,
        "lastSyncedCommit": "a" * 40,
        "specHash": spec_hash,
        "lastSyncTime": "2024-05-01T11:30:00Z",
        "lastFullSyncTime": "2024-05-01T11:30:00Z",
        "nextSyncTime": "2024-05-01T12:30:00Z",
    }
    return {k: v for k, v in {**status, **changes}.items() if v is not None}


def typed(status: dict[str, Any]) -> KnowledgeSourceStatus:
    """A status as the operator reads it from the object."""
    return KnowledgeSourceStatus.model_validate(status)


def partial_sync(full: bool) -> SyncResult:
    """A sync that deleted one document and failed another: the commit stays."""
    failed = [FileIssue("y.md", "not ingested: 413")]
    return SyncResult(
        commit="b" * 40, full=full, added=0, modified=0, deleted=1, renamed=0, unchanged=0,
        skipped=[], failed=failed, documents=1, duration_s=0.1,
    )  # fmt: skip
