"""Domain values as API bodies, for the routes that show them."""

from __future__ import annotations

from kbsearch.models import FileIssue, Freshness, SyncStatus
from kbsearch.schemas import FileIssueInfo, FreshnessInfo, SyncStatusInfo


def sync_status_info(status: SyncStatus) -> SyncStatusInfo:
    return SyncStatusInfo(
        commit=status.commit,
        phase=status.phase,
        documents=status.documents,
        failed=status.failed,
        skipped=status.skipped,
        added=status.added,
        modified=status.modified,
        deleted=status.deleted,
        unchanged=status.unchanged,
        failedFiles=[_issue(i) for i in status.failed_files],
        skippedFiles=[_issue(i) for i in status.skipped_files],
        syncedAt=status.synced_at,
        nextSyncAt=status.next_sync_at,
        message=status.message,
        lastSuccessAt=status.last_success_at,
        freshness=_freshness(status.freshness) if status.freshness else None,
    )


def _freshness(fresh: Freshness) -> FreshnessInfo:
    return FreshnessInfo(
        remoteCommit=fresh.remote_commit,
        seenAt=fresh.seen_at,
        searchableAt=fresh.searchable_at,
        lagSeconds=fresh.lag_seconds,
    )


def _issue(issue: FileIssue) -> FileIssueInfo:
    return FileIssueInfo(path=issue.path, reason=issue.reason, code=issue.code)
