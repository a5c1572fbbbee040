"""The reconcile loop of one KnowledgeSource: when to sync, the sync itself, and the cleanup.

The `sync` timer (handlers.py) calls `tick` over and over, never twice at once per object:
- a call either waits (until the next planned time, a spec or annotation change, or stop),
  or writes one status change and returns so that kopf applies it;
- a due sync is first announced (phase Pending or Syncing) and run by the next call, under the
  source's lock and one of the global sync slots.

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
A full reconcile is forced by a manual request, a change of the document set (specHash), the
periodic safety pass (FULL_RECONCILE_INTERVAL), any sync that did not succeed (outcome.py clears
lastFullSyncTime: it may have applied part of its diff) and a sync interrupted by a restart; the
engine also does one on the first sync, when the last synced commit left the history, and on
drift: the service's collection epoch or the source's document count is no longer what the last
successful sync left (status.collectionEpoch, status.expectedDocumentCount; see drift.py).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import kopf

from kboperator import outcome
from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.errors import InvalidSpecError, SyncError
from kboperator.kubesecrets import SecretError, repository_credentials
from kboperator.models import Baseline, Credentials, SyncResult
from kboperator.schedule import parse_time, utcnow
from kboperator.services import Services, SourceState
from kboperator.settings import OperatorSettings
from kboperator.source import ServiceRef, Source, parse_source, service_ref, source_id
from kboperator.status import Phase

log = logging.getLogger(__name__)

_MAX_NAP = 3600.0  # re-evaluate at least hourly, whatever the schedule says
SCHEDULED = "scheduled"


@dataclass(frozen=True)
class Plan:
    """What one timer call should do."""

    action: str  # wait | sync | suspend | invalid | reschedule
    wait: float | None = None  # for "wait": seconds, or None to wait until woken
    full: bool = False
    reason: str = ""
    source: Source | None = None
    error: str = ""


def decide(
    body: Mapping[str, Any], status: Mapping[str, Any], settings: OperatorSettings, now: datetime.datetime
) -> Plan:
    """The next step for one source, from its spec, annotations and our own last status."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    generation = meta.get("generation")
    phase = status.get("phase")
    same_generation = status.get("observedGeneration") == generation
    request = (meta.get("annotations") or {}).get(SYNC_REQUEST_ANNOTATION)
    manual = bool(request) and request != status.get("lastHandledSyncRequest")
    if spec.get("suspend"):
        stale = phase != Phase.SUSPENDED or not same_generation
        return Plan("suspend") if stale else Plan("wait")
    # An invalid spec (found here, or by git: an unknown ref) waits for the spec or a request to change.
    known_invalid = phase == Phase.FAILED and same_generation and outcome.reason_of(status) == "InvalidSpec"
    try:
        source = parse_source(
            meta["namespace"], meta["name"], spec,
            allow_local=settings.allow_local_repositories, min_interval=settings.min_sync_interval_seconds,
            services=settings.service_policy, local_root=settings.local_repositories_root,
            forbidden=[settings.cache_dir],
        )  # fmt: skip
    except InvalidSpecError as exc:
        return Plan("wait") if known_invalid and not manual else Plan("invalid", error=str(exc))
    if known_invalid and not manual:
        return Plan("wait")
    synced_hash = status.get("specHash")
    full = manual or bool(synced_hash and synced_hash != source.spec_hash) or _safety_due(status, settings, now)
    if phase in (None, Phase.PENDING, Phase.SYNCING):
        return Plan("sync", full=full, reason="first sync" if phase is None else "announced", source=source)
    if manual:
        return Plan("sync", full=True, reason=f"requested at {request}", source=source)
    if not same_generation:
        if source.spec_hash != synced_hash or phase in (Phase.FAILED, Phase.SUSPENDED):
            return Plan("sync", full=full, reason="spec changed", source=source)
        return Plan("reschedule", source=source)
    planned = parse_time(status.get("nextSyncTime"))
    if planned is None or now >= planned:
        return Plan("sync", full=full, reason=SCHEDULED, source=source)
    return Plan("wait", wait=(planned - now).total_seconds())


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


async def tick(
    services: Services, state: SourceState, body: Mapping[str, Any], patch: kopf.Patch, stopped: kopf.DaemonStopped
) -> None:
    """One call of the source's timer: wait, or make one step and return."""
    first_call = state.status is None
    writer = outcome.StatusWriter(services, state, body, patch)  # takes the body's status on first use
    if first_call and writer.status.get("phase"):
        services.metrics.set_phase(writer.source_id, writer.status["phase"])  # after a restart
    now = utcnow()
    if first_call and writer.status.get("phase") == Phase.SYNCING:
        writer.interrupted()
    plan = decide(body, writer.status, services.settings, now)
    if plan.action == "wait":
        await _nap(state, stopped, plan.wait)
    elif plan.action == "suspend":
        writer.suspended()
    elif plan.action == "invalid":
        writer.failed(InvalidSpecError(plan.error), retry_at=None, attempted=False)
    elif plan.action == "reschedule":
        assert plan.source is not None
        writer.rescheduled(plan.source, now)
    elif first_call and plan.reason == SCHEDULED and services.settings.startup_jitter_seconds > 0:
        # An overdue sync found at start-up: spread them, so a restart does not sync everything at once.
        await _nap(state, stopped, random.uniform(0, services.settings.startup_jitter_seconds))
    elif writer.status.get("phase") not in (Phase.PENDING, Phase.SYNCING) or writer.stale_generation():
        writer.announced(plan.reason)
    elif not stopped:
        assert plan.source is not None
        await _sync(services, state, writer, plan.source, plan.full, stopped)


