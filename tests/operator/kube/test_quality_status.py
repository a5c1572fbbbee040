"""status.quality: the judged questions of the last commit synced, written by the sync that asked them."""

from __future__ import annotations

import datetime
from dataclasses import replace

import kopf
import pytest

from kboperator.kube.metrics import OperatorMetrics
from kboperator.kube.resource import KnowledgeSourceStatus
from kboperator.kube.source import parse_source
from kboperator.kube.status import MAX_LISTED_QUESTIONS, StatusWriter
from kboperator.models import Quality, QuestionOutcome, SyncResult

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
SPEC = {"repository": {"url": "https://github.com/acme/docs"}, "schedule": "@every 1h"}
BODY = {"metadata": {"namespace": "kb", "name": "docs", "generation": 1}}
RESULT = SyncResult(
    commit="b" * 40, full=False, added=1, modified=0, deleted=0, renamed=0, unchanged=2, skipped=[], failed=[],
    documents=3, duration_s=0.1,
)  # fmt: skip


@pytest.fixture(autouse=True)
def no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kopf, "warn", lambda *_, **__: None)  # events need a running operator
    monkeypatch.setattr(kopf, "info", lambda *_, **__: None)


def after(status: KnowledgeSourceStatus, result: SyncResult) -> tuple[KnowledgeSourceStatus, dict]:
    writer = StatusWriter(OperatorMetrics(), status, BODY, kopf.Patch())
    writer.synced(parse_source("kb", "docs", SPEC, allow_local=False), result, NOW, NOW)
    return writer.status, dict(writer.patch.status)


def test_a_sync_that_asked_the_questions_writes_their_figures_and_first_failures() -> None:
    failures = [QuestionOutcome(f"question {i}\nsecond line " + "w" * 300, ("docs/x.md",), None) for i in range(8)]
    quality = Quality((QuestionOutcome("found?", ("docs/a.md",), 1, ("fact",), ()), *failures))
    status, patch = after(KnowledgeSourceStatus(), replace(RESULT, quality=quality))
    assert patch["quality"] == {
        "commit": "b" * 12, "measuredTime": "2026-12-02T12:00:00Z", "questions": 9, "hitAt1": 0.1111,
        "hitAt5": 0.1111, "factsShare": 1.0, "failed": 8,
        "failedQuestions": [f"question {i} second line " + "w" * 177 for i in range(MAX_LISTED_QUESTIONS)],
        "error": None,  # a merge patch: removes an error an earlier sync wrote
    }  # fmt: skip
    assert status.quality is not None and status.quality.hit_at_5 == 0.1111


def test_a_sync_that_fetched_nothing_keeps_them_and_a_commit_without_questions_removes_them() -> None:
    status, _ = after(KnowledgeSourceStatus(), replace(RESULT, quality=Quality(error="questions.yaml: bad")))
    assert status.quality is not None and status.quality.error == "questions.yaml: bad"
    status, patch = after(status, replace(RESULT, fetched=False))
    assert "quality" not in patch and status.quality is not None
    status, patch = after(status, RESULT)
    assert patch["quality"] is None and status.quality is None  # removed by the merge patch
