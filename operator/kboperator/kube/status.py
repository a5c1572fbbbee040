"""Writing what each step of the state machine did: status fields, conditions, events, the phase metric.

`StatusWriter` consumes statemachine.py's decisions and the sync's result and writes through the
typed status (resource.KnowledgeSourceStatus); the functions above it shape status fields (bounded
lists, conditions that follow the Kubernetes API conventions).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

import kopf

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.resource import (
    Condition,
    Freshness,
    JudgedQuality,
    KnowledgeSourceStatus,
    LastSync,
    Phase,
    SyncProgress,
)
from kboperator.kube.source import Source, source_id
from kboperator.kube.statemachine import (
    DRIFT,
    FRESH,
    READY,
    SYNCED,
    SYNCING,
    Action,
    Decision,
    Reason,
    failure_reason,
    reason_of,
)
from kboperator.models import FileIssue, Quality, SyncResult
from kboperator.models import Freshness as ReportedFreshness
from kboperator.schedule import format_time, utcnow
from kboperator.sync.reporting import Snapshot

#: Bounded lists in status: the CRD's maxItems, so that a huge repository cannot bloat the object.
MAX_LISTED_FILES = 50
MAX_LISTED_QUESTIONS = 5  # status.quality.failedQuestions
#: Kubernetes caps a condition message at 32 KiB; stay well below it.
MAX_MESSAGE = 2000


def condition(
    previous: Sequence[Condition] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime.datetime,
) -> Condition:
    """One condition; lastTransitionTime moves only when the status itself changes."""
    text: Literal["True", "False", "Unknown"] = "Unknown" if status is None else ("True" if status else "False")
    old = next((c for c in previous or () if c.type == type_), None)
    since = old.last_transition_time if old and old.status == text else None
    made = Condition(type=type_, status=text, reason=reason, message=message[:MAX_MESSAGE],
                     last_transition_time=since or now)  # fmt: skip
    if generation is not None:  # set only when known: an unset field stays out of the patch
        made.observed_generation = generation
    return made


def merge_conditions(previous: Sequence[Condition] | None, updates: Iterable[Condition]) -> list[Condition]:
    """The previous conditions with `updates` replacing those of the same type, order kept."""
    merged = {c.type: c for c in previous or ()}
    for update in updates:
        merged[update.type] = update
    return [merged[key] for key in sorted(merged, key=lambda t: (t != READY, t != SYNCED, t))]


def issues(items: Iterable[FileIssue]) -> list[dict[str, str]]:
    """A bounded status list of {path, reason} and, when the service refused the file, its code."""
    listed: list[dict[str, str]] = []
    for issue in items:
        if len(listed) == MAX_LISTED_FILES:
            break
        listed.append({"path": issue.path, "reason": issue.reason[:500]} | ({"code": issue.code} if issue.code else {}))
    return listed


def unlisted(items: Sequence[FileIssue]) -> int:
    """How many of `items` a bounded status list leaves out."""
    return max(0, len(items) - MAX_LISTED_FILES)


def judged_quality(commit: str, quality: Quality, now: datetime.datetime) -> JudgedQuality:
    """status.quality: the figures of the judged questions, and the first few that failed."""
    failed = [" ".join(o.question.split())[:200] for o in quality.failed[:MAX_LISTED_QUESTIONS]]
    return JudgedQuality(
        commit=commit[:12], measured_time=now, questions=quality.questions, hit_at_1=quality.hit_at_1,
        hit_at_5=quality.hit_at_5, facts_share=quality.facts_share, failed=len(quality.failed),
        failed_questions=failed or None, error=quality.error[:MAX_MESSAGE] if quality.error else None,
    )  # fmt: skip


def last_sync(result: SyncResult) -> LastSync:
    """status.lastSync: the counts of one attempt, and its duration."""
    counts = LastSync(
        commit=result.commit,
        full=result.full,
        added=result.added,
        modified=result.modified,
        deleted=result.deleted,
        renamed=result.renamed,
        unchanged=result.unchanged,
        skipped=len(result.skipped),
        failed=len(result.failed),
        duration_seconds=round(result.duration_s, 3),
    )
    if result.drift:  # only then: absent means there was none
        counts.drift = result.drift[:MAX_MESSAGE]
    return counts


def summary(result: SyncResult) -> str:
    """A one-line human account of a sync, for conditions and events."""
    text = (
        f"{result.added} added, {result.modified} modified, {result.deleted} deleted, "
        f"{result.renamed} renamed, {result.unchanged} unchanged, {len(result.skipped)} skipped, "
        f"{len(result.failed)} failed at {result.commit[:12]}"
    )
    if result.drift:
        text = f"full reconcile after drift ({result.drift}): {text}"
    if result.failed:
        first = result.failed[0]
        text += f"; first failure: {first.path}: {first.reason}"
    if result.rejected:
        first = result.rejected[0]
        text += f"; {len(result.rejected)} refused by the search service, first: {first.path}: {first.reason}"
    return text


class StatusWriter:
    """Puts one step's status changes and events into kopf's patch and into the source's own copy.

    `status` is the source's status as this process last wrote it (the live body may lag behind
    our own patches); it is updated in place.
    """

    def __init__(
        self, metrics: OperatorMetrics, status: KnowledgeSourceStatus, body: Mapping[str, Any], patch: kopf.Patch
    ) -> None:
        meta = body.get("metadata") or {}
        self.metrics = metrics
        self.body = body
        self.patch = patch
        self.generation = meta.get("generation")
        self.source_id = source_id(meta.get("namespace", ""), meta.get("name", ""))
        self.request = (meta.get("annotations") or {}).get(SYNC_REQUEST_ANNOTATION)
        self.status = status

    def failures(self) -> int:
        """Failed attempts since the last success."""
        return self.status.consecutive_failures or 0

    def next_sync_time(self) -> str | None:
        """status.nextSyncTime as this process last wrote it: the next planned sync or retry, if any."""
        planned = self.status.next_sync_time
        return format_time(planned) if planned else None

    def apply(self, decision: Decision, now: datetime.datetime) -> None:
        """Write the status change of a decision that runs nothing (see statemachine.py)."""
        if decision.action is Action.SUSPEND:
            self._suspended()
        elif decision.action is Action.INVALID:
            self._failed(Reason.INVALID_SPEC, decision.error or "InvalidSpecError", retry_at=None, attempted=False)
        elif decision.action is Action.RESCHEDULE:
            assert decision.source is not None
            self._rescheduled(decision.source, now)
        elif decision.action is Action.ANNOUNCE:
            self._announced(decision.why)
        else:
            raise ValueError(f"{decision.action} writes nothing by itself")

    def interrupted(self) -> None:
        """Syncing at start-up: the last process may have died half-way through applying a diff."""
        changes = KnowledgeSourceStatus(last_full_sync_time=None)  # so the sync it owes is a full reconcile
        if self._condition_status(SYNCING) == "True" or self.status.progress is not None:
            message = "the operator restarted while a sync ran; the sync it owes is a full reconcile"
            changes.progress = None
            changes.conditions = self._conditions((SYNCING, False, Reason.SYNC_INTERRUPTED, message))
        self._write(changes)

    def progress(self, snapshot: Snapshot) -> dict[str, object]:
        """A running sync's counts: status.progress and the Syncing condition True. Returns the
        status patch, which the caller sends at once (kopf's own patch waits for the handler's end)."""
        changes = KnowledgeSourceStatus(
            progress=SyncProgress(
                done=snapshot.done, total=snapshot.total, started_at=snapshot.started_at, summary=snapshot.summary
            ),
            conditions=self._conditions((SYNCING, True, Reason.SYNC_RUNNING, snapshot.message)),
        )
        self._write(changes)
        return changes.patch()

    def sync_ended(self, snapshot: Snapshot | None, error: Exception | None, elapsed_s: float) -> None:
        """Close the progress a sync wrote (Syncing False, status.progress removed) with its final counts."""
        if snapshot is None and self._condition_status(SYNCING) != "True" and self.status.progress is None:
            return  # it wrote none: a sync with nothing to do stays out of the status
        counts = f"{snapshot.done} of {snapshot.total} documents" if snapshot and snapshot.total is not None else None
        if error is None:
            reason, message = (
                Reason.SYNC_ENDED,
                f"the last sync went through {counts or 'its work'} in {elapsed_s:.0f}s",
            )
        else:
            where = f" after {counts}" if counts else f" while {snapshot.stage}" if snapshot else ""
            reason, message = Reason.SYNC_STOPPED, f"the last sync stopped{where}: {error or type(error).__name__}"
        self._write(
            KnowledgeSourceStatus(progress=None, conditions=self._conditions((SYNCING, False, reason, message)))
        )

    def _announced(self, why: str) -> None:
        """A sync is due: show it before it runs (the next timer call runs it)."""
        never_synced = not self.status.last_sync_time
        phase = Phase.PENDING if never_synced else Phase.SYNCING
        changes = KnowledgeSourceStatus(phase=phase, observed_generation=self.generation)
        if not self.status.conditions:
            message = f"the first sync is queued ({why})"
            changes.conditions = self._conditions(
                (READY, None, Reason.PENDING, message), (SYNCED, None, Reason.PENDING, message)
            )
        self._write(changes)

    def _suspended(self) -> None:
        """spec.suspend is true: nothing runs, nothing is planned."""
        documents = self.status.document_count or 0
        message = f"spec.suspend is true: no sync runs; the {documents} documents already indexed stay"
        self._write(
            KnowledgeSourceStatus(
                phase=Phase.SUSPENDED,
                observed_generation=self.generation,
                next_sync_time=None,
                conditions=self._conditions((READY, False, Reason.SUSPENDED, message)),
            )
        )

    def _rescheduled(self, source: Source, now: datetime.datetime) -> None:
        """A spec change that keeps the document set (schedule, policy): plan the next sync anew."""
        changes = KnowledgeSourceStatus(observed_generation=self.generation)
        if not self.failures():  # a failing source keeps its backoff
            changes.next_sync_time = source.schedule.next_after(self.status.last_sync_time or now)
        self._write(changes)

    def synced(self, source: Source, result: SyncResult, now: datetime.datetime, retry_at: datetime.datetime) -> None:
        """A sync ran to the end; the commit advances unless a document failed (skips do not count), else retry_at."""
        text, short = summary(result), result.commit[:12]
        changes = KnowledgeSourceStatus(
            observed_generation=self.generation,
            last_sync_time=now,
            document_count=result.documents,
            last_sync=last_sync(result),
            skipped_files=issues(result.skipped),
            skipped_files_omitted=unlisted(result.skipped),
            failed_files=issues(result.failed),
        )
        if result.fetched:  # a sync that fetched nothing asked nothing: its commit's figures stand
            quality = result.quality
            changes.quality = judged_quality(result.commit, quality, now) if quality is not None else None
        if result.drift:
            self._event(Reason.DRIFT_DETECTED, f"full reconcile: {result.drift}", warning=True)
        if result.rejected:
            first = result.rejected[0]
            self._event(Reason.DOCUMENTS_REJECTED, (
                f"{len(result.rejected)} files skipped, refused by the search service; they are tried again when "
                f"they change. First: {first.path}: {first.reason}"
            ), warning=True)  # fmt: skip
        if self.request:
            changes.last_handled_sync_request = self.request
        previous = self.status.phase
        if result.ok:
            changes.phase = Phase.SYNCED
            changes.last_synced_commit = result.commit
            changes.short_commit = result.commit[:12]
            changes.spec_hash = source.spec_hash
            changes.last_successful_sync_time = now
            changes.consecutive_failures = 0
            # What the next sync's drift check compares against (None: the service cannot tell).
            changes.collection_epoch = result.baseline.epoch
            changes.expected_document_count = result.baseline.documents
            changes.next_sync_time = source.schedule.next_after(now)
            ready = f"{result.documents} documents mirror commit {short}"
            conditions = [(READY, True, Reason.SYNC_SUCCEEDED, ready), (SYNCED, True, Reason.SYNC_SUCCEEDED, text)]
            drift = self.status.condition(DRIFT)
            if result.drift or (drift is not None and drift.status == "True"):
                # The check's finding, without what it said would follow (drift_checked appends "; <then>").
                seen = result.drift or (drift.message.rsplit("; ", 1)[0] if drift else "")
                repaired = f"repaired by the sync of {short}, which left {result.documents} documents; it found: {seen}"
                conditions.append((DRIFT, False, Reason.DRIFT_REPAIRED, repaired))
            changes.conditions = self._conditions(*conditions)
            if result.full:
                changes.last_full_sync_time = now
            changed = result.added + result.modified + result.deleted + result.renamed
            if changed or previous != Phase.SYNCED:
                self._event(Reason.SYNC_COMPLETED, text)
            if result.deleted:
                self._event(Reason.DOCUMENTS_DELETED, f"{result.deleted} documents deleted at {result.commit[:12]}")
        else:
            failures = self.failures() + 1
            message = f"{len(result.failed)} documents failed; retry at {format_time(retry_at)}"
            if reason_of(self.status) != Reason.PARTIAL_SYNC:  # one event per failure streak, not per retry
                self._event(Reason.SYNC_PARTIAL, text, warning=True)
            # The commit stays, but part of the diff was applied: a diff from that commit no
            # longer tells what the service lacks (a revert to it would look like no change).
            changes.last_full_sync_time = None
            changes.phase = Phase.FAILED
            changes.consecutive_failures = failures
            changes.next_sync_time = retry_at
            changes.conditions = self._conditions(
                (READY, False, Reason.PARTIAL_SYNC, message), (SYNCED, False, Reason.PARTIAL_SYNC, text)
            )
        self._write(changes)

    def failed(self, error: Exception, *, retry_at: datetime.datetime | None) -> None:
        """A sync failed; retry_at None: not until the spec changes."""
        text = str(error) or type(error).__name__
        self._failed(failure_reason(error), text, retry_at=retry_at, attempted=True)

    def _failed(self, reason: Reason, text: str, *, retry_at: datetime.datetime | None, attempted: bool) -> None:
        when = "not retried until the spec changes" if retry_at is None else f"retry at {format_time(retry_at)}"
        message = f"{text}; {when}"
        changes = KnowledgeSourceStatus(
            phase=Phase.FAILED,
            observed_generation=self.generation,
            consecutive_failures=self.failures() + 1,
            next_sync_time=retry_at,
            conditions=self._conditions((READY, False, reason, message), (SYNCED, False, reason, message)),
        )
        if self.request:
            changes.last_handled_sync_request = self.request
        if attempted:
            changes.last_sync_time = utcnow()
            # It may have failed after applying part of its changes: the retry reconciles fully.
            changes.last_full_sync_time = None
        if reason != reason_of(self.status):  # one event per failure streak and reason, not per retry
            self._event(reason, message, warning=True)
        self._write(changes)

    def webhook(self, path: str | None, problem: str | None = None) -> None:
        """The receiver's path for this source (None: it takes no webhooks); `problem`: why not."""
        if path != self.status.webhook_path:
            self._write(KnowledgeSourceStatus(webhook_path=path))
        if problem:
            self._event(Reason.WEBHOOK_UNAVAILABLE, problem, warning=True)

    def freshness(
        self,
        *,
        now: datetime.datetime,
        bound: float,
        commit: str | None = None,
        seen_at: datetime.datetime | None = None,
    ) -> None:
        """Measure how fresh the index is: after a successful sync of `commit` (first seen on the
        remote at `seen_at`), or, without them, the age of the last successful sync alone."""
        before = self.status.freshness or Freshness()
        fresh = before.model_copy()
        if commit is not None and seen_at is not None:
            self.metrics.last_success.labels(source=self.source_id).set(now.timestamp())
            if commit != fresh.remote_commit:  # a commit already searchable keeps its measure
                fresh.remote_commit = commit
                fresh.remote_commit_seen_time = seen_at
                fresh.lag_seconds = round(max(0.0, (now - seen_at).total_seconds()), 3)
            self.metrics.freshness_lag.labels(source=self.source_id).set(float(fresh.lag_seconds or 0.0))
        last_success = self.status.last_successful_sync_time
        changes = KnowledgeSourceStatus()
        if bound > 0:
            fresh.bound_seconds = int(bound)
            age = (now - last_success).total_seconds() if last_success else None
            lag = float(fresh.lag_seconds or 0.0)
            behind = []
            if lag > bound:
                behind.append(f"its last push took {lag:.0f}s to become searchable")
            if age is None or age > bound:
                when = f"{age:.0f}s ago" if age is not None else "never"
                behind.append(f"its last successful sync ended {when}")
            self.metrics.behind_bound.labels(source=self.source_id).set(1 if behind else 0)
            if behind:
                message = f"behind its freshness bound of {bound:.0f}s: " + " and ".join(behind)
                if self._condition_status(FRESH) != "False":
                    self._event(Reason.FELL_BEHIND, message, warning=True)
                changes.conditions = self._conditions((FRESH, False, Reason.FELL_BEHIND, message))
            else:
                message = f"within its freshness bound of {bound:.0f}s (last push to searchable: {lag:.1f}s)"
                changes.conditions = self._conditions((FRESH, True, Reason.WITHIN_BOUND, message))
        if fresh.patch() != before.patch():
            changes.freshness = fresh
        if changes.model_fields_set:
            self._write(changes)

    def drift_checked(self, drift: str | None, policy: str) -> None:
        """A check between syncs found `drift` (None: the service holds what the last sync left).

        One Warning event when the condition turns True, not one per check; the condition is
        written only when it changes, so that a quiet source's checks write nothing.
        """
        current = self.status.condition(DRIFT)
        if drift is None:
            if current is None or current.status == "True":
                held = self.status.expected_document_count
                message = "the search service holds what the last sync left" + (
                    f" ({held} documents)" if held is not None else ""
                )
                clean = self._conditions((DRIFT, False, Reason.NO_DRIFT, message))
                self._write(KnowledgeSourceStatus(conditions=clean))
            return
        then = (
            "a full re-sync starts now (spec.driftPolicy Auto)"
            if policy == "Auto"
            else f"spec.driftPolicy is Manual: request a sync ({SYNC_REQUEST_ANNOTATION}) to repair it"
        )
        message = f"{drift}; {then}"[:MAX_MESSAGE]
        if current is None or current.status != "True":
            self._event(Reason.DRIFT_DETECTED, message, warning=True)
        if current is None or current.status != "True" or current.message != message:
            self._write(
                KnowledgeSourceStatus(conditions=self._conditions((DRIFT, True, Reason.SERVICE_DRIFTED, message)))
            )

    def _condition_status(self, type_: str) -> str | None:
        item = self.status.condition(type_)
        return None if item is None else item.status

    def cleanup_failed(self, message: str) -> None:
        """The deletion policy could not run: say so (the finalizer stays)."""
        self._write(KnowledgeSourceStatus(conditions=self._conditions((READY, False, Reason.CLEANUP_FAILED, message))))
        self._event(Reason.CLEANUP_FAILED, message, warning=True)

    def documents_retained(self) -> None:
        """deletionPolicy Retain: the cleanup leaves the documents."""
        message = f"deletionPolicy is Retain: the documents of {self.source_id} stay indexed"
        self._event(Reason.DOCUMENTS_RETAINED, message)

    def documents_deleted(self, documents: int, chunks: int) -> None:
        """The cleanup deleted the source's documents."""
        self._event(Reason.DOCUMENTS_DELETED, f"deleted {documents} documents ({chunks} chunks) of {self.source_id}")

    def documents_left_behind(self, attempts: int, error: Exception) -> None:
        """The cleanup gave up on a search-token Secret it cannot use: the finalizer goes, the documents stay."""
        self._event(Reason.DOCUMENTS_LEFT_BEHIND, (
            f"gave up deleting the documents of {self.source_id} after {attempts} attempts and released the "
            f"finalizer; they stay in the search service: {error}"
        ), warning=True)  # fmt: skip

    def _event(self, reason: Reason, message: str, *, warning: bool = False) -> None:
        post = kopf.warn if warning else kopf.info
        post(cast(kopf.Body, self.body), reason=reason.value, message=message)  # kopf reads only its metadata

    def _conditions(self, *updates: tuple[str, bool | None, Reason, str]) -> list[Condition]:
        now = utcnow()
        previous = self.status.conditions
        fresh = [condition(previous, t, s, r.value, m, generation=self.generation, now=now) for t, s, r, m in updates]
        return merge_conditions(previous, fresh)

    def _write(self, changes: KnowledgeSourceStatus) -> None:
        """Put the fields set on `changes` into the patch (None removes one) and into our own copy."""
        for key, value in changes.patch().items():
            self.patch.status[key] = value
        for name in changes.model_fields_set:
            setattr(self.status, name, getattr(changes, name))
        if changes.phase is not None:
            self.metrics.set_phase(self.source_id, changes.phase)


def reported_freshness(status: KnowledgeSourceStatus) -> ReportedFreshness | None:
    """The freshness a source's status holds, as its sync report carries it; None before it has one."""
    fresh = status.freshness
    if fresh is None or fresh.remote_commit is None or fresh.remote_commit_seen_time is None:
        return None
    if fresh.lag_seconds is None:
        return None
    seen_at = fresh.remote_commit_seen_time
    searchable_at = seen_at + datetime.timedelta(seconds=fresh.lag_seconds)
    return ReportedFreshness(fresh.remote_commit, format_time(seen_at), format_time(searchable_at), fresh.lag_seconds)
