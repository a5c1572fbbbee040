"""When a source syncs: the pure decision behind the operator's timer."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import jsonschema
import kopf
import pytest

from kboperator import outcome, reconcile
from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.errors import RepositoryReadError, ServiceUnavailableError
from kboperator.models import Baseline, FileIssue, SyncResult
from kboperator.reconcile import decide
from kboperator.services import SourceState
from kboperator.settings import OperatorSettings
from kboperator.source import parse_source
from tests.operator.test_crd import _schema, _strict

NOW = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
SETTINGS = OperatorSettings(full_reconcile_interval=86400, min_sync_interval_seconds=60)
SPEC = {"repository": {"url": "https://github.com/acme/docs"}, "schedule": "@every 1h"}


def body(spec: dict[str, Any] | None = None, generation: int = 1, request: str | None = None) -> dict[str, Any]:
    annotations = {SYNC_REQUEST_ANNOTATION: request} if request else {}
    meta = {"name": "docs", "namespace": "kb", "generation": generation, "annotations": annotations}
    return {"metadata": meta, "spec": spec or SPEC}


def synced(**changes: Any) -> dict[str, Any]:
    """The status after a successful sync at 11:30, planned again for 12:30."""
    spec_hash = parse_source("kb", "docs", SPEC, allow_local=False).spec_hash
    status = {
        "phase": "Synced", "observedGeneration": 1, "lastSyncedCommit": "a" * 40, "specHash": spec_hash,
        "lastSyncTime": "2024-05-01T11:30:00Z", "lastFullSyncTime": "2024-05-01T11:30:00Z",
        "nextSyncTime": "2024-05-01T12:30:00Z",
    }
    return {k: v for k, v in {**status, **changes}.items() if v is not None}


def failed(reason: str, **changes: Any) -> dict[str, Any]:
    condition = {"type": "Synced", "status": "False", "reason": reason, "message": "", "lastTransitionTime": "t"}
    return synced(phase="Failed", conditions=[condition], **changes)


def test_a_new_object_syncs_at_once() -> None:
    plan = decide(body(), {}, SETTINGS, NOW)
    assert (plan.action, plan.reason) == ("sync", "first sync")


def test_a_synced_source_waits_for_its_next_time() -> None:
    plan = decide(body(), synced(), SETTINGS, NOW)
    assert plan.action == "wait" and plan.wait == 1800


def test_the_schedule_drives_incremental_syncs_and_the_safety_pass_forces_a_full_one() -> None:
    due = synced(nextSyncTime="2024-05-01T11:59:00Z")
    assert (decide(body(), due, SETTINGS, NOW).action, decide(body(), due, SETTINGS, NOW).full) == ("sync", False)
    stale = dict(due, lastFullSyncTime="2024-04-29T00:00:00Z")
    assert decide(body(), stale, SETTINGS, NOW).full is True


def test_a_new_sync_request_syncs_fully_once() -> None:
    plan = decide(body(request="r1"), synced(), SETTINGS, NOW)
    assert plan.action == "sync" and plan.full
    assert decide(body(request="r1"), synced(lastHandledSyncRequest="r1"), SETTINGS, NOW).action == "wait"


def test_a_document_set_change_syncs_fully_and_a_schedule_change_only_reschedules() -> None:
    narrowed = dict(SPEC, paths=["docs/**/*.md"])
    plan = decide(body(narrowed, generation=2), synced(), SETTINGS, NOW)
    assert (plan.action, plan.full, plan.reason) == ("sync", True, "spec changed")
    assert decide(body(dict(SPEC, schedule="@every 5m"), generation=2), synced(), SETTINGS, NOW).action == "reschedule"


def test_suspend_wins_and_is_written_once() -> None:
    spec = dict(SPEC, suspend=True)
    assert decide(body(spec, request="r1"), synced(), SETTINGS, NOW).action == "suspend"
    assert decide(body(spec, request="r1"), synced(phase="Suspended"), SETTINGS, NOW).action == "wait"


@pytest.mark.parametrize("ref", ["-oProxyCommand=sh", "a..b", "refs/heads/x.lock"])
def test_an_invalid_spec_fails_once_and_waits_for_a_change(ref: str) -> None:
    spec = {"repository": {"url": "https://github.com/acme/docs", "ref": ref}}
    plan = decide(body(spec), {}, SETTINGS, NOW)
    assert plan.action == "invalid" and "ref" in plan.error
    assert decide(body(spec), failed("InvalidSpec"), SETTINGS, NOW).action == "wait"
    assert decide(body(spec, request="again"), failed("InvalidSpec"), SETTINGS, NOW).action == "invalid"
    assert decide(body(spec, generation=2), failed("InvalidSpec"), SETTINGS, NOW).action == "invalid"


def test_an_unknown_ref_found_by_git_is_not_retried_until_the_spec_changes() -> None:
    status = failed("InvalidSpec", nextSyncTime=None)
    assert decide(body(), status, SETTINGS, NOW).action == "wait"
    assert decide(body(dict(SPEC, repository={"url": SPEC["repository"]["url"], "ref": "dev"}), 2), status, SETTINGS, NOW).action == "sync"


def test_local_repositories_are_refused_unless_allowed(tmp_path: Any) -> None:
    spec = {"repository": {"url": str(tmp_path)}}
    assert decide(body(spec), {}, SETTINGS, NOW).action == "invalid"
    allowed = OperatorSettings(allow_local_repositories=True, local_repositories_root=tmp_path)
    assert decide(body(spec), {}, allowed, NOW).action == "sync"


def test_a_failing_source_waits_for_its_backoff_but_a_spec_edit_retries_now() -> None:
    status = failed("RepositoryUnavailable", nextSyncTime="2024-05-01T12:00:40Z", consecutiveFailures=3)
    assert decide(body(), status, SETTINGS, NOW).wait == 40
    assert decide(body(dict(SPEC, schedule="@daily"), generation=2), status, SETTINGS, NOW).action == "sync"


def test_an_announced_or_interrupted_sync_is_owed() -> None:
    for phase in ("Pending", "Syncing"):
        assert decide(body(), synced(phase=phase), SETTINGS, NOW).action == "sync"


@pytest.mark.parametrize(
    "changes",
    [
        {"paths": ["docs/**.md"]},
        {"exclude": ["../secrets/*"]},
        {"schedule": "every hour"},
        {"maxFileSizeBytes": 0},
        {"metadata": {"path": "overridden"}},
        {"deletionPolicy": "Keep"},
        {"searchService": {"url": "ftp://search"}},
        {"repository": {"url": "ext::sh -c id"}},
        {"repository": {"url": "https://user:s3cret@github.com/acme/docs"}},
        {"repository": {"url": "ssh://-oProxyCommand=id@github.com/acme/docs"}},
        {"repository": {"url": "ssh://%2DoProxyCommand=id@github.com/acme/docs"}},
    ],
)
def test_hostile_or_broken_specs_are_invalid(changes: dict[str, Any]) -> None:
    plan = decide(body({**SPEC, **changes}), {}, SETTINGS, NOW)
    assert plan.action == "invalid" and plan.error
    assert "s3cret" not in plan.error  # the message never echoes a credential


def test_a_full_reconcile_left_owed_is_done_by_the_retry() -> None:
    owed = synced(phase="Failed", lastFullSyncTime=None, nextSyncTime="2024-05-01T11:59:00Z")
    plan = decide(body(), owed, SETTINGS, NOW)
    assert plan.action == "sync" and plan.full


class _Metrics:
    def set_phase(self, *_: object) -> None:
        pass


def _after(step: Callable[[outcome.StatusWriter], None], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The status once `step` wrote the outcome of a sync of a source synced at commit a…a."""
    monkeypatch.setattr(kopf, "warn", lambda *_, **__: None)  # events need a running operator
    monkeypatch.setattr(kopf, "info", lambda *_, **__: None)
    state = SourceState(status=synced(nextSyncTime="2024-05-01T11:59:00Z"))
    step(outcome.StatusWriter(SimpleNamespace(metrics=_Metrics()), state, body(), kopf.Patch()))  # type: ignore[arg-type]
    assert state.status is not None
    return state.status


