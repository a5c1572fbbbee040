"""The operator's state machine: every transition of the pure decision, and what its writes owe the next one."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import jsonschema
import kopf
import pytest

from kboperator.errors import RepositoryReadError, ServiceUnavailableError
from kboperator.kube import reconcile
from kboperator.kube.observed import observe
from kboperator.kube.reconcile import SourceState
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.source import parse_source
from kboperator.kube.statemachine import Action, Decision, Reason, Trigger, decide, failure_reason
from kboperator.kube.status import StatusWriter
from kboperator.models import Baseline, FileIssue, SyncResult
from kboperator.settings import OperatorSettings
from tests.operator.kube.sources import (
    BASELINE,
    DRIFTED,
    NOW,
    SETTINGS,
    SPEC,
    body,
    partial_sync,
    synced,
    typed,
)
from tests.operator.kube.support import crd_schema, strict_schema


def decide_on(
    obj: dict[str, Any], status: KnowledgeSourceStatus, settings: OperatorSettings, now: datetime.datetime, **kw: Any
) -> Decision:
    """decide() on the object as a turn observes it."""
    return decide(observe(obj, settings), status, settings, now, **kw)


def failed(reason: str, **changes: Any) -> dict[str, Any]:
    condition = {"type": "Synced", "status": "False", "reason": reason, "message": "", "lastTransitionTime": "t"}
    return synced(phase="Failed", conditions=[condition], **changes)


JITTER = OperatorSettings(full_reconcile_interval=86400, min_sync_interval_seconds=60, startup_jitter_seconds=30)
DUE = "2024-05-01T11:59:00Z"  # a nextSyncTime already past at NOW
REF_DEV = dict(SPEC, repository={"url": SPEC["repository"]["url"], "ref": "dev"})  # another document set
BAD_REF = {"repository": {"url": "https://github.com/acme/docs", "ref": "a..b"}}
W, SU, INV, RE, ST, AN, SY, KEEP, DEL, CD = (
    Action.WAIT,
    Action.SUSPEND,
    Action.INVALID,
    Action.RESCHEDULE,
    Action.STAGGER,
    Action.ANNOUNCE,
    Action.SYNC,
    Action.RETAIN,
    Action.DELETE,
    Action.CHECK_DRIFT,
)
FIRST, ANNOUNCED, REQUESTED, CHANGED, SCHEDULED = (
    Trigger.FIRST_SYNC,
    Trigger.ANNOUNCED,
    Trigger.REQUESTED,
    Trigger.SPEC_CHANGED,
    Trigger.SCHEDULED,
)


def deleted(spec: dict[str, Any]) -> dict[str, Any]:
    obj = body(spec)
    return obj | {"metadata": {**obj["metadata"], "deletionTimestamp": "2024-05-01T11:00:00Z"}}


# (case, body, status, settings, restarted) -> (action, full, trigger, wait): one row per transition.
TRANSITIONS: list[tuple[str, dict[str, Any], dict[str, Any], OperatorSettings, bool, tuple[Action, bool, Any, Any]]] = [
    ("being deleted", deleted(SPEC), synced(), SETTINGS, False, (DEL, False, None, None)),
    (
        "being deleted, policy Retain",
        deleted(dict(SPEC, deletionPolicy="Retain")),
        synced(),
        SETTINGS,
        False,
        (KEEP, False, None, None),
    ),
    (
        "being deleted while suspended",
        deleted(dict(SPEC, suspend=True)),
        synced(phase="Suspended"),
        SETTINGS,
        False,
        (DEL, False, None, None),
    ),
    ("being deleted, spec invalid", deleted(BAD_REF), failed("InvalidSpec"), SETTINGS, False, (DEL, False, None, None)),
    ("suspend, not yet written", body(dict(SPEC, suspend=True)), synced(), SETTINGS, False, (SU, False, None, None)),
    (
        "suspend wins over a request",
        body(dict(SPEC, suspend=True), request="r1"),
        synced(),
        SETTINGS,
        False,
        (SU, False, None, None),
    ),
    (
        "suspend, written for an older spec",
        body(dict(SPEC, suspend=True), 2),
        synced(phase="Suspended"),
        SETTINGS,
        False,
        (SU, False, None, None),
    ),
    (
        "suspend, already written",
        body(dict(SPEC, suspend=True)),
        synced(phase="Suspended"),
        SETTINGS,
        False,
        (W, False, None, None),
    ),
    ("invalid spec, new", body(BAD_REF), {}, SETTINGS, False, (INV, False, None, None)),
    ("invalid spec, already failed", body(BAD_REF), failed("InvalidSpec"), SETTINGS, False, (W, False, None, None)),
    (
        "invalid spec, requested again",
        body(BAD_REF, request="r1"),
        failed("InvalidSpec"),
        SETTINGS,
        False,
        (INV, False, None, None),
    ),
    (
        "invalid spec, edited but still invalid",
        body(BAD_REF, 2),
        failed("InvalidSpec"),
        SETTINGS,
        False,
        (INV, False, None, None),
    ),
    (
        "unknown ref found by git, waits",
        body(),
        failed("InvalidSpec", nextSyncTime=None),
        SETTINGS,
        False,
        (W, False, None, None),
    ),
    (
        "unknown ref found by git, spec edited",
        body(REF_DEV, 2),
        failed("InvalidSpec"),
        SETTINGS,
        False,
        (AN, True, CHANGED, None),
    ),
    (
        "unknown ref found by git, requested again",
        body(request="r1"),
        failed("InvalidSpec"),
        SETTINGS,
        False,
        (AN, True, REQUESTED, None),
    ),
    ("new object", body(), {}, SETTINGS, False, (AN, False, FIRST, None)),
    ("new object, first sight after a restart", body(), {}, JITTER, True, (AN, False, FIRST, None)),
    ("announced", body(), synced(phase="Syncing"), SETTINGS, False, (SY, False, ANNOUNCED, None)),
    (
        "announced, never synced",
        body(),
        {"phase": "Pending", "observedGeneration": 1},
        SETTINGS,
        False,
        (SY, False, ANNOUNCED, None),
    ),
    (
        "announced for an older spec",
        body(REF_DEV, 2),
        synced(phase="Syncing"),
        SETTINGS,
        False,
        (AN, True, ANNOUNCED, None),
    ),
    (
        "announced, the safety pass due",
        body(),
        synced(phase="Syncing", lastFullSyncTime=None),
        SETTINGS,
        False,
        (SY, True, ANNOUNCED, None),
    ),
    ("synced, waits for its time", body(), synced(), SETTINGS, False, (W, False, None, 1800)),
    ("synced, due", body(), synced(nextSyncTime=DUE), SETTINGS, False, (AN, False, SCHEDULED, None)),
    ("synced, no time planned", body(), synced(nextSyncTime=None), SETTINGS, False, (AN, False, SCHEDULED, None)),
    (
        "synced, due, the safety pass due",
        body(),
        synced(nextSyncTime=DUE, lastFullSyncTime="2024-04-29T00:00:00Z"),
        SETTINGS,
        False,
        (AN, True, SCHEDULED, None),
    ),
    (
        "synced, due, never fully",
        body(),
        synced(nextSyncTime=DUE, lastFullSyncTime=None),
        SETTINGS,
        False,
        (AN, True, SCHEDULED, None),
    ),
    ("overdue at a restart", body(), synced(nextSyncTime=DUE), JITTER, True, (ST, False, SCHEDULED, 30)),
    (
        "overdue at a restart, no jitter",
        body(),
        synced(nextSyncTime=DUE),
        SETTINGS.model_copy(update={"startup_jitter_seconds": 0}),
        True,
        (AN, False, SCHEDULED, None),
    ),
    ("new request", body(request="r1"), synced(), SETTINGS, False, (AN, True, REQUESTED, None)),
    ("new request at a restart", body(request="r1"), synced(), JITTER, True, (AN, True, REQUESTED, None)),
    (
        "request already handled",
        body(request="r1"),
        synced(lastHandledSyncRequest="r1"),
        SETTINGS,
        False,
        (W, False, None, 1800),
    ),
    (
        "document set changed",
        body(dict(SPEC, paths=["docs/**/*.md"]), 2),
        synced(),
        SETTINGS,
        False,
        (AN, True, CHANGED, None),
    ),
    ("schedule changed", body(dict(SPEC, schedule="@every 5m"), 2), synced(), SETTINGS, False, (RE, False, None, None)),
    (
        "schedule changed while failing",
        body(dict(SPEC, schedule="@daily"), 2),
        failed("RepositoryUnavailable", nextSyncTime="2024-05-01T12:00:40Z"),
        SETTINGS,
        False,
        (AN, False, CHANGED, None),
    ),
    ("resumed", body(generation=2), synced(phase="Suspended"), SETTINGS, False, (AN, False, CHANGED, None)),
    (
        "failing, waits for its backoff",
        body(),
        failed("RepositoryUnavailable", nextSyncTime="2024-05-01T12:00:40Z"),
        SETTINGS,
        False,
        (W, False, None, 40),
    ),
    (
        "failing, retry due, full owed",
        body(),
        failed("ServiceUnavailable", nextSyncTime=DUE, lastFullSyncTime=None),
        SETTINGS,
        False,
        (AN, True, SCHEDULED, None),
    ),
    ("synced with a baseline, drift check due", body(), synced(**BASELINE), SETTINGS, False, (CD, False, None, None)),
    (
        "drift found, policy Auto",
        body(),
        synced(**BASELINE, conditions=DRIFTED),
        SETTINGS,
        False,
        (AN, True, Trigger.DRIFTED, None),
    ),
    (
        "drift found, policy Manual: checks go on",
        body(dict(SPEC, driftPolicy="Manual")),
        synced(**BASELINE, conditions=DRIFTED),
        SETTINGS,
        False,
        (CD, False, None, None),
    ),
    (
        "policy Ignore: no check",
        body(dict(SPEC, driftPolicy="Ignore")),
        synced(**BASELINE),
        SETTINGS,
        False,
        (W, False, None, 1800),
    ),
]


@pytest.mark.parametrize(("case", "obj", "status", "settings", "restarted", "expected"), TRANSITIONS,
                         ids=[row[0] for row in TRANSITIONS])  # fmt: skip
def test_every_transition(
    case: str,
    obj: dict[str, Any],
    status: dict[str, Any],
    settings: OperatorSettings,
    restarted: bool,
    expected: tuple[Action, bool, Any, Any],
) -> None:
    decision = decide_on(obj, typed(status), settings, NOW, restarted=restarted)
    assert (decision.action, decision.full, decision.trigger, decision.wait) == expected
    assert (decision.source is not None) == (decision.action in (RE, ST, AN, SY, CD))
    assert bool(decision.error) == (decision.action is INV)


def test_every_action_has_a_row() -> None:
    assert {row[-1][0] for row in TRANSITIONS} == set(Action)


def test_the_trigger_is_shown_as_before() -> None:
    requested = decide_on(body(request="2024-05-01T12:00:00Z"), typed(synced()), SETTINGS, NOW)
    assert requested.why == "requested at 2024-05-01T12:00:00Z"
    assert [Decision(AN, trigger=t).why for t in Trigger] == [
        "first sync",
        "announced",
        "requested at None",
        "spec changed",
        "drift detected",
        "scheduled",
    ]


def test_a_webhooks_push_request_asks_for_an_incremental_sync() -> None:
    pushed = decide_on(body(request="push:20261126T070000.000000Z:delivery-1"), typed(synced()), SETTINGS, NOW)
    assert (pushed.action, pushed.trigger, pushed.full) == (AN, Trigger.REQUESTED, False)
    by_hand = decide_on(body(request="2026-11-26T07:00:00Z"), typed(synced()), SETTINGS, NOW)
    assert (by_hand.action, by_hand.trigger, by_hand.full) == (AN, Trigger.REQUESTED, True)


def test_the_reasons_are_the_strings_users_see() -> None:
    # Part of the user-visible contract: alerts and scripts match on them. Never rename one.
    assert {r.value for r in Reason} == {
        "SyncRunning",
        "SyncEnded",
        "SyncStopped",
        "SyncInterrupted",
        "ServiceDrifted",
        "NoDrift",
        "DriftRepaired",
        "Pending",
        "Suspended",
        "SyncSucceeded",
        "PartialSync",
        "CleanupFailed",
        "InvalidSpec",
        "SecretUnavailable",
        "RepositoryAuthFailed",
        "RepositoryUnavailable",
        "RepositoryReadFailed",
        "MassDeletionRefused",
        "ServiceAuthFailed",
        "ServiceUnavailable",
        "ServiceRejected",
        "KubernetesUnavailable",
        "KubernetesAccessFailed",
        "InternalError",
        "SyncCompleted",
        "SyncPartial",
        "DriftDetected",
        "DocumentsRejected",
        "DocumentsDeleted",
        "DocumentsRetained",
        "DocumentsLeftBehind",
        "WithinBound",
        "FellBehind",
        "WebhookUnavailable",
    }


@pytest.mark.parametrize("ref", ["-oProxyCommand=sh", "a..b", "refs/heads/x.lock"])
def test_an_invalid_ref_says_what_is_wrong(ref: str) -> None:
    spec = {"repository": {"url": "https://github.com/acme/docs", "ref": ref}}
    decision = decide_on(body(spec), typed({}), SETTINGS, NOW)
    assert decision.action is INV and "ref" in decision.error


def test_local_repositories_are_refused_unless_allowed(tmp_path: Any) -> None:
    spec = {"repository": {"url": str(tmp_path)}}
    assert decide_on(body(spec), typed({}), SETTINGS, NOW).action is INV
    allowed = OperatorSettings(allow_local_repositories=True, local_repositories_root=tmp_path)
    assert decide_on(body(spec), typed({}), allowed, NOW).action is AN


@pytest.mark.parametrize(
    "changes",
    [
        {"paths": ["docs/**.md"]},
        {"exclude": ["../secrets/*"]},
        {"schedule": "every hour"},
        {"maxFileSizeBytes": 0},
        {"metadata": {"path": "overridden"}},
        {"versionPattern": "docs/(?P<v>[^/]+)/"},
        {"versionPattern": "docs/(?P<version>[^/]+"},
        {"pathWeights": {"content/blog/**": 0}},
        {"pathWeights": {"content/blog/**": 5}},
        {"pathWeights": {"content/[blog/**": 0.5}},
        {"pathWeights": {"content/blog/**": "low"}},
        {"deletionPolicy": "Keep"},
        {"searchService": {"url": "ftp://search"}},
        {"repository": {"url": "ext::sh -c id"}},
        {"repository": {"url": "https://user:s3cret@github.com/acme/docs"}},
        {"repository": {"url": "ssh://-oProxyCommand=id@github.com/acme/docs"}},
        {"repository": {"url": "ssh://%2DoProxyCommand=id@github.com/acme/docs"}},
    ],
)
def test_hostile_or_broken_specs_are_invalid(changes: dict[str, Any]) -> None:
    decision = decide_on(body({**SPEC, **changes}), typed({}), SETTINGS, NOW)
    assert decision.action is INV and decision.error
    assert "s3cret" not in decision.error  # the message never echoes a credential


def test_a_full_reconcile_left_owed_is_done_by_the_retry() -> None:
    owed = synced(phase="Failed", lastFullSyncTime=None, nextSyncTime="2024-05-01T11:59:00Z")
    decision = decide_on(body(), typed(owed), SETTINGS, NOW)
    assert decision.action is AN and decision.full


class _Metrics:
    def set_phase(self, *_: object) -> None:
        pass


def _after(step: Callable[[StatusWriter], None], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The status once `step` wrote the outcome of a sync of a source synced at commit a…a."""
    monkeypatch.setattr(kopf, "warn", lambda *_, **__: None)  # events need a running operator
    monkeypatch.setattr(kopf, "info", lambda *_, **__: None)
    status = typed(synced(nextSyncTime="2024-05-01T11:59:00Z"))
    step(StatusWriter(_Metrics(), status, body(), kopf.Patch()))  # type: ignore[arg-type]
    return status.dump()


