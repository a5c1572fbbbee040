"""The reconcile state machine of one KnowledgeSource: its states, and the one pure decision.

The state is status.phase (with the reason of the Synced condition), read against the object's
spec, generation and sync-request annotation. `decide` maps it to one Action; reconcile.py runs
the action (the deletion ones in the cleanup handler; the loop only waits to be stopped) and
status.py writes what it did. First match wins, top to bottom:

    input (spec, annotations, own status)             action        then (phase, reason)
    ------------------------------------------------  ------------  ------------------------------
    being deleted, deletionPolicy Retain              RETAIN        object gone, documents stay
    being deleted (deletionPolicy Delete)             DELETE        object gone once its documents are
                                                                    deleted; Ready=False CleanupFailed
                                                                    while that fails (retried)
    spec.suspend, not yet written for this spec       SUSPEND       Suspended, Ready=False Suspended
    spec.suspend, already Suspended                   WAIT          (until woken)
    Failed/InvalidSpec for this generation, no new    WAIT          (until woken: spec or request change)
      sync request
    spec does not parse (URL, ref, glob, schedule...) INVALID       Failed, InvalidSpec, no retry
    a sync is due (see below), first call after a     STAGGER       (random pause, startup jitter)
      restart and only because the schedule says so
    a sync is due, not yet announced for this spec    ANNOUNCE      Pending (never synced) or Syncing
    a sync is due and announced                       SYNC          Synced/SyncSucceeded, or Failed with
                                                                    PartialSync or a failure Reason
    generation changed, same document set, not        RESCHEDULE    same phase, nextSyncTime re-planned
      failed or suspended
    Synced, a drift check is due (drift_check_time)   CHECK_DRIFT   DriftDetected True (Warning event) or
                                                                    False; same phase
    otherwise                                         WAIT          (until nextSyncTime or the next drift
                                                                    check, or woken)

A sync is due (its Trigger): no phase yet (FIRST_SYNC); phase Pending or Syncing (ANNOUNCED: an
announced sync, or one interrupted by a restart); a new sync-request annotation (REQUESTED);
a new generation that changes the document set or leaves Failed/Suspended (SPEC_CHANGED);
Synced with the DriftDetected condition True and spec.driftPolicy Auto (DRIFTED: at once, not at
nextSyncTime); nextSyncTime reached or absent (SCHEDULED).
A due sync is full (a reconcile against the service's listing) when requested (not by a
webhook: its `push:` request asks for an incremental sync of the new commits), when the
document set changed (specHash), or when the safety pass is due (FULL_RECONCILE_INTERVAL, or
lastFullSyncTime cleared: a failed, partial or interrupted sync may have applied part of a diff;
`interrupted` tells the loop to clear it when it first finds a source Syncing after a restart),
and while the DriftDetected condition is True (whatever the policy: the diff no longer tells what
the service lacks).

Drift between syncs: a Synced source whose last sync recorded a baseline (collectionEpoch or
expectedDocumentCount) is checked every KBOPERATOR_DRIFT_CHECK_INTERVAL_SECONDS, counted from its
last sync or its last check, unless spec.driftPolicy is Ignore. The check (reconcile.py) reads the
source's counts once and judges them with sync/drift.drift_reason, the very test a sync makes
before its diff. Auto then re-syncs (DRIFTED above); Manual only shows the condition, until a
requested or scheduled sync, whose success clears it.

Reasons (`Reason`) are the exact strings written to conditions and events: a user-visible contract.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass

from kboperator.crd import PUSH_REQUEST_PREFIX
from kboperator.errors import (
    InvalidSpecError,
    KubernetesAccessError,
    KubernetesUnavailableError,
    MassDeletionRefusedError,
    RepositoryAuthError,
    RepositoryReadError,
    RepositoryUnavailableError,
    SecretError,
    ServiceAuthError,
    ServiceRejectedError,
    ServiceUnavailableError,
)
from kboperator.kube.observed import Observed
from kboperator.kube.resource import KnowledgeSourceStatus, Phase
from kboperator.kube.source import Source
from kboperator.settings import OperatorSettings

#: The condition types written to status.
READY = "Ready"
SYNCED = "Synced"
#: Present only when a freshness bound is set: False while the source is behind it.
FRESH = "FreshWithinBound"
#: True while a sync runs (its message: "syncing 25 of 126 documents"), False once it ended.
SYNCING = "Syncing"
#: True while the service no longer holds what the last sync left; written once drift is first looked for.
DRIFT = "DriftDetected"


class Action(enum.Enum):
    """What one call of the source's loop does next."""

    WAIT = "wait"  # nothing to do until `wait` seconds pass (None: until woken)
    SUSPEND = "suspend"  # write the Suspended phase
    INVALID = "invalid"  # write Failed/InvalidSpec; not retried until the spec or a request changes
    RESCHEDULE = "reschedule"  # a spec change that keeps the document set: plan the next sync anew
    STAGGER = "stagger"  # an overdue sync found at start-up: pause up to `wait` seconds first
    ANNOUNCE = "announce"  # a sync is due: show Pending/Syncing; the next call runs it
    SYNC = "sync"  # run the announced sync
    RETAIN = "retain"  # the object is being deleted, its documents stay (deletionPolicy Retain)
    DELETE = "delete"  # the object is being deleted: delete its documents first
    CHECK_DRIFT = "check-drift"  # compare the service's counts with the last sync's baseline


