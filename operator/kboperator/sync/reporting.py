"""A running sync's progress as slow listeners are told it: throttled snapshots, never one per document.

The engine's progress callback (sync.progress) fires once per document; a write to the Kubernetes
API or a report to the search service per document would cost as many requests as the sync
itself. `ThrottledProgress` is such a callback: it keeps the counts and sends a `Snapshot` to its
sinks when the sync moves to another stage (fetching, reading, syncing: three sends at most), then
every `interval_s` seconds or every `every` documents, whichever comes first, but never twice
within `min_gap_s` (a fast sync of 10,000 documents is not 100 writes in a few seconds). One send
runs at a time, in order; a send that falls due while one is in flight is folded into the next,
so a slow sink delays its own updates and never the sync. `close()` waits for the send in flight
and returns the final counts, which the caller writes with the sync's outcome (the final state is
always written, by whoever writes the outcome).

A sink must not hold the sync up for long and its failures are its own: one that raises is
logged (once per sync) and asked again at the next snapshot.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kboperator.schedule import format_time
from kboperator.searchclient import SearchClient
from kboperator.sync.progress import DocumentDone, Phase, Planned, Progress, SyncEvent

log = logging.getLogger(__name__)

Stage = Literal["fetching", "reading", "syncing"]
#: Defaults: a snapshot at most this often, or after this many documents, whichever first.
INTERVAL_S = 5.0
EVERY_DOCUMENTS = 100
MIN_GAP_S = 1.0


@dataclass(frozen=True)
class Snapshot:
    """Where a running sync is: its stage, the documents done of `total` (None before the plan)."""

    source_id: str
    stage: Stage
    done: int
    total: int | None
    started_at: datetime.datetime

    @property
    def summary(self) -> str:
        """A column's worth: `25/126`, or the stage before the work is known."""
        return f"{self.done}/{self.total}" if self.total is not None else self.stage

    @property
    def message(self) -> str:
        """A sentence: `syncing 25 of 126 documents`, `fetching the repository`, ..."""
        if self.total is None:
            return "fetching the repository" if self.stage == "fetching" else "reading the repository's files"
        return f"syncing {self.done} of {self.total} documents"

    def to_json(self) -> dict[str, Any]:
        """The `progress` of a report to the search service's sync-status endpoint."""
        body: dict[str, Any] = {"stage": self.stage, "done": self.done, "startedAt": format_time(self.started_at)}
        if self.total is not None:
            body["total"] = self.total
        return body


Sink = Callable[[Snapshot], Awaitable[None]]


class ThrottledProgress:
    """The engine's progress callback for one sync; sends throttled snapshots to `sinks`."""

    def __init__(
        self,
        source_id: str,
        sinks: Sequence[Sink],
        *,
        started_at: datetime.datetime,
        interval_s: float = INTERVAL_S,
        every: int = EVERY_DOCUMENTS,
        min_gap_s: float = MIN_GAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s < 0 or min_gap_s < 0 or every < 1:
            raise ValueError("interval_s and min_gap_s must be >= 0 and every >= 1")
        self.source_id = source_id
        self.sinks = list(sinks)
        self.started_at = started_at
        self.interval_s = interval_s
        self.every = every
        self.min_gap_s = min(min_gap_s, interval_s)
        self.clock = clock
        self.sends = 0  # snapshots sent, for tests and logs
        self._stage: Stage | None = None
        self._done = 0
        self._total: int | None = None
        self._sent: tuple[float, int, Stage | None] = (0.0, 0, None)  # when, done, stage of the last send
        self._pending = False
        self._task: asyncio.Task[None] | None = None
        self._failing: set[int] = set()  # sinks already logged as failing in this sync

    def snapshot(self) -> Snapshot | None:
        """The counts now; None before the sync's first event (a sync with nothing to do has none)."""
        if self._stage is None:
            return None
        return Snapshot(self.source_id, self._stage, self._done, self._total, self.started_at)

    def __call__(self, event: SyncEvent) -> None:
        if isinstance(event, Phase):
            self._stage = event.phase
        elif isinstance(event, Planned):
            self._stage, self._total, self._done = "syncing", event.total, 0
        elif isinstance(event, DocumentDone) and event.action != "read":
            self._done += 1  # files skipped while reading are not part of `total`
        if self._due():
            self._kick()

    def _due(self) -> bool:
        when, done, stage = self._sent
        if self._stage != stage:
            return True
        elapsed = self.clock() - when
        return elapsed >= self.interval_s or (self._done - done >= self.every and elapsed >= self.min_gap_s)

    def _kick(self) -> None:
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            self._pending = False
            snapshot = self.snapshot()
            if snapshot is None:
                return
            self._sent = (self.clock(), snapshot.done, snapshot.stage)
            self.sends += 1
            for index, sink in enumerate(self.sinks):
                try:
                    await sink(snapshot)
                except Exception as exc:  # noqa: BLE001 - a listener's failure never fails the sync
                    if index not in self._failing:
                        self._failing.add(index)
                        log.warning("source %s: progress not reported: %s", self.source_id, _one_line(exc))

    async def close(self) -> Snapshot | None:
        """Wait for the send in flight (no new one starts); the final counts, None if there were none."""
        self._pending = False
        task, self._task = self._task, None
        if task is not None:
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():  # we are being cancelled, not the send
                    raise
        return self.snapshot()


class ServiceProgress:
    """A sink: each snapshot to the search service, whose sources page shows it; quiet with an older one."""

    def __init__(self, client: SearchClient) -> None:
        self.client = client
        self.taken = True

    async def __call__(self, snapshot: Snapshot) -> None:
        if not self.taken:
            return
        self.taken = await self.client.report_progress(snapshot.source_id, snapshot.to_json())
        if not self.taken:
            log.info("the search service at %s takes no progress reports (an older version)", self.client.base_url)


def fan_out(*callbacks: Progress) -> Progress:
    """One progress callback that calls each of `callbacks` in turn."""

    def progress(event: SyncEvent) -> None:
        for callback in callbacks:
            callback(event)

    return progress


def _one_line(exc: Exception) -> str:
    """A failure as one log line: an API error's status and reason, not its headers and body (one line each)."""
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    if status is not None:
        return f"{type(exc).__name__} {status} {reason or ''}".strip()
    return " ".join(str(exc).split())[:300] or type(exc).__name__