def _partial(full: bool) -> SyncResult:
    return SyncResult(commit="b" * 40, full=full, added=0, modified=0, deleted=1, renamed=0, unchanged=0,
                      skipped=[], failed=[FileIssue("y.md", "not ingested: 413")],
                      documents=1, duration_s=0.1)  # fmt: skip


@pytest.mark.parametrize("full", [False, True])
def test_a_partial_sync_owes_a_full_reconcile(full: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The partial sync applied some changes (a deletion) but the commit stays: if the repository
    # is then reverted to that commit, only a full reconcile notices what the service lost.
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    status = _after(lambda writer: writer.synced(source, _partial(full), NOW, NOW), monkeypatch)
    assert status["lastSyncedCommit"] == "a" * 40
    plan = decide(body(), status, SETTINGS, NOW)
    assert plan.action == "sync" and plan.full


def test_refused_files_are_skips_the_commit_advances_and_the_next_sync_is_incremental(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, str]] = []
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    refused = [FileIssue(f"big/{i:02}.md", "not ingested, refused by the search service: 413 ...", "DOCUMENT_TOO_LARGE")
               for i in range(60)]  # fmt: skip
    result = SyncResult(
        commit="b" * 40, full=False, added=1, modified=0, deleted=0, renamed=0, unchanged=0,
        skipped=[FileIssue("a.png", "binary: contains NUL bytes"), *refused], failed=[], documents=5,
        duration_s=0.1, baseline=Baseline(epoch="epoch-1", documents=5),
    )  # fmt: skip

    def synced_with_events(writer: outcome.StatusWriter) -> None:
        monkeypatch.setattr(kopf, "warn", lambda _body, reason, message: events.append((reason, message)))
        writer.synced(source, result, NOW, NOW)

    status = _after(synced_with_events, monkeypatch)
    assert status["phase"] == "Synced" and status["lastSyncedCommit"] == "b" * 40
    assert (status["collectionEpoch"], status["expectedDocumentCount"]) == ("epoch-1", 5)
    listed = status["skippedFiles"]
    assert listed[0] == {"path": "a.png", "reason": "binary: contains NUL bytes"}
    assert listed[1] == {"path": "big/00.md", "reason": refused[0].reason, "code": "DOCUMENT_TOO_LARGE"}
    assert len(listed) == 50 and status["skippedFilesOmitted"] == 11 and status["lastSync"]["skipped"] == 61
    assert [reason for reason, _ in events] == ["DocumentsRejected"]
    assert "60 files skipped" in events[0][1]
    assert "60 refused by the search service" in next(c for c in status["conditions"] if c["type"] == "Synced")["message"]
    due = dict(status, nextSyncTime="2024-05-01T11:59:00Z")
    plan = decide(body(), due, SETTINGS, NOW)
    assert plan.action == "sync" and not plan.full  # the skips owe nothing


