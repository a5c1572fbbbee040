"""Sync status: what a source's syncer (the operator, knowledge-sync) reports after each sync."""

from __future__ import annotations

import time
from datetime import datetime

from kbsearch.aio.runtime import in_thread, store_call
from kbsearch.errors import InvalidRequestError
from kbsearch.models import FileIssue, Freshness, SyncStatus
from kbsearch.schemas.fields import rfc3339
from kbsearch.schemas.sources import FileIssueBody, FreshnessBody, SyncStatusRequest
from kbsearch.services.access.scope import Caller, SourceCatalog, require_writer
from kbsearch.store.base import VectorStore

DEFAULT_SKEW_S = 300.0


class SyncStatusService:
    """Stores one status per source in the collection, beside its documents (see store/base.py)."""

    def __init__(self, *, store: VectorStore, catalog: SourceCatalog, max_clock_skew_s: float = DEFAULT_SKEW_S) -> None:
        self.store = store
        self.catalog = catalog
        self.max_clock_skew_s = max_clock_skew_s

    async def report(
        self, source_identifier: str, request: SyncStatusRequest, caller: Caller
    ) -> tuple[SyncStatus, bool]:
        """Store the report of a sync of a source the caller may write.

        Returns the status now stored and whether it is this report: a report older (by syncedAt)
        than the stored one never replaces it, so a delayed retry cannot hide a newer outcome.
        """
        require_writer(caller, source_identifier)
        # A report from the future would outrank every real one after it (a 9999-12-31 hides the
        # source's failures for good): refused beyond the allowed clock skew, and a stored one
        # dated that far ahead (written before this check) gives way to the next real report.
        trusted_until = time.time() + self.max_clock_skew_s
        if request.synced_at.timestamp() > trusted_until:
            raise InvalidRequestError(
                f"syncedAt is more than {self.max_clock_skew_s:g} seconds ahead of this service's clock",
                code="SYNCED_AT_IN_FUTURE",
                details={"maxClockSkewSeconds": self.max_clock_skew_s},
            )
        problem = await in_thread(self.store.write_problem)
        if problem is not None:
            raise problem
        status = to_status(source_identifier, request)
        stored = await store_call(self.store.put_sync_status, status, trusted_until)
        self.catalog.wrote(source_identifier)
        if stored:
            return status, True
        current = await store_call(self.store.get_sync_status, source_identifier)
        return (current or status), False


def to_status(source_identifier: str, request: SyncStatusRequest) -> SyncStatus:
    return SyncStatus(
        source_identifier=source_identifier,
        commit=request.commit,
        phase=request.phase,
        documents=request.documents,
        failed=request.failed or 0,
        skipped=request.skipped or 0,
        failed_files=[_issue(i) for i in request.failed_files],
        skipped_files=[_issue(i) for i in request.skipped_files],
        synced_at=rfc3339(request.synced_at),
        next_sync_at=_time(request.next_sync_at),
        message=request.message,
        added=request.added,
        modified=request.modified,
        deleted=request.deleted,
        unchanged=request.unchanged,
        last_success_at=_time(request.last_success_at),
        freshness=_freshness(request.freshness) if request.freshness else None,
    )


def _freshness(body: FreshnessBody) -> Freshness:
    return Freshness(
        remote_commit=body.remote_commit,
        seen_at=rfc3339(body.seen_at),
        searchable_at=rfc3339(body.searchable_at),
        lag_seconds=body.lag_seconds,
    )


def _time(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None


def _issue(body: FileIssueBody) -> FileIssue:
    return FileIssue(path=body.path, reason=body.reason, code=body.code)
