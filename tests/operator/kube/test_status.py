"""Status conditions follow the Kubernetes conventions; lists stay bounded; metrics count truly."""

from __future__ import annotations

import datetime
import socket
import urllib.request

from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.status import MAX_LISTED_FILES, condition, issues, merge_conditions
from kboperator.models import FileIssue, SyncResult


def day(n: int) -> datetime.datetime:
    return datetime.datetime(2024, 1, n, tzinfo=datetime.UTC)


def test_transition_time_moves_only_when_the_status_changes() -> None:
    first = condition(None, "Ready", True, "SyncSucceeded", "ok", generation=1, now=day(1))
    same = condition([first], "Ready", True, "SyncSucceeded", "still ok", generation=2, now=day(2))
    flipped = condition([same], "Ready", False, "PartialSync", "1 failed", generation=2, now=day(3))
    unknown = condition([flipped], "Ready", None, "Pending", "queued", generation=2, now=day(4))
    assert first.last_transition_time == same.last_transition_time == day(1)
    assert same.message == "still ok" and same.observed_generation == 2
    assert flipped.last_transition_time == day(3) and flipped.status == "False"
    assert unknown.status == "Unknown" and unknown.last_transition_time == day(4)
    # As the API gets it: camelCase, RFC 3339 to the second; no observedGeneration when none is known.
    assert first.patch() == {
        "type": "Ready", "status": "True", "reason": "SyncSucceeded", "message": "ok",
        "lastTransitionTime": "2024-01-01T00:00:00Z", "observedGeneration": 1,
    }  # fmt: skip
    assert "observedGeneration" not in condition(None, "Ready", True, "R", "", generation=None, now=day(1)).patch()


def test_merge_keeps_other_types_and_puts_ready_first() -> None:
    synced = condition(None, "Synced", True, "SyncSucceeded", "", generation=1, now=day(1))
    ready = condition(None, "Ready", False, "Suspended", "", generation=1, now=day(1))
    merged = merge_conditions([synced], [ready])
    assert [c.type for c in merged] == ["Ready", "Synced"]
    assert merge_conditions(merged, [ready.model_copy(update={"reason": "Other"})])[0].reason == "Other"


def test_file_lists_are_bounded() -> None:
    listed = issues(FileIssue(f"f{i}.md", "x" * 900) for i in range(500))
    assert len(listed) == MAX_LISTED_FILES and len(listed[0]["reason"]) == 500


def test_metrics_count_results_documents_and_phases() -> None:
    metrics = OperatorMetrics()
    result = SyncResult(
        commit="c" * 40,
        full=False,
        added=2,
        modified=1,
        deleted=0,
        renamed=1,
        unchanged=5,
        skipped=[FileIssue("a.bin", "binary")],
        failed=[FileIssue("b.md", "503")],
        documents=9,
        duration_s=1.5,
    )
    metrics.record_sync(result)
    metrics.record_failure(0.5)
    metrics.set_phase("ns/a", "Synced")
    metrics.set_phase("ns/b", "Synced")
    metrics.set_phase("ns/b", "Failed")
    metrics.set_phase("ns/c", "Synced")
    metrics.set_phase("ns/c", None)
    sample = metrics.registry.get_sample_value
    assert sample("kb_operator_syncs_total", {"result": "partial"}) == 1
    assert sample("kb_operator_syncs_total", {"result": "failed"}) == 1
    assert sample("kb_operator_documents_total", {"outcome": "added"}) == 2
    assert sample("kb_operator_documents_total", {"outcome": "failed"}) == 1
    assert sample("kb_operator_sync_duration_seconds_count", {}) == 2
    assert sample("kb_operator_sources", {"phase": "Synced"}) == 1
    assert sample("kb_operator_sources", {"phase": "Failed"}) == 1
    assert sample("kb_operator_sources", {"phase": "Suspended"}) == 0


def test_metrics_are_served_over_http_and_port_zero_disables_them() -> None:
    metrics = OperatorMetrics()
    metrics.serve(0)
    assert not metrics.serving
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics.serve(port, addr="127.0.0.1")
    assert metrics.serving
    try:
        metrics.set_phase("ns/a", "Synced")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
            text = response.read().decode()
    finally:
        metrics.close()
    assert 'kb_operator_sources{phase="Synced"} 1.0' in text
    assert "kb_operator_sync_duration_seconds_bucket" in text
