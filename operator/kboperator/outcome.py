"""Writing what each reconcile step did: status fields, conditions, events and the phase metric."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import kopf

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.errors import (
    InvalidSpecError,
    MassDeletionRefusedError,
    RepositoryAuthError,
    RepositoryReadError,
    RepositoryUnavailableError,
    ServiceAuthError,
    ServiceRejectedError,
    ServiceUnavailableError,
)
from kboperator.kubesecrets import KubernetesAccessError, KubernetesUnavailableError, SecretError
from kboperator.models import SyncResult
from kboperator.schedule import format_time, parse_time, utcnow
from kboperator.services import Services, SourceState
from kboperator.source import Source, source_id
from kboperator.status import READY, SYNCED, Phase, condition, issues, last_sync, merge_conditions, summary, unlisted

# Most specific first: the reason a failure shows in conditions and events.
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (InvalidSpecError, "InvalidSpec"),
    (SecretError, "SecretUnavailable"),
    (RepositoryAuthError, "RepositoryAuthFailed"),
    (RepositoryUnavailableError, "RepositoryUnavailable"),
    (RepositoryReadError, "RepositoryReadFailed"),
    (MassDeletionRefusedError, "MassDeletionRefused"),
    (ServiceAuthError, "ServiceAuthFailed"),
    (ServiceUnavailableError, "ServiceUnavailable"),
    (ServiceRejectedError, "ServiceRejected"),
    (KubernetesUnavailableError, "KubernetesUnavailable"),
    (KubernetesAccessError, "KubernetesAccessFailed"),
)


def failure_reason(error: Exception) -> str:
    """The CamelCase reason for a failed sync."""
    return next((reason for kind, reason in _REASONS if isinstance(error, kind)), "InternalError")


def reason_of(status: Mapping[str, Any]) -> str | None:
    """The reason of the Synced condition, if any."""
    return next((c.get("reason") for c in status.get("conditions") or () if c.get("type") == SYNCED), None)


class StatusWriter:
    """Puts one step's status changes into kopf's patch and into the source's own copy."""

    def __init__(self, services: Services, state: SourceState, body: Mapping[str, Any], patch: kopf.Patch) -> None:
        meta = body.get("metadata") or {}
        self.metrics = services.metrics
        self.state = state
        self.body = body
        self.patch = patch
        self.generation = meta.get("generation")
        self.source_id = source_id(meta.get("namespace", ""), meta.get("name", ""))
        self.request = (meta.get("annotations") or {}).get(SYNC_REQUEST_ANNOTATION)
        if state.status is None:
            state.status = dict(body.get("status") or {})
        self.status: dict[str, Any] = state.status

    def stale_generation(self) -> bool:
        """Whether the status was written for an older spec."""
        return self.status.get("observedGeneration") != self.generation

    def failures(self) -> int:
        """Failed attempts since the last success."""
        return int(self.status.get("consecutiveFailures") or 0)

    def announced(self, why: str) -> None:
        """A sync is due: show it before it runs (the next timer call runs it)."""
        never_synced = not self.status.get("lastSyncTime")
        phase = Phase.PENDING if never_synced else Phase.SYNCING
        changes: dict[str, Any] = {"phase": phase.value, "observedGeneration": self.generation}
        if not self.status.get("conditions"):
            message = f"the first sync is queued ({why})"
            changes["conditions"] = self._conditions((READY, None, "Pending", message), (SYNCED, None, "Pending", message))
        self._write(changes)

    def interrupted(self) -> None:
        """Syncing at start-up: the last process may have died half-way through applying a diff."""
        self._write({"lastFullSyncTime": None})  # so the sync it owes is a full reconcile

    def suspended(self) -> None:
        """spec.suspend is true: nothing runs, nothing is planned."""
        documents = self.status.get("documentCount", 0)
        message = f"spec.suspend is true: no sync runs; the {documents} documents already indexed stay"
        self._write({
            "phase": Phase.SUSPENDED.value, "observedGeneration": self.generation, "nextSyncTime": None,
            "conditions": self._conditions((READY, False, "Suspended", message)),
        })

    def rescheduled(self, source: Source, now: datetime.datetime) -> None:
        """A spec change that keeps the document set (schedule, policy): plan the next sync anew."""
        changes: dict[str, Any] = {"observedGeneration": self.generation}
        if not self.failures():  # a failing source keeps its backoff
            base = parse_time(self.status.get("lastSyncTime")) or now
            changes["nextSyncTime"] = format_time(source.schedule.next_after(base))
        self._write(changes)

    def synced(self, source: Source, result: SyncResult, now: datetime.datetime, retry_at: datetime.datetime) -> None:
        """A sync ran to the end; the commit advances unless a document failed (skips do not count), else retry_at."""
        text = summary(result)
        changes: dict[str, Any] = {
            "observedGeneration": self.generation, "lastSyncTime": format_time(now),
            "documentCount": result.documents, "lastSync": last_sync(result),
            "skippedFiles": issues(result.skipped), "skippedFilesOmitted": unlisted(result.skipped),
            "failedFiles": issues(result.failed),
        }
        if result.drift:
            kopf.warn(self.body, reason="DriftDetected", message=f"full reconcile: {result.drift}")
        if result.rejected:
            first = result.rejected[0]
            kopf.warn(self.body, reason="DocumentsRejected", message=(
                f"{len(result.rejected)} files skipped, refused by the search service; they are tried again when "
                f"they change. First: {first.path}: {first.reason}"
            ))  # fmt: skip
        if self.request:
            changes["lastHandledSyncRequest"] = self.request
        previous = self.status.get("phase")
        if result.ok:
            changes.update({
                "phase": Phase.SYNCED.value, "lastSyncedCommit": result.commit, "shortCommit": result.commit[:12],
                "specHash": source.spec_hash, "lastSuccessfulSyncTime": format_time(now), "consecutiveFailures": 0,
                # What the next sync's drift check compares against (None: the service cannot tell).
                "collectionEpoch": result.baseline.epoch, "expectedDocumentCount": result.baseline.documents,
                "nextSyncTime": format_time(source.schedule.next_after(now)),
                "conditions": self._conditions(
                    (READY, True, "SyncSucceeded", f"{result.documents} documents mirror commit {result.commit[:12]}"),
                    (SYNCED, True, "SyncSucceeded", text),
                ),
            })
            if result.full:
                changes["lastFullSyncTime"] = format_time(now)
            changed = result.added + result.modified + result.deleted + result.renamed
            if changed or previous != Phase.SYNCED:
                kopf.info(self.body, reason="SyncCompleted", message=text)
            if result.deleted:
                kopf.info(self.body, reason="DocumentsDeleted", message=f"{result.deleted} documents deleted at {result.commit[:12]}")
        else:
            failures = self.failures() + 1
            message = f"{len(result.failed)} documents failed; retry at {format_time(retry_at)}"
            if reason_of(self.status) != "PartialSync":  # one event per failure streak, not per retry
                kopf.warn(self.body, reason="SyncPartial", message=text)
            changes.update({
                # The commit stays, but part of the diff was applied: a diff from that commit no
                # longer tells what the service lacks (a revert to it would look like no change).
                "lastFullSyncTime": None,
                "phase": Phase.FAILED.value, "consecutiveFailures": failures, "nextSyncTime": format_time(retry_at),
                "conditions": self._conditions((READY, False, "PartialSync", message), (SYNCED, False, "PartialSync", text)),
            })
        self._write(changes)

    def failed(self, error: Exception, *, retry_at: datetime.datetime | None, attempted: bool = True) -> None:
        """A sync failed (or, not attempted, the spec is invalid); retry_at None: until the spec changes."""
        reason = failure_reason(error)
        when = "not retried until the spec changes" if retry_at is None else f"retry at {format_time(retry_at)}"
        message = f"{error}; {when}" if str(error) else f"{type(error).__name__}; {when}"
        changes: dict[str, Any] = {
            "phase": Phase.FAILED.value, "observedGeneration": self.generation,
            "consecutiveFailures": self.failures() + 1,
            "nextSyncTime": format_time(retry_at) if retry_at else None,
            "conditions": self._conditions((READY, False, reason, message), (SYNCED, False, reason, message)),
        }
        if self.request:
            changes["lastHandledSyncRequest"] = self.request
        if attempted:
            changes["lastSyncTime"] = format_time(utcnow())
            # It may have failed after applying part of its changes: the retry reconciles fully.
            changes["lastFullSyncTime"] = None
        if reason != reason_of(self.status):  # one event per failure streak and reason, not per retry
            kopf.warn(self.body, reason=reason, message=message)
        self._write(changes)

    def cleanup_failed(self, message: str) -> None:
        """The deletion policy could not run: say so (the finalizer stays)."""
        self._write({"conditions": self._conditions((READY, False, "CleanupFailed", message))})
        kopf.warn(self.body, reason="CleanupFailed", message=message)

    def _conditions(self, *updates: tuple[str, bool | None, str, str]) -> list[dict[str, Any]]:
        now = format_time(utcnow())
        previous = self.status.get("conditions")
        fresh = [condition(previous, t, s, r, m, generation=self.generation, now=now) for t, s, r, m in updates]
        return merge_conditions(previous, fresh)

    def _write(self, changes: Mapping[str, Any]) -> None:
        for key, value in changes.items():
            self.patch.status[key] = value
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value
        if "phase" in changes:
            self.metrics.set_phase(self.source_id, changes["phase"])