async def _sync(
    services: Services, state: SourceState, writer: outcome.StatusWriter, source: Source, full: bool,
    stopped: kopf.DaemonStopped,
) -> None:
    started = time.monotonic()
    status = state.status or {}
    last_commit = status.get("lastSyncedCommit")
    baseline = Baseline(epoch=status.get("collectionEpoch"), documents=status.get("expectedDocumentCount"))
    result: SyncResult | None = None
    error: Exception | None = None
    async with state.lock, services.slots:
        if stopped:  # deleted while queued: the cleanup may have run, a sync now would re-add documents
            return
        try:
            credentials = await _credentials(services, source)
            async with services.engine(source.namespace, source.service) as engine:
                result = await engine.sync(
                    source.with_credentials(credentials), last_commit, force_full=full, baseline=baseline
                )
        except SyncError as exc:
            error = exc
        except Exception as exc:  # a bug must not stop this source's loop; it is shown in status
            log.exception("source %s: sync failed unexpectedly", source.source_id)
            error = exc
    now = utcnow()
    retry_at = _retry_at(services.settings, source, writer.failures() + 1, now)
    if result is not None:
        services.metrics.record_sync(result)
        writer.synced(source, result, now, retry_at)
        return
    assert error is not None
    services.metrics.record_failure(time.monotonic() - started)
    writer.failed(error, retry_at=None if isinstance(error, InvalidSpecError) else retry_at)


async def _credentials(services: Services, source: Source) -> Credentials | None:
    if not source.secret_name:
        return None
    return await repository_credentials(services.secrets, source.namespace, source.secret_name, source.location)


def _retry_at(settings: OperatorSettings, source: Source, failures: int, now: datetime.datetime) -> datetime.datetime:
    delay = settings.backoff(failures) * (1 + random.uniform(0, 0.1))  # jitter: sources failing together spread
    return min(now + datetime.timedelta(seconds=delay), source.schedule.next_after(now))


def _safety_due(status: Mapping[str, Any], settings: OperatorSettings, now: datetime.datetime) -> bool:
    last_full = parse_time(status.get("lastFullSyncTime"))
    if last_full is None:
        return bool(status.get("lastSyncedCommit"))  # synced before, but never fully: do it now
    return (now - last_full).total_seconds() >= settings.full_reconcile_interval


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
    services: Services, state: SourceState, body: Mapping[str, Any], patch: kopf.Patch, retry: int
) -> None:
    """Run the deletion policy; a failure raises kopf.TemporaryError, so the finalizer stays.

    A cleanup never waits forever for a search-token Secret that cannot be used (the usual case:
    the namespace is being deleted, and its Secrets went first). For the operator's own search
    service it falls back to the operator's own token; for another service it gives up after
    KBOPERATOR_CLEANUP_SECRET_ATTEMPTS attempts, with a Warning event: the documents stay.
    An unreachable service is retried until it answers.
    """
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    sid = source_id(meta["namespace"], meta["name"])
    writer = outcome.StatusWriter(services, state, body, patch)
    async with state.lock:  # a running sync finishes first, so it cannot re-add documents after us
        if (spec.get("deletionPolicy") or "Delete") == "Retain":
            kopf.info(body, reason="DocumentsRetained", message=f"deletionPolicy is Retain: the documents of {sid} stay indexed")
            result = "success"
        else:
            result = await _delete_documents(services, writer, body, sid, service_ref(spec), retry)
    services.metrics.cleanups.labels(result=result).inc()
    services.metrics.set_phase(sid, None)
    url = (spec.get("repository") or {}).get("url")
    if isinstance(url, str):
        await asyncio.to_thread(services.repos.forget, sid, url)


async def _delete_documents(
    services: Services, writer: outcome.StatusWriter, body: Mapping[str, Any], sid: str, service: ServiceRef,
    retry: int,
) -> str:
    """Delete a source's documents; returns the metric's result, or raises kopf.TemporaryError."""
    namespace = (body.get("metadata") or {})["namespace"]
    try:
        try:
            documents, chunks = await _delete_source(services, namespace, service, sid)
        except (SecretError, InvalidSpecError) as exc:
            if not (service.secret_name and services.policy.is_default(service.url)):
                raise
            # The operator's own service: its own token deletes the source's documents just as well.
            log.warning("source %s: cleanup uses the operator's own token (%s)", sid, exc)
            documents, chunks = await _delete_source(services, namespace, replace(service, secret_name=None), sid)
    except (SecretError, InvalidSpecError) as exc:
        attempts = retry + 1
        if attempts >= services.settings.cleanup_secret_attempts:
            kopf.warn(body, reason="DocumentsLeftBehind", message=(
                f"gave up deleting the documents of {sid} after {attempts} attempts and released the "
                f"finalizer; they stay in the search service: {exc}"
            ))
            return "abandoned"
        _retry_cleanup(services, writer, sid, retry, exc)
    except SyncError as exc:
        _retry_cleanup(services, writer, sid, retry, exc)
    kopf.info(body, reason="DocumentsDeleted", message=f"deleted {documents} documents ({chunks} chunks) of {sid}")
    return "success"


async def _delete_source(services: Services, namespace: str, service: ServiceRef, sid: str) -> tuple[int, int]:
    async with services.engine(namespace, service) as engine:
        return await engine.client.delete_source(sid)


def _retry_cleanup(services: Services, writer: outcome.StatusWriter, sid: str, retry: int, exc: Exception) -> NoReturn:
    delay = services.settings.backoff(retry + 1)
    message = f"deleting the documents of {sid} failed, retrying in {delay:.0f}s: {exc}"
    writer.cleanup_failed(message)
    services.metrics.cleanups.labels(result="failed").inc()
    raise kopf.TemporaryError(message, delay=delay) from None
