"""When a source syncs: the pure decision behind the operator's timer."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kboperator.crd import SYNC_REQUEST_ANNOTATION
from kboperator.reconcile import decide
from kboperator.settings import OperatorSettings
from kboperator.source import parse_source

NOW = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
SETTINGS = OperatorSettings(full_reconcile_interval=86400)
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
    allowed = OperatorSettings(allow_local_repositories=True)
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
