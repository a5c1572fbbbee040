"""The reconcile loop of one KnowledgeSource: one turn of it, the sync itself, and the cleanup.

What to do is decided by statemachine.decide (the states are drawn there); what was done is
written by status.StatusWriter. This module runs the actions.

The loop: the `sync` timer (handlers.py) calls `run_loop_turn` over and over, never twice at once
per object. A turn either waits (until the next planned time, a spec or annotation change, or
stop), or writes one status change and returns so that kopf applies it. A due sync is first
announced (phase Pending or Syncing) and run by the next turn, under the source's lock and one
of the global sync slots.

Retry policy:
- success: the next sync is planned by the schedule;
- a partial sync, and every other failure (repository or service unreachable, a missing Secret
  or key, refused credentials, a refused mass deletion): retried with exponential backoff and
  jitter, from RETRY_BACKOFF_SECONDS up to RETRY_BACKOFF_MAX_SECONDS (and never later than the
  schedule), so a failure that needs a human is retried rarely, never in a tight loop;
- an invalid spec (URL, ref, glob, schedule; a ref that does not exist; a local path that is
  not allowed; a search service off the allow-list; a Secret without the opt-in label, or
  bound by its `url` key to another URL): never retried until the spec or the sync-request
  annotation changes.
The engine also does a full reconcile on the first sync, when the last synced commit left the
history, and on drift: the service's collection epoch or the source's document count is no
longer what the last successful sync left (status.collectionEpoch, status.expectedDocumentCount;
see drift.py). Between syncs the loop makes the same check on its own (`_check_drift`, when
statemachine.drift_check_time says so), under the source's lock and one engine lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import kopf

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.errors import InvalidSpecError, SecretError, SyncError
from kboperator.kube.context import OperatorContext
from kboperator.kube.observed import Observed, observe
from kboperator.kube.progress import StatusProgress
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.secrets import repository_credentials, webhook_token
from kboperator.kube.source import ServiceRef, Source
from kboperator.kube.statemachine import Action, decide, interrupted
from kboperator.kube.status import StatusWriter, reported_freshness
from kboperator.kube.webhooks import push_request_time
from kboperator.models import Baseline, Credentials, SyncResult
from kboperator.schedule import format_time, utcnow
from kboperator.settings import OperatorSettings
from kboperator.sync.engine import SyncEngine
from kboperator.sync.reporting import ServiceProgress, Sink, Snapshot, ThrottledProgress

log = logging.getLogger(__name__)

_MAX_NAP = 3600.0  # re-evaluate at least hourly, whatever the schedule says


@dataclass
class SourceState:
    """What the operator remembers about one object between handler calls (in its kopf memo)."""

    #: Held while a sync or a cleanup runs: the two never overlap for one source.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Set when the spec or the sync-request annotation changes, to end a wait early.
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: (generation, sync request) last seen by the watch spy.
    seen: tuple[Any, Any] | None = None
    #: The status as this process last wrote it: the live body may lag behind our own patches.
    status: KnowledgeSourceStatus | None = None
    #: (generation, webhook Secret name) last registered with the webhook receiver; None: look again.
    hook: tuple[Any, Any] | None = None
    #: Why the source takes no webhooks, as last reported in an event.
    hook_problem: str | None = None
    #: When this process last checked the source for drift between syncs.
    drift_checked_at: datetime.datetime | None = None


def source_state(memo: Any) -> SourceState:
    """The SourceState in a per-object kopf memo, created on first use."""
    state: SourceState | None = memo.get("kb_source")
    if state is None:
        state = memo["kb_source"] = SourceState()
    return state


def _triggers(body: Mapping[str, Any]) -> tuple[Any, Any]:
    meta = body.get("metadata") or {}
    return meta.get("generation"), (meta.get("annotations") or {}).get(SYNC_REQUEST_ANNOTATION)


def noticeable(state: SourceState, body: Mapping[str, Any]) -> bool:
    """Whether the spec or the sync request changed since last noticed; status writes never count."""
    return _triggers(body) != state.seen


def notice(state: SourceState, body: Mapping[str, Any]) -> None:
    """Remember the triggers, and wake the timer if they changed after the first sight."""
    if state.seen is not None:
        state.wake.set()
    state.seen = _triggers(body)


def _writer(context: OperatorContext, state: SourceState, body: Mapping[str, Any], patch: kopf.Patch) -> StatusWriter:
    if state.status is None:  # first sight in this process: start from the object's own status
        state.status = KnowledgeSourceStatus.model_validate(body.get("status") or {})
    return StatusWriter(context.metrics, state.status, body, patch)


async def run_loop_turn(
    context: OperatorContext,
    state: SourceState,
    body: Mapping[str, Any],
    patch: kopf.Patch,
    stopped: kopf.DaemonStopped,
) -> None:
    """One turn of the source's loop: decide, then wait, or make one step and return.

    Shaped as turns, not as one endless coroutine, because kopf applies `patch` only when a
    handler call returns: each status change must end a turn to reach the API (a kopf daemon
    would hold its patch until it exits). The waiting is done inside the turn, woken early by
    `notice`, since a kopf timer's interval is fixed while a source's next time is not.
    """
    observed = observe(body, context.settings)  # the one parse of the object this turn
    restarted = state.status is None
    writer = _writer(context, state, body, patch)
    if restarted and writer.status.phase:
        context.metrics.set_phase(writer.source_id, writer.status.phase)  # after a restart
    if interrupted(writer.status, restarted):
        writer.interrupted()
    await _refresh_webhook(context, state, writer, observed)
    now = utcnow()
    decision = decide(
        observed, writer.status, context.settings, now, restarted=restarted, drift_checked_at=state.drift_checked_at
    )
    if decision.action in (Action.WAIT, Action.RETAIN, Action.DELETE):  # being deleted: wait to be stopped
        await _nap(state, stopped, decision.wait)
    elif decision.action is Action.STAGGER:
        await _nap(state, stopped, random.uniform(0, decision.wait or 0.0))
    elif decision.action is Action.SYNC:
        if not stopped:
            await _sync(context, state, writer, observed, decision.full, stopped)
    elif decision.action is Action.CHECK_DRIFT:
        if not stopped:
            await _check_drift(context, state, writer, observed, stopped)
    else:
        writer.apply(decision, now)


async def _check_drift(
    context: OperatorContext, state: SourceState, writer: StatusWriter, observed: Observed, stopped: kopf.DaemonStopped
) -> None:
    """Between syncs: does the service still hold what the last sync left? One GET of the source's counts.

    A service that does not answer is only logged: the next check, or the next sync, asks again.
    """
    source = observed.source
    assert source is not None  # decide() checks only a spec that parsed
    status = writer.status
    baseline = Baseline(epoch=status.collection_epoch, documents=status.expected_document_count)
    state.drift_checked_at = utcnow()
    try:
        # Under the lock: a cleanup deleting the documents must not look like drift.
        async with state.lock:
            if stopped:  # deleted meanwhile: the cleanup that held the lock emptied the source on purpose
                return
            async with context.engine(source.namespace, source.service) as engine:
                drift = await engine.drift(source.source_id, baseline)
    except (SyncError, SecretError) as exc:
        context.metrics.drift_checks.labels(result="failed").inc()
        log.warning("source %s: the drift check could not read the search service: %s", source.source_id, exc)
        return
    context.metrics.drift_checks.labels(result="drift" if drift else "clean").inc()
    if drift:
        log.warning("source %s: drift detected between syncs (driftPolicy %s): %s", source.source_id,
                    observed.drift_policy, drift)  # fmt: skip
    writer.drift_checked(drift, observed.drift_policy)


async def _refresh_webhook(
    context: OperatorContext, state: SourceState, writer: StatusWriter, observed: Observed
) -> None:
    """Register the source with the webhook receiver (or drop it) when its spec or secret may have changed.

    Looked at again after each sync, so a rotated webhook Secret takes effect by the next sync.
    """
    secret = observed.webhook_secret
    key = (observed.generation, secret)
    if key == state.hook:
        return
    state.hook = key
    namespace, name = observed.namespace, observed.name
    receiver = context.webhooks
    if receiver is not None and (not secret or observed.deleting):
        receiver.unregister(namespace, name)
    if not secret or observed.deleting:
        writer.webhook(None)
        return
    if receiver is None:
        _hook_problem(state, writer, "spec.webhook is set, but the operator's webhook receiver is off")
        return
    try:
        if observed.source is None:  # an invalid spec is reported by the sync itself
            raise observed.invalid or InvalidSpecError("the spec is invalid")
        source = observed.source
        token = await webhook_token(context.secrets, namespace, secret)
    except (SyncError, SecretError) as exc:
        receiver.unregister(namespace, name)
        _hook_problem(state, writer, f"webhooks are off for this source: {exc}")
        return
    state.hook_problem = None
    writer.webhook(receiver.register(source, name, token))


def _hook_problem(state: SourceState, writer: StatusWriter, problem: str) -> None:
    """No webhooks for this source: one Warning event per distinct problem, not one per sync."""
    writer.webhook(None, None if problem == state.hook_problem else problem)
    state.hook_problem = problem


async def _sync(
    context: OperatorContext,
    state: SourceState,
    writer: StatusWriter,
    observed: Observed,
    full: bool,
    stopped: kopf.DaemonStopped,
) -> None:
    source = observed.source
    assert source is not None  # decide() syncs only a spec that parsed
    started, started_at = time.monotonic(), utcnow()
    # When the commit this sync brings was first known to exist: a webhook's push, else now.
    status = writer.status
    pushed_at = push_request_time(writer.request) if writer.request != status.last_handled_sync_request else None
    last_commit = status.last_synced_commit
    baseline = Baseline(epoch=status.collection_epoch, documents=status.expected_document_count)
    result: SyncResult | None = None
    error: Exception | None = None
    # One engine lease for the sync and its report: the URL is checked and the token Secret read once.
    async with state.lock, context.slots, contextlib.AsyncExitStack() as leases:
        if stopped:  # deleted while queued: the cleanup may have run, a sync now would re-add documents
            return
        final: Snapshot | None = None  # the counts the sync's progress reached, if it sent any
        engine: SyncEngine | None = None
        lease_error: Exception | None = None
        try:
            credentials = await _credentials(context, source)
            try:
                engine = await leases.enter_async_context(context.engine(source.namespace, source.service))
            except Exception as exc:
                lease_error = exc
                raise
            progress = _progress(context, writer, source, engine, started_at)
            try:
                result = await engine.sync(
                    source.with_credentials(credentials), last_commit, force_full=full, baseline=baseline,
                    progress=progress,
                )  # fmt: skip
            finally:
                final = await progress.close()
        except SyncError as exc:
            error = exc
        except Exception as exc:  # a bug must not stop this source's loop; it is shown in status
            log.exception("source %s: sync failed unexpectedly", source.source_id)
            error = exc
        writer.sync_ended(final, error, time.monotonic() - started)
        now = utcnow()
        retry_at = _retry_at(context.settings, source, writer.failures() + 1, now)
        bound = observed.freshness_bound(context.settings.freshness_bound_seconds)
        if result is not None:
            context.metrics.record_sync(result)
            writer.synced(source, result, now, retry_at)
            if result.ok:
                seen_at = min(pushed_at or started_at, started_at)
                writer.freshness(now=now, bound=bound, commit=result.commit, seen_at=seen_at)
                if pushed_at is not None:
                    context.metrics.push_to_searchable.observe(max(0.0, (now - pushed_at).total_seconds()))
            else:
                writer.freshness(now=now, bound=bound)
        else:
            assert error is not None
            context.metrics.record_failure(time.monotonic() - started)
            writer.failed(error, retry_at=None if isinstance(error, InvalidSpecError) else retry_at)
            writer.freshness(now=now, bound=bound)
        state.hook = None  # look at the webhook Secret again on the next turn
        if engine is None and lease_error is None:  # the repository Secret failed first: lease for the report
            try:
                engine = await leases.enter_async_context(context.engine(source.namespace, source.service))
            except (SyncError, SecretError) as exc:
                lease_error = exc
        if engine is None:  # no usable service or token: the sync's status already says so
            log.info("source %s: the sync's outcome was not reported to the search service: %s", source.source_id,
                     lease_error)  # fmt: skip
            return
        # Under the lock: a cleanup that deletes the source cannot run between the sync and its report.
        await _report(
            engine, source, result, error, synced_at=format_time(now), next_at=writer.next_sync_time(),
            status=writer.status,
        )  # fmt: skip


def _progress(
    context: OperatorContext, writer: StatusWriter, source: Source, engine: SyncEngine, started_at: datetime.datetime
) -> ThrottledProgress:
    """The sync's progress callback: its counts to the source's status and to its search service."""
    settings = context.settings
    name = (writer.body.get("metadata") or {}).get("name", "")
    sinks: list[Sink] = [StatusProgress(context.secrets.api_client, writer, source.namespace, name)]
    sinks.append(ServiceProgress(engine.client))
    return ThrottledProgress(
        source.source_id, sinks, started_at=started_at,
        interval_s=settings.progress_interval_seconds, every=settings.progress_every_documents,
    )  # fmt: skip


async def _report(
    engine: SyncEngine,
    source: Source,
    result: SyncResult | None,
    error: Exception | None,
    *,
    synced_at: str,
    next_at: str | None,
    status: KnowledgeSourceStatus,
) -> None:
    """Report the outcome to the source's search service, with the freshness `status` holds now;
    a failure is logged (by the engine) and the next sync reports again."""
    last_success = status.last_successful_sync_time
    await engine.report(
        source.source_id, result, error, synced_at=synced_at, next_sync_at=next_at,
        last_success_at=format_time(last_success) if last_success else None,
        freshness=reported_freshness(status),
    )  # fmt: skip


async def _credentials(context: OperatorContext, source: Source) -> Credentials | None:
    if not source.secret_name:
        return None
    return await repository_credentials(context.secrets, source.namespace, source.secret_name, source.location)


def _retry_at(settings: OperatorSettings, source: Source, failures: int, now: datetime.datetime) -> datetime.datetime:
    delay = settings.backoff(failures) * (1 + random.uniform(0, 0.1))  # jitter: sources failing together spread
    return min(now + datetime.timedelta(seconds=delay), source.schedule.next_after(now))


async def _nap(state: SourceState, stopped: kopf.DaemonStopped, seconds: float | None) -> None:
    """Sleep until `seconds` pass, the source is woken, or the timer is stopped."""
    if not state.wake.is_set() and not stopped:
        timeout = _MAX_NAP if seconds is None else max(0.0, min(seconds, _MAX_NAP))
        waiters = [asyncio.ensure_future(state.wake.wait()), asyncio.ensure_future(_stopping(stopped))]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
    state.wake.clear()


async def _stopping(stopped: kopf.DaemonStopped) -> None:
    await stopped.wait()


async def cleanup(
    context: OperatorContext, state: SourceState, body: Mapping[str, Any], patch: kopf.Patch, retry: int
) -> None:
    """Run the deletion policy; a failure raises kopf.TemporaryError, so the finalizer stays.

    A cleanup never waits forever for a search-token Secret that cannot be used (the usual case:
    the namespace is being deleted, and its Secrets went first). For the operator's own search
    service it falls back to the operator's own token; for another service it gives up after
    KBOPERATOR_CLEANUP_SECRET_ATTEMPTS attempts, with a Warning event: the documents stay.
    An unreachable service is retried until it answers.
    """
    observed = observe(body, context.settings)
    sid = observed.source_id
    writer = _writer(context, state, body, patch)
    # RETAIN or DELETE: a body the cleanup handler sees always carries a deletionTimestamp.
    decision = decide(observed, writer.status, context.settings, utcnow())
    async with state.lock:  # a running sync finishes first, so it cannot re-add documents after us
        if decision.action is Action.RETAIN:
            writer.documents_retained()
            result = "success"
        else:
            result = await _delete_documents(context, writer, observed.namespace, sid, observed.service, retry)
    context.metrics.cleanups.labels(result=result).inc()
    context.metrics.set_phase(sid, None)
    if context.webhooks is not None:
        context.webhooks.unregister(observed.namespace, observed.name)
    if observed.repository_url is not None:
        await asyncio.to_thread(context.repos.forget, sid, observed.repository_url)


async def _delete_documents(
    context: OperatorContext,
    writer: StatusWriter,
    namespace: str,
    sid: str,
    service: ServiceRef,
    retry: int,
) -> str:
    """Delete a source's documents; returns the metric's result, or raises kopf.TemporaryError."""
    try:
        try:
            documents, chunks = await _delete_source(context, namespace, service, sid)
        except (SecretError, InvalidSpecError) as exc:
            if not (service.secret_name and context.policy.is_default(service.url)):
                raise
            # The operator's own service: its own token deletes the source's documents just as well.
            log.warning("source %s: cleanup uses the operator's own token (%s)", sid, exc)
            documents, chunks = await _delete_source(context, namespace, replace(service, secret_name=None), sid)
    except (SecretError, InvalidSpecError) as exc:
        attempts = retry + 1
        if attempts >= context.settings.cleanup_secret_attempts:
            writer.documents_left_behind(attempts, exc)
            return "abandoned"
        _retry_cleanup(context, writer, sid, retry, exc)
    except SyncError as exc:
        _retry_cleanup(context, writer, sid, retry, exc)
    writer.documents_deleted(documents, chunks)
    return "success"


async def _delete_source(context: OperatorContext, namespace: str, service: ServiceRef, sid: str) -> tuple[int, int]:
    async with context.engine(namespace, service) as engine:
        return await engine.client.delete_source(sid)


def _retry_cleanup(context: OperatorContext, writer: StatusWriter, sid: str, retry: int, exc: Exception) -> NoReturn:
    delay = context.settings.backoff(retry + 1)
    message = f"deleting the documents of {sid} failed, retrying in {delay:.0f}s: {exc}"
    writer.cleanup_failed(message)
    context.metrics.cleanups.labels(result="failed").inc()
    raise kopf.TemporaryError(message, delay=delay) from None
