"""Sync status: what a source's syncer (the operator, knowledge-sync) reports after each sync,
and while one runs, how far it is.

Both live in the source's one sync status record. A progress report keeps the last outcome and
replaces its progress; an outcome replaces the record and so ends the progress. A progress report
of a sync that started before the stored outcome ended is a late one and is dropped (as is an
outcome older than the stored one): a delayed retry never brings back "syncing" after the end.

An outcome may carry the judged questions' quality of its commit. One without it, of the commit
the stored outcome names, keeps the stored quality (a sync that fetched nothing asks nothing);
of another commit it has none. The figures also go to the Prometheus gauges of this replica
(Metrics.record_quality).
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime

from kbsearch.aio.runtime import in_thread, store_call
from kbsearch.commands import ProgressReport, SyncReport
from kbsearch.errors import InvalidRequestError
from kbsearch.metrics import Metrics
from kbsearch.models import JudgedQuality, SyncProgress, SyncStatus, rfc3339
from kbsearch.services.access.scope import Caller, SourceCatalog, require_writer
from kbsearch.services.serving import Serving
from kbsearch.store.base import VectorStore
from kbsearch.store.payloads import rfc3339_seconds

DEFAULT_SKEW_S = 300.0
QUALITY_FIGURES = ("hit_at_1", "hit_at_5", "facts")


class SyncStatusService:
    """Stores one status per source in the collection, beside its documents (see store/base.py)."""

    def __init__(
        self,
        serving: Serving,
        *,
        catalog: SourceCatalog,
        max_clock_skew_s: float = DEFAULT_SKEW_S,
        metrics: Metrics | None = None,
    ) -> None:
        self.serving = serving
        self.catalog = catalog
        self.max_clock_skew_s = max_clock_skew_s
        self.metrics = metrics

    @property
    def store(self) -> VectorStore:
        return self.serving.store

    async def report(self, report: SyncReport, caller: Caller) -> tuple[SyncStatus, bool]:
        """Store the report of a sync of a source the caller may write.

        Returns the status now stored and whether it is this report: a report older (by syncedAt)
        than the stored one never replaces it, so a delayed retry cannot hide a newer outcome.
        """
        source_identifier = report.source_identifier
        require_writer(caller, source_identifier)
        # A report from the future would outrank every real one after it (a 9999-12-31 hides the
        # source's failures for good): refused beyond the allowed clock skew, and a stored one
        # dated that far ahead (written before this check) gives way to the next real report.
        trusted_until = time.time() + self.max_clock_skew_s
        progress = report.progress
        dated, field = (
            (report.synced_at, "syncedAt") if progress is None else (progress.started_at, "progress.startedAt")
        )
        if dated is not None and dated.timestamp() > trusted_until:
            raise InvalidRequestError(
                f"{field} is more than {self.max_clock_skew_s:g} seconds ahead of this service's clock",
                code="SYNCED_AT_IN_FUTURE",
                details={"maxClockSkewSeconds": self.max_clock_skew_s},
            )
        problem = await in_thread(self.store.write_problem)
        if problem is not None:
            raise problem
        if progress is not None:
            return await self._progress(source_identifier, progress, trusted_until)
        status = report.status
        if status is None:
            raise InvalidRequestError("a sync report carries an outcome or progress", code="VALIDATION_ERROR")
        if status.quality is None and status.commit is not None:
            current = await store_call(self.store.get_sync_status, source_identifier)
            if current is not None and current.quality is not None and current.commit == status.commit:
                status = replace(status, quality=current.quality)
        stored = await store_call(self.store.put_sync_status, status, trusted_until)
        self.catalog.wrote(source_identifier)
        if stored:
            if self.metrics is not None:
                self._gauges(source_identifier, status.quality)
            return status, True
        current = await store_call(self.store.get_sync_status, source_identifier)
        return (current or status), False

    def _gauges(self, source_identifier: str, quality: JudgedQuality | None) -> None:
        assert self.metrics is not None
        measured = quality is not None and quality.error is None
        if quality is None or not measured:
            self.metrics.record_quality(
                source_identifier, dict.fromkeys(QUALITY_FIGURES), dict.fromkeys(("asked", "failed"))
            )
            return
        figures = {"hit_at_1": quality.hit_at_1, "hit_at_5": quality.hit_at_5, "facts": quality.facts_share}
        self.metrics.record_quality(source_identifier, figures, {"asked": quality.questions, "failed": quality.failed})

    async def _progress(
        self, source_identifier: str, report: ProgressReport, trusted_until: float
    ) -> tuple[SyncStatus, bool]:
        progress = SyncProgress(
            stage=report.stage,
            done=report.done,
            total=report.total,
            started_at=rfc3339(report.started_at),
            reported_at=rfc3339(datetime.now(UTC)),
        )
        current = await store_call(self.store.get_sync_status, source_identifier)
        if current is not None and rfc3339_seconds(current.synced_at) > report.started_at.timestamp():
            return current, False  # what is stored came after this sync started: a late report
        if current is None or current.phase is None:
            # No outcome yet (a first sync): the record is dated by this sync's start.
            status = _progress_only(source_identifier, progress)
        else:
            # Dated as the outcome it keeps: an outcome stored meanwhile is newer, and the
            # conditional write leaves that one in place.
            status = replace(current, progress=progress)
        stored = await store_call(self.store.put_sync_status, status, trusted_until)
        self.catalog.wrote(source_identifier)
        if stored:
            return status, True
        return (await store_call(self.store.get_sync_status, source_identifier) or status), False


def _progress_only(source_identifier: str, progress: SyncProgress) -> SyncStatus:
    return SyncStatus(
        source_identifier=source_identifier, commit=None, phase=None, documents=0, failed=0, skipped=0,
        failed_files=[], skipped_files=[], synced_at=progress.started_at, next_sync_at=None, message=None,
        progress=progress,
    )  # fmt: skip
