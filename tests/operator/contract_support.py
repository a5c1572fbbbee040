"""A sync result to report, shared by the client contract tests."""

from __future__ import annotations

from dataclasses import replace

from kboperator.models import FileIssue, SyncResult

SOURCE = "team/docs"


def synced(**changes: object) -> SyncResult:
    result = SyncResult(
        commit="c0ffee" * 6 + "c0ff",
        full=True,
        added=2,
        modified=1,
        deleted=1,
        renamed=1,
        unchanged=5,
        skipped=[FileIssue("big.md", "refused by the search service: 413", "DOCUMENT_TOO_LARGE")],
        failed=[],
        documents=9,
        duration_s=1.5,
    )
    return replace(result, **changes)  # type: ignore[arg-type]
