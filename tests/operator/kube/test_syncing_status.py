"""The Syncing condition and status.progress: written while a sync runs, closed when it ends, fails or is cut off."""

from __future__ import annotations

import datetime

import kopf

from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.status import StatusWriter
from kboperator.sync.reporting import Snapshot

STARTED = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
BODY = {"metadata": {"namespace": "kb", "name": "docs", "generation": 3}}


def writer(status: KnowledgeSourceStatus | None = None) -> StatusWriter:
    return StatusWriter(OperatorMetrics(), status or KnowledgeSourceStatus(), BODY, kopf.Patch())


def syncing(status: KnowledgeSourceStatus) -> tuple[str, str, str] | None:
    found = status.condition("Syncing")
    return None if found is None else (found.status, found.reason, found.message)


def test_progress_is_a_status_patch_with_the_syncing_condition_true() -> None:
    w = writer()
    patch = w.progress(Snapshot("kb/docs", "syncing", 25, 126, STARTED))
    assert patch["progress"] == {"done": 25, "total": 126, "startedAt": "2026-12-02T12:00:00Z", "summary": "25/126"}
    (condition,) = patch["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Syncing", "True", "SyncRunning")
    assert condition["message"] == "syncing 25 of 126 documents"
    assert syncing(w.status) == ("True", "SyncRunning", "syncing 25 of 126 documents")
    before = w.progress(Snapshot("kb/docs", "fetching", 0, None, STARTED))
    assert before["progress"]["summary"] == "fetching" and "total" not in {
        k for k, v in before["progress"].items() if v
    }


def test_the_end_closes_it_with_the_final_counts_and_removes_progress() -> None:
    w = writer()
    w.progress(Snapshot("kb/docs", "syncing", 120, 126, STARTED))
    w.sync_ended(Snapshot("kb/docs", "syncing", 126, 126, STARTED), None, 42.0)
    assert syncing(w.status) == ("False", "SyncEnded", "the last sync went through 126 of 126 documents in 42s")
    assert w.status.progress is None and w.patch.status["progress"] is None  # removed by the merge patch


def test_a_failed_sync_says_where_it_stopped() -> None:
    w = writer()
    w.progress(Snapshot("kb/docs", "syncing", 57, 126, STARTED))
    w.sync_ended(Snapshot("kb/docs", "syncing", 57, 126, STARTED), RuntimeError("503 from the service"), 9.0)
    assert syncing(w.status) == (
        "False",
        "SyncStopped",
        "the last sync stopped after 57 of 126 documents: 503 from the service",
    )
    fetching = writer()
    fetching.sync_ended(Snapshot("kb/docs", "fetching", 0, None, STARTED), RuntimeError("no route"), 1.0)
    assert syncing(fetching.status) == ("False", "SyncStopped", "the last sync stopped while fetching: no route")


def test_a_sync_that_wrote_no_progress_writes_no_condition() -> None:
    w = writer()
    w.sync_ended(None, None, 0.1)  # the ref was still at the last synced commit
    assert w.status.condition("Syncing") is None and "conditions" not in w.patch.status


def test_a_restart_mid_sync_closes_it() -> None:
    w = writer()
    w.progress(Snapshot("kb/docs", "syncing", 25, 126, STARTED))
    restarted = writer(KnowledgeSourceStatus.model_validate(w.status.dump()))
    restarted.interrupted()
    assert syncing(restarted.status)[:2] == ("False", "SyncInterrupted")  # type: ignore[index]
    assert restarted.status.progress is None