@pytest.mark.parametrize("full", [False, True])
def test_a_partial_sync_owes_a_full_reconcile(full: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The partial sync applied some changes (a deletion) but the commit stays: if the repository
    # is then reverted to that commit, only a full reconcile notices what the service lost.
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    status = _after(lambda writer: writer.synced(source, partial_sync(full), NOW, NOW), monkeypatch)
    assert status["lastSyncedCommit"] == "a" * 40
    decision = decide_on(body(), typed(status), SETTINGS, NOW)
    assert decision.action is AN and decision.full


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

    def synced_with_events(writer: StatusWriter) -> None:
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
    assert (
        "60 refused by the search service" in next(c for c in status["conditions"] if c["type"] == "Synced")["message"]
    )
    due = dict(status, nextSyncTime="2024-05-01T11:59:00Z")
    decision = decide_on(body(), typed(due), SETTINGS, NOW)
    assert decision.action is AN and not decision.full  # the skips owe nothing


def test_drift_is_shown_in_status_and_an_event(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    why = "the collection epoch is 'e2', the last sync wrote to 'e1': the collection was re-created"
    result = SyncResult(
        commit="b" * 40, full=True, added=3, modified=0, deleted=0, renamed=0, unchanged=0, skipped=[], failed=[],
        documents=3, duration_s=0.1, baseline=Baseline(epoch="e2", documents=3), drift=why,
    )  # fmt: skip

    def synced_with_events(writer: StatusWriter) -> None:
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
    decision = decide_on(body(), typed(status), SETTINGS, NOW)
    assert decision.action is AN and decision.full


async def test_a_sync_interrupted_by_a_restart_is_redone_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    # Syncing at start-up: the last process may have died half-way through applying a diff. Here
    # the schedule also changed meanwhile, so the first call only re-announces: the debt must be
    # written down, not just remembered by this one call.
    monkeypatch.setattr(reconcile, "_sync", None)  # this call must not sync
    services = SimpleNamespace(settings=SETTINGS, metrics=_Metrics(), webhooks=None)
    state, patch = SourceState(), kopf.Patch()
    interrupted = body(dict(SPEC, schedule="@every 2h"), generation=2) | {"status": synced(phase="Syncing")}
    await reconcile.run_loop_turn(services, state, interrupted, patch, None)  # type: ignore[arg-type]
    assert patch.status["phase"] == "Syncing" and patch.status["lastFullSyncTime"] is None
    assert state.status is not None and decide_on(interrupted, state.status, SETTINGS, NOW).full
    # A sync this process announced itself runs as planned.
    assert not decide_on(body(), typed(synced(phase="Syncing")), SETTINGS, NOW).full


@pytest.mark.parametrize(("schedule", "interval"), [("@every 1ms", "0.001s"), ("@every 59s", "59s")])
def test_a_schedule_below_the_minimum_interval_is_invalid(schedule: str, interval: str) -> None:
    spec = dict(SPEC, schedule=schedule)
    decision = decide_on(body(spec), typed({}), SETTINGS, NOW)
    assert decision.action is INV
    assert interval in decision.error and "60s" in decision.error
    assert "KBOPERATOR_MIN_SYNC_INTERVAL_SECONDS" in decision.error
    assert decide_on(body(spec), typed(failed("InvalidSpec")), SETTINGS, NOW).action is W  # not retried
    fast = OperatorSettings(min_sync_interval_seconds=0.5)
    assert decide_on(body(dict(SPEC, schedule="@every 1s")), typed({}), fast, NOW).action is AN


def test_a_damaged_clone_is_a_named_failure_not_an_internal_error() -> None:
    assert failure_reason(RepositoryReadError("reading the cached clone failed")) == "RepositoryReadFailed"
    assert failure_reason(RuntimeError("a bug")) == "InternalError"


def test_every_status_field_written_is_declared_in_the_crd(monkeypatch: pytest.MonkeyPatch) -> None:
    # A structural schema prunes undeclared status fields: the drift baseline would be lost silently.
    validator = jsonschema.Draft4Validator(strict_schema(crd_schema()["properties"]["status"]))
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    result = SyncResult(
        commit="b" * 40, full=True, added=1, modified=0, deleted=0, renamed=0, unchanged=0,
        skipped=[FileIssue("a.png", "binary"), FileIssue("b.md", "413", "DOCUMENT_TOO_LARGE")],
        failed=[], documents=1, duration_s=0.1, baseline=Baseline(epoch="e1", documents=1), drift="the epoch changed",
    )  # fmt: skip
    for step in (
        lambda writer: writer.synced(source, result, NOW, NOW),
        lambda writer: writer.synced(source, partial_sync(False), NOW, NOW),
        lambda writer: writer.failed(ServiceUnavailableError("down"), retry_at=NOW),
    ):
        status = _after(step, monkeypatch)
        assert not list(validator.iter_errors(status)), status
