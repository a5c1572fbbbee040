"""Drift between syncs: when a source is checked, what spec.driftPolicy makes of a finding, and how
the DriftDetected condition and event are written and cleared."""

from __future__ import annotations

import datetime
from typing import Any

import kopf
import pytest

from kboperator.kube.observed import observe
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.source import parse_source
from kboperator.kube.statemachine import DRIFT, Action, Trigger, decide, drift_check_time
from kboperator.kube.status import StatusWriter
from kboperator.models import Baseline, SyncResult
from kboperator.settings import OperatorSettings
from tests.operator.kube.sources import BASELINE, NOW, SETTINGS, SPEC, body, partial_sync, synced, typed

LAST_SYNC = datetime.datetime(2024, 5, 1, 11, 30, tzinfo=datetime.UTC)  # synced()'s lastSyncTime
WHY = "the service holds 2 documents of this source, the last sync left 3: documents were deleted"


def policy(name: str) -> dict[str, Any]:
    return body(dict(SPEC, driftPolicy=name))


def check_time(obj: dict[str, Any], status: dict[str, Any], checked_at: datetime.datetime | None = None,
               settings: OperatorSettings = SETTINGS) -> datetime.datetime | None:  # fmt: skip
    return drift_check_time(observe(obj, settings), typed(status), settings, checked_at)


def test_a_synced_source_is_checked_an_interval_after_its_last_sync_or_check() -> None:
    interval = datetime.timedelta(seconds=SETTINGS.drift_check_interval_seconds)
    assert SETTINGS.drift_check_interval_seconds == 300  # the default
    assert check_time(body(), synced(**BASELINE)) == LAST_SYNC + interval
    later = LAST_SYNC + datetime.timedelta(minutes=20)
    assert check_time(body(), synced(**BASELINE), later) == later + interval
    assert check_time(body(), synced(**BASELINE), LAST_SYNC - interval) == LAST_SYNC + interval  # the sync came last
    assert check_time(policy("Manual"), synced(**BASELINE)) == LAST_SYNC + interval


@pytest.mark.parametrize(
    ("obj", "status", "settings"),
    [
        (policy("Ignore"), synced(**BASELINE), SETTINGS),
        (body(), synced(**BASELINE), OperatorSettings(drift_check_interval_seconds=0)),
        (body(), synced(), SETTINGS),  # no baseline: a service too old to tell
        (body(), synced(phase="Failed", **BASELINE), SETTINGS),  # its retry reconciles in full anyway
        (body(), synced(phase="Suspended", **BASELINE), SETTINGS),
    ],
    ids=["policy Ignore", "interval 0", "no baseline", "failed", "suspended"],
)
def test_no_check_is_made(obj: dict[str, Any], status: dict[str, Any], settings: OperatorSettings) -> None:
    assert check_time(obj, status, settings=settings) is None


def test_the_wait_ends_at_the_next_check_or_the_next_sync_whichever_comes_first() -> None:
    checked = NOW - datetime.timedelta(seconds=60)
    waiting = decide(observe(body(), SETTINGS), typed(synced(**BASELINE)), SETTINGS, NOW, drift_checked_at=checked)
    assert (waiting.action, waiting.wait) == (Action.WAIT, 240)
    rare = OperatorSettings(full_reconcile_interval=86400, min_sync_interval_seconds=60,
                            drift_check_interval_seconds=7200)  # fmt: skip
    until_sync = decide(observe(body(), rare), typed(synced(**BASELINE)), rare, NOW, drift_checked_at=checked)
    assert (until_sync.action, until_sync.wait) == (Action.WAIT, 1800)  # nextSyncTime 12:30 comes first


class _Metrics:
    def set_phase(self, *_: object) -> None:
        pass


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    posted: list[tuple[str, str, str]] = []
    monkeypatch.setattr(kopf, "warn", lambda _b, reason, message: posted.append(("Warning", reason, message)))
    monkeypatch.setattr(kopf, "info", lambda _b, reason, message: posted.append(("Normal", reason, message)))
    return posted


def writer_for(status: KnowledgeSourceStatus, obj: dict[str, Any] | None = None) -> tuple[StatusWriter, kopf.Patch]:
    patch = kopf.Patch()
    return StatusWriter(_Metrics(), status, obj or body(), patch), patch  # type: ignore[arg-type]


def drift_condition(status: KnowledgeSourceStatus) -> tuple[str, str, str] | None:
    found = status.condition(DRIFT)
    return (found.status, found.reason, found.message) if found else None