def test_drift_is_shown_in_status_and_an_event(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    why = "the collection epoch is 'e2', the last sync wrote to 'e1': the collection was re-created"
    result = SyncResult(
        commit="b" * 40, full=True, added=3, modified=0, deleted=0, renamed=0, unchanged=0, skipped=[], failed=[],
        documents=3, duration_s=0.1, baseline=Baseline(epoch="e2", documents=3), drift=why,
    )  # fmt: skip

    def synced_with_events(writer: outcome.StatusWriter) -> None:
        monkeypatch.setattr(kopf, "warn", lambda _body, reason, message: events.append((reason, message)))
        writer.synced(source, result, NOW, NOW)

    status = _after(synced_with_events, monkeypatch)
    assert status["lastSync"]["drift"] == why and status["collectionEpoch"] == "e2"
    assert events == [("DriftDetected", f"full reconcile: {why}")]
    message = next(c for c in status["conditions"] if c["type"] == "Synced")["message"]
    assert message.startswith(f"full reconcile after drift ({why})")


def test_a_failed_sync_owes_a_full_reconcile(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sync may fail after some documents went through (the read-back of the count, say).
    error = ServiceUnavailableError("down")
    status = _after(lambda writer: writer.failed(error, retry_at=NOW), monkeypatch)
    plan = decide(body(), status, SETTINGS, NOW)
    assert plan.action == "sync" and plan.full


async def test_a_sync_interrupted_by_a_restart_is_redone_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    # Syncing at start-up: the last process may have died half-way through applying a diff. Here
    # the schedule also changed meanwhile, so the first call only re-announces: the debt must be
    # written down, not just remembered by this one call.
    monkeypatch.setattr(reconcile, "_sync", None)  # this call must not sync
    services = SimpleNamespace(settings=SETTINGS, metrics=_Metrics())
    state, patch = SourceState(), kopf.Patch()
    interrupted = body(dict(SPEC, schedule="@every 2h"), generation=2) | {"status": synced(phase="Syncing")}
    await reconcile.tick(services, state, interrupted, patch, None)  # type: ignore[arg-type]
    assert patch.status["phase"] == "Syncing" and patch.status["lastFullSyncTime"] is None
    assert state.status is not None and decide(interrupted, state.status, SETTINGS, NOW).full
    # A sync this process announced itself runs as planned.
    assert not decide(body(), synced(phase="Syncing"), SETTINGS, NOW).full


@pytest.mark.parametrize(("schedule", "interval"), [("@every 1ms", "0.001s"), ("@every 59s", "59s")])
def test_a_schedule_below_the_minimum_interval_is_invalid(schedule: str, interval: str) -> None:
    spec = dict(SPEC, schedule=schedule)
    plan = decide(body(spec), {}, SETTINGS, NOW)
    assert plan.action == "invalid"
    assert interval in plan.error and "60s" in plan.error and "KBOPERATOR_MIN_SYNC_INTERVAL_SECONDS" in plan.error
    assert decide(body(spec), failed("InvalidSpec"), SETTINGS, NOW).action == "wait"  # not retried
    fast = OperatorSettings(min_sync_interval_seconds=0.5)
    assert decide(body(dict(SPEC, schedule="@every 1s")), {}, fast, NOW).action == "sync"


def test_a_damaged_clone_is_a_named_failure_not_an_internal_error() -> None:
    assert outcome.failure_reason(RepositoryReadError("reading the cached clone failed")) == "RepositoryReadFailed"
    assert outcome.failure_reason(RuntimeError("a bug")) == "InternalError"


def test_every_status_field_written_is_declared_in_the_crd(monkeypatch: pytest.MonkeyPatch) -> None:
    # A structural schema prunes undeclared status fields: the drift baseline would be lost silently.
    validator = jsonschema.Draft4Validator(_strict(_schema()["properties"]["status"]))
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    result = SyncResult(
        commit="b" * 40, full=True, added=1, modified=0, deleted=0, renamed=0, unchanged=0,
        skipped=[FileIssue("a.png", "binary"), FileIssue("b.md", "413", "DOCUMENT_TOO_LARGE")],
        failed=[], documents=1, duration_s=0.1, baseline=Baseline(epoch="e1", documents=1), drift="the epoch changed",
    )  # fmt: skip
    for step in (
        lambda writer: writer.synced(source, result, NOW, NOW),
        lambda writer: writer.synced(source, _partial(False), NOW, NOW),
        lambda writer: writer.failed(ServiceUnavailableError("down"), retry_at=NOW),
    ):
        status = _after(step, monkeypatch)
        assert not list(validator.iter_errors(status)), status
