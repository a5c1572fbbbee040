"""The query log: every search, recorded off the request's path into a shared collection.

`record()` never waits and never raises: it puts the entry on a bounded queue, or drops it and
counts the drop (searchsvc_query_log_dropped_total{reason="queue_full"}) when the queue is full.
A background task drains the queue in batches into the store. Writes are grouped: a batch is
written at most `batch_window_s` after its first entry, so a busy service touches the store about
once a second. A failed write drops its batch, counts it (reason "store_error", or
"store_unwritable" when the store refuses writes, e.g. a full disk) and logs once per streak of
failures. Another task enforces retention by age and by count every `prune_interval_s`.
Switched off, nothing is recorded and nothing is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from kbsearch.aio.runtime import in_thread
from kbsearch.metrics import Metrics
from kbsearch.models import QueryLogEntry
from kbsearch.settings import QueryLogSettings
from kbsearch.store.base import VectorStore
from kbsearch.store.querylog import QueryLogStore

log = logging.getLogger(__name__)

BATCH_SIZE = 500  # entries per store write
DAY_S = 86_400.0


class QueryLog:
    """Start it in the app's lifespan (`start`/`stop`); `store` None means the log is switched off."""

    def __init__(
        self,
        store: QueryLogStore | None,
        settings: QueryLogSettings,
        *,
        metrics: Metrics,
        guard: VectorStore | None = None,
        batch_window_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self._guard = guard  # the main store: when it refuses writes (full disk), the log writes nothing either
        self.retention_days = settings.query_log_retention_days
        self.max_entries = settings.query_log_max_entries
        self.prune_interval_s = settings.query_log_prune_interval_s
        self.batch_window_s = batch_window_s
        self._hurry = asyncio.Event()  # set by flush(): write now
        self.clock = clock
        self._queue: asyncio.Queue[QueryLogEntry] = asyncio.Queue(maxsize=settings.query_log_queue_size)
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False

    @property
    def enabled(self) -> bool:
        return self.store is not None

    async def start(self) -> None:
        if self.store is None:
            return
        await in_thread(self.store.open)
        self._tasks = [
            asyncio.create_task(self._drain(), name="querylog-drain"),
            asyncio.create_task(self._prune_periodically(), name="querylog-prune"),
        ]

    async def stop(self) -> None:
        """Write what is queued (best effort), stop the tasks, close the store."""
        if self.store is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), timeout=5.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await in_thread(self.store.close)

    def record(self, entry: QueryLogEntry) -> None:
        """Queue one entry; never blocks, never raises."""
        if self.store is None:
            return
        try:
            self._queue.put_nowait(entry)
        except asyncio.QueueFull:
            self.metrics.query_log_dropped.labels("queue_full").inc()

    async def flush(self) -> None:
        """Write what is queued now, without waiting out the batch window, and wait until it is written (or dropped)."""
        self._hurry.set()
        try:
            await self._queue.join()
        finally:
            self._hurry.clear()

    async def prune(self) -> int:
        """One retention pass: entries past the age limit, then the oldest beyond the count limit."""
        if self.store is None:
            return 0
        before = self.clock() - self.retention_days * DAY_S
        pruned = await in_thread(lambda: self.store.prune(before=before, keep=self.max_entries) if self.store else 0)
        self.metrics.query_log_pruned.inc(pruned)
        return pruned

    async def _drain(self) -> None:
        while True:
            batch = [await self._queue.get()]
            # Group commit: gather what else arrives within the window, so that a busy service
            # writes (and flushes) the log about once per window, not once per search.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), self.batch_window_s)
            while len(batch) < BATCH_SIZE and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, batch: list[QueryLogEntry]) -> None:
        assert self.store is not None
        store = self.store
        try:
            if self._guard is not None and await in_thread(self._guard.write_problem) is not None:
                self.metrics.query_log_dropped.labels("store_unwritable").inc(len(batch))
                return
            await in_thread(store.append, batch)
        except Exception as exc:  # the log must never take a search down with it
            self.metrics.query_log_dropped.labels("store_error").inc(len(batch))
            if not self._failing:
                log.warning("the query log cannot be written; entries are dropped until it can", exc_info=exc)
            self._failing = True
            return
        if self._failing:
            log.info("the query log is written again")
        self._failing = False
        self.metrics.query_log_written.inc(len(batch))

    async def _prune_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.prune_interval_s)
            try:
                await self.prune()
            except Exception:  # retried next round
                log.warning("query log retention failed; retrying in %.0fs", self.prune_interval_s, exc_info=True)