@pytest.mark.parametrize(("name", "then"), [("Auto", "a full re-sync starts now"), ("Manual", "request a sync")])
def test_drift_sets_the_condition_and_posts_one_warning(
    name: str, then: str, events: list[tuple[str, str, str]]
) -> None:
    status = typed(synced(**BASELINE))
    writer, patch = writer_for(status, policy(name))
    writer.drift_checked(WHY, name)
    state = drift_condition(status)
    assert state is not None and state[:2] == ("True", "ServiceDrifted") and WHY in state[2] and then in state[2]
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", "DriftDetected")]
    assert events[0][2] == state[2] and any(c["type"] == DRIFT for c in patch.status["conditions"])
    if name == "Manual":
        assert "kb.knowledgebase.dev/sync-requested-at" in state[2]
    # The next check finds the same drift: nothing new is written or posted.
    again, quiet = writer_for(status, policy(name))
    again.drift_checked(WHY, name)
    assert len(events) == 1 and "conditions" not in quiet.status
    # More documents went: the message follows, still without a second event.
    worse = WHY.replace("holds 2", "holds 1")
    writer_for(status, policy(name))[0].drift_checked(worse, name)
    assert len(events) == 1 and worse in (drift_condition(status) or ("", "", ""))[2]


def test_what_each_policy_does_with_a_drift_found(events: list[tuple[str, str, str]]) -> None:
    for name, expected in (
        ("Auto", (Action.ANNOUNCE, True, Trigger.DRIFTED)),
        ("Manual", (Action.CHECK_DRIFT, False, None)),
    ):
        status = typed(synced(**BASELINE))
        writer_for(status, policy(name))[0].drift_checked(WHY, name)
        decision = decide(observe(policy(name), SETTINGS), status, SETTINGS, NOW)
        assert (decision.action, decision.full, decision.trigger) == expected, name
    # Manual: a requested sync repairs it in full; so would the next scheduled one.
    requested = body(dict(SPEC, driftPolicy="Manual"), request="2024-05-01T12:00:00Z")
    decision = decide(observe(requested, SETTINGS), status, SETTINGS, NOW)
    assert (decision.action, decision.full, decision.trigger) == (Action.ANNOUNCE, True, Trigger.REQUESTED)
    due = status.model_copy(update={"next_sync_time": NOW - datetime.timedelta(minutes=1)})
    assert decide(observe(policy("Manual"), SETTINGS), due, SETTINGS, NOW).full
    # The sync Auto announced runs in full (the announcement does not forget why).
    syncing = typed(synced(**BASELINE, phase="Syncing", conditions=[c.model_dump(by_alias=True, mode="json")
                                                                     for c in status.conditions or ()]))  # fmt: skip
    announced = decide(observe(body(), SETTINGS), syncing, SETTINGS, NOW)
    assert (announced.action, announced.full) == (Action.SYNC, True)


def test_a_check_that_finds_none_says_so_once(events: list[tuple[str, str, str]]) -> None:
    status = typed(synced(**BASELINE))
    writer_for(status)[0].drift_checked(None, "Auto")
    assert drift_condition(status) == (
        "False",
        "NoDrift",
        "the search service holds what the last sync left (3 documents)",
    )
    _, quiet = writer_for(status)
    writer_for(status)[0].drift_checked(None, "Auto")
    assert "conditions" not in quiet.status and events == []
    # Drift that went away by itself (the documents were put back) is cleared by the next check.
    writer_for(status, policy("Manual"))[0].drift_checked(WHY, "Manual")
    writer_for(status, policy("Manual"))[0].drift_checked(None, "Manual")
    assert (drift_condition(status) or ("",))[0] == "False"


def test_a_successful_sync_clears_the_condition(events: list[tuple[str, str, str]]) -> None:
    status = typed(synced(**BASELINE))
    writer_for(status)[0].drift_checked(WHY, "Auto")
    source = parse_source("kb", "docs", SPEC, allow_local=False)
    result = SyncResult(
        commit="a" * 40, full=True, added=1, modified=0, deleted=0, renamed=0, unchanged=2, skipped=[], failed=[],
        documents=3, duration_s=0.1, baseline=Baseline(epoch="e1", documents=3),
    )  # fmt: skip
    writer_for(status)[0].synced(source, result, NOW, NOW)
    state = drift_condition(status)
    assert state is not None and state[:2] == ("False", "DriftRepaired")
    assert state[2] == f"repaired by the sync of {'a' * 12}, which left 3 documents; it found: {WHY}"
    assert decide(observe(body(), SETTINGS), status, SETTINGS, NOW).action is Action.WAIT  # nothing owed now


def test_a_partial_sync_leaves_the_condition_true(events: list[tuple[str, str, str]]) -> None:
    status = typed(synced(**BASELINE))
    writer_for(status)[0].drift_checked(WHY, "Auto")
    retry_at = NOW + datetime.timedelta(seconds=40)
    writer_for(status)[0].synced(parse_source("kb", "docs", SPEC, allow_local=False), partial_sync(True), NOW, retry_at)
    assert (drift_condition(status) or ("",))[0] == "True"
    retry = decide(observe(body(), SETTINGS), status, SETTINGS, NOW)
    assert retry.action is Action.WAIT  # the retry keeps its backoff: no re-sync in a tight loop


def test_a_drift_policy_outside_the_enum_is_an_invalid_spec() -> None:
    decision = decide(observe(policy("Never"), SETTINGS), typed({}), SETTINGS, NOW)
    assert decision.action is Action.INVALID
    assert decision.error == "spec.driftPolicy must be Auto, Manual or Ignore, not 'Never'"