class Reason(enum.StrEnum):
    """Condition and event reasons, exactly as written to the API (users and alerts match on them)."""

    # Conditions (and events for failures).
    PENDING = "Pending"
    SUSPENDED = "Suspended"
    SYNC_SUCCEEDED = "SyncSucceeded"
    PARTIAL_SYNC = "PartialSync"
    CLEANUP_FAILED = "CleanupFailed"
    # Failures, most specific first: see failure_reason.
    INVALID_SPEC = "InvalidSpec"
    SECRET_UNAVAILABLE = "SecretUnavailable"
    REPOSITORY_AUTH_FAILED = "RepositoryAuthFailed"
    REPOSITORY_UNAVAILABLE = "RepositoryUnavailable"
    REPOSITORY_READ_FAILED = "RepositoryReadFailed"
    MASS_DELETION_REFUSED = "MassDeletionRefused"
    SERVICE_AUTH_FAILED = "ServiceAuthFailed"
    SERVICE_UNAVAILABLE = "ServiceUnavailable"
    SERVICE_REJECTED = "ServiceRejected"
    KUBERNETES_UNAVAILABLE = "KubernetesUnavailable"
    KUBERNETES_ACCESS_FAILED = "KubernetesAccessFailed"
    INTERNAL_ERROR = "InternalError"
    # The FreshWithinBound condition (and an event when it turns False).
    WITHIN_BOUND = "WithinBound"
    FELL_BEHIND = "FellBehind"
    # The Syncing condition.
    SYNC_RUNNING = "SyncRunning"
    SYNC_ENDED = "SyncEnded"
    SYNC_STOPPED = "SyncStopped"
    SYNC_INTERRUPTED = "SyncInterrupted"
    # The DriftDetected condition (and the DriftDetected event when it turns True).
    SERVICE_DRIFTED = "ServiceDrifted"
    NO_DRIFT = "NoDrift"
    DRIFT_REPAIRED = "DriftRepaired"
    # Events only.
    WEBHOOK_UNAVAILABLE = "WebhookUnavailable"
    SYNC_COMPLETED = "SyncCompleted"
    SYNC_PARTIAL = "SyncPartial"
    DRIFT_DETECTED = "DriftDetected"
    DOCUMENTS_REJECTED = "DocumentsRejected"
    DOCUMENTS_DELETED = "DocumentsDeleted"
    DOCUMENTS_RETAINED = "DocumentsRetained"
    DOCUMENTS_LEFT_BEHIND = "DocumentsLeftBehind"


