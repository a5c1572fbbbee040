"""Sync status: what a source's syncer (the operator, knowledge-sync) reports after each sync."""

from __future__ import annotations

import time

from kbsearch.aio.runtime import in_thread, store_call
from kbsearch.commands import SyncReport
from kbsearch.errors import InvalidRequestError
from kbsearch.models import SyncStatus
from kbsearch.services.access.scope import Caller, SourceCatalog, require_writer
from kbsearch.store.base import VectorStore

DEFAULT_SKEW_S = 300.0


class SyncStatusService:
    """Stores one status per source in the collection, beside its documents (see store/base.py)."""

    def __init__(self, *, store: VectorStore, catalog: SourceCatalog, max_clock_skew_s: float = DEFAULT_SKEW_S) -> None:
        self.store = store
        self.catalog = catalog
        self.max_clock_skew_s = max_clock_skew_s

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
        if report.synced_at.timestamp() > trusted_until:
            raise InvalidRequestError(
                f"syncedAt is more than {self.max_clock_skew_s:g} seconds ahead of this service's clock",
                code="SYNCED_AT_IN_FUTURE",
                details={"maxClockSkewSeconds": self.max_clock_skew_s},
            )
        problem = await in_thread(self.store.write_problem)
        if problem is not None:
            raise problem
        status = report.status
        stored = await store_call(self.store.put_sync_status, status, trusted_until)
        self.catalog.wrote(source_identifier)
        if stored:
            return status, True
        current = await store_call(self.store.get_sync_status, source_identifier)
        return (current or status), False