class Trigger(enum.Enum):
    """Why a sync is due; its value is the text shown while the first sync is queued."""

    FIRST_SYNC = "first sync"
    ANNOUNCED = "announced"
    REQUESTED = "requested"
    SPEC_CHANGED = "spec changed"
    DRIFTED = "drift detected"
    SCHEDULED = "scheduled"


# Most specific first: the reason a failure shows in conditions and events.
_FAILURES: tuple[tuple[type[Exception], Reason], ...] = (
    (InvalidSpecError, Reason.INVALID_SPEC),
    (SecretError, Reason.SECRET_UNAVAILABLE),
    (RepositoryAuthError, Reason.REPOSITORY_AUTH_FAILED),
    (RepositoryUnavailableError, Reason.REPOSITORY_UNAVAILABLE),
    (RepositoryReadError, Reason.REPOSITORY_READ_FAILED),
    (MassDeletionRefusedError, Reason.MASS_DELETION_REFUSED),
    (ServiceAuthError, Reason.SERVICE_AUTH_FAILED),
    (ServiceUnavailableError, Reason.SERVICE_UNAVAILABLE),
    (ServiceRejectedError, Reason.SERVICE_REJECTED),
    (KubernetesUnavailableError, Reason.KUBERNETES_UNAVAILABLE),
    (KubernetesAccessError, Reason.KUBERNETES_ACCESS_FAILED),
)


def failure_reason(error: Exception) -> Reason:
    """The reason a failed sync shows."""
    return next((reason for kind, reason in _FAILURES if isinstance(error, kind)), Reason.INTERNAL_ERROR)


def reason_of(status: KnowledgeSourceStatus) -> str | None:
    """The reason of the Synced condition, if any."""
    synced = status.condition(SYNCED)
    return synced.reason if synced else None


@dataclass(frozen=True)
class Decision:
    """What one call of the source's loop should do, and the facts the action needs."""

    action: Action
    wait: float | None = None  # WAIT: seconds, or None until woken; STAGGER: the upper bound
    full: bool = False  # ANNOUNCE, SYNC, STAGGER: a full reconcile rather than a diff
    trigger: Trigger | None = None  # why a sync is due
    request: str | None = None  # the sync-request annotation's value, for REQUESTED
    source: Source | None = None  # the parsed spec, for every action that needs it
    error: str = ""  # INVALID: what is wrong with the spec

    @property
    def why(self) -> str:
        """The trigger as shown to users, e.g. 'requested at 2024-05-01T12:00:00Z'."""
        if self.trigger is Trigger.REQUESTED:
            return f"requested at {self.request}"
        return self.trigger.value if self.trigger else ""


def interrupted(status: KnowledgeSourceStatus, restarted: bool) -> bool:
    """Syncing when this process first sees the object: the last one may have died mid-diff.

    The caller writes that debt down (lastFullSyncTime cleared) before it decides, so that the
    sync it owes is full even when this call only announces it.
    """
    return restarted and status.phase is Phase.SYNCING


def decide(
    observed: Observed,
    status: KnowledgeSourceStatus,
    settings: OperatorSettings,
    now: datetime.datetime,
    *,
    restarted: bool = False,
    drift_checked_at: datetime.datetime | None = None,
) -> Decision:
    """The next step for one source, from its spec, annotations and our own last status.

    `restarted`: this is the first call for the object since the operator started.
    `drift_checked_at`: when this process last checked the source for drift (None: not yet).
    Deletion and suspension act even on a spec that does not parse (observed.py reads their fields
    leniently then).
    """
    if observed.deleting:
        return Decision(Action.RETAIN if observed.deletion_policy == "Retain" else Action.DELETE)
    generation = observed.generation
    phase = status.phase
    same_generation = status.observed_generation == generation
    request = observed.request
    manual = bool(request) and request != status.last_handled_sync_request
    # A webhook's request (`push:...`) asks for the new commits, not for a full reconcile.
    pushed = manual and str(request).startswith(PUSH_REQUEST_PREFIX)
    if observed.suspend:
        stale = phase != Phase.SUSPENDED or not same_generation
        return Decision(Action.SUSPEND) if stale else Decision(Action.WAIT)
    # An invalid spec (found here, or by git: an unknown ref) waits for the spec or a request to change.
    known_invalid = phase == Phase.FAILED and same_generation and reason_of(status) == Reason.INVALID_SPEC
    source = observed.source
    if source is None:
        if known_invalid and not manual:
            return Decision(Action.WAIT)
        return Decision(Action.INVALID, error=str(observed.invalid or "InvalidSpecError"))
    if known_invalid and not manual:
        return Decision(Action.WAIT)
    synced_hash = status.spec_hash
    respec = bool(synced_hash and synced_hash != source.spec_hash)
    drifted = _condition_true(status, DRIFT)
    full = (manual and not pushed) or respec or drifted or _safety_due(status, settings, now)
    trigger: Trigger
    if phase in (None, Phase.PENDING, Phase.SYNCING):
        trigger = Trigger.FIRST_SYNC if phase is None else Trigger.ANNOUNCED
    elif manual:
        trigger, full = Trigger.REQUESTED, full or not pushed
    elif not same_generation:
        if source.spec_hash == synced_hash and phase not in (Phase.FAILED, Phase.SUSPENDED):
            return Decision(Action.RESCHEDULE, source=source)
        trigger = Trigger.SPEC_CHANGED
    elif drifted and observed.drift_policy == "Auto" and phase == Phase.SYNCED:
        trigger = Trigger.DRIFTED
    else:
        planned = status.next_sync_time
        if planned is not None and now < planned:
            check_at = drift_check_time(observed, status, settings, drift_checked_at)
            if check_at is not None and check_at <= now:
                return Decision(Action.CHECK_DRIFT, source=source)
            return Decision(Action.WAIT, wait=(min(planned, check_at or planned) - now).total_seconds())
        trigger = Trigger.SCHEDULED
    due = Decision(Action.SYNC, full=full, trigger=trigger, request=request, source=source)
    if restarted and trigger is Trigger.SCHEDULED and settings.startup_jitter_seconds > 0:
        # An overdue sync found at start-up: spread them, so a restart does not sync everything at once.
        return Decision(Action.STAGGER, wait=settings.startup_jitter_seconds, full=full, trigger=trigger, source=source)
    if phase not in (Phase.PENDING, Phase.SYNCING) or not same_generation:
        return Decision(Action.ANNOUNCE, full=full, trigger=trigger, request=request, source=source)
    return due


def drift_check_time(
    observed: Observed,
    status: KnowledgeSourceStatus,
    settings: OperatorSettings,
    checked_at: datetime.datetime | None,
) -> datetime.datetime | None:
    """When the source is next checked for drift between syncs; None: it is not checked.

    Only a Synced source with a baseline is checked (a failed one is retried in full anyway), and
    not under spec.driftPolicy Ignore or with KBOPERATOR_DRIFT_CHECK_INTERVAL_SECONDS 0. A sync
    counts as a check (it made the same one), so a source checks again an interval after
    whichever came last.
    """
    interval = settings.drift_check_interval_seconds
    if interval <= 0 or observed.drift_policy == "Ignore" or status.phase != Phase.SYNCED:
        return None
    if status.collection_epoch is None and status.expected_document_count is None:
        return None  # nothing to compare with (synced by a service too old to tell)
    last = max((t for t in (status.last_sync_time, checked_at) if t is not None), default=None)
    return None if last is None else last + datetime.timedelta(seconds=interval)


def _condition_true(status: KnowledgeSourceStatus, type_: str) -> bool:
    found = status.condition(type_)
    return found is not None and found.status == "True"


def _safety_due(status: KnowledgeSourceStatus, settings: OperatorSettings, now: datetime.datetime) -> bool:
    last_full = status.last_full_sync_time
    if last_full is None:
        return bool(status.last_synced_commit)  # synced before, but never fully: do it now
    return (now - last_full).total_seconds() >= settings.full_reconcile_interval
