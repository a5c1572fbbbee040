"""Builds the embedded store's HNSW index in a child process, off the request path.

Edge's optimizer holds Python's interpreter lock for its whole run (14 s for 40,000 vectors
here, minutes at 200,000), so in the service's process it would stall every request. Instead,
when enough vectors are unindexed: the store copies its shard (writes wait for the copy, reads
go on) and logs every write from then on; a child process (store/edge/optimize.py) optimizes
the copy; the store loads it, replays the logged writes and swaps it in (EdgeStore.adopt_index).
A failed or killed child costs only its copy: the live shard was never touched.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from kbsearch.store.diskspace import free_bytes
from kbsearch.store.edge.layout import ShardLayout, remove
from kbsearch.store.edge.optimize import IndexOptions

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 3600.0
# A build's peak past this share of the memory limit is warned of.
NEAR_LIMIT = 0.8
_SIZING = (
    "a build holds the collection about twice over (docs/operations/memory.md); "
    "raise the memory limit or move past about 100,000 chunks to a Qdrant server (store.mode: server)"
)


class BuildOutcome(Enum):
    BUILT = "built"  # the optimized copy is live
    UNCHANGED = "unchanged"  # the optimizer found nothing to do; the copy was dropped
    FAILED = "failed"  # the copy or the child failed; the live shard is as it was
    ABANDONED = "abandoned"  # the store closed, or the write log overflowed, during the build


class IndexTarget(Protocol):
    """What the indexer needs from the store (EdgeStore)."""

    dimensions: int

    def unindexed_vectors(self) -> int: ...

    def copy_for_index(self, destination: Path) -> bool: ...

    def adopt_index(self, built: Path) -> bool: ...

    def drop_write_log(self) -> None: ...


@dataclass
class BuildReport:
    outcome: BuildOutcome
    detail: str = ""
    peak_bytes: int = 0  # a built index: the service's memory now and the child's peak, together


class BackgroundIndexer:
    """A daemon thread that checks every `interval_s` and builds when `options.threshold` is reached."""

    def __init__(
        self,
        target: IndexTarget,
        layout: ShardLayout,
        options: IndexOptions,
        *,
        interval_s: float = 10.0,
        min_free_bytes: int = 0,
        on_child: Callable[[str, int], None] | None = None,
    ) -> None:
        self.target = target
        self.layout = layout
        self.options = options
        self.interval_s = interval_s
        self.min_free_bytes = min_free_bytes
        # Called with (event, pid) for each progress line of the child: tests and benchmarks.
        self.on_child = on_child
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._build_lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._floor = 0  # after a build that changed nothing, wait for this many unindexed vectors
        self._retry_at = 0.0  # after a failure, no new build before this monotonic time
        self._backoff_s = interval_s

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self.options.threshold <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="edge-index", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Kill a running child and wait for the thread; the store is closed after this."""
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._build_lock:  # a build in another thread (build_now) ends before the store closes
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if time.monotonic() < self._retry_at:
                    continue
                unindexed = self.target.unindexed_vectors()
                if unindexed >= max(self.options.threshold, self._floor):
                    self._after(self.build_now(), unindexed)
            except Exception:  # the thread must outlive a failed check; the next tick tries again
                log.exception("the background index check failed")

    def _after(self, report: BuildReport, unindexed: int) -> None:
        if report.outcome is BuildOutcome.UNCHANGED:
            self._floor = unindexed + self.options.threshold
        if report.outcome is BuildOutcome.FAILED:
            self._retry_at = time.monotonic() + self._backoff_s
            self._backoff_s = min(self._backoff_s * 2, _MAX_BACKOFF_S)
        else:
            self._backoff_s = self.interval_s

    def build_now(self) -> BuildReport:
        """One build, start to end, in the calling thread; the loop and tests call it."""
        with self._build_lock:
            destination = self.layout.next_generation()
            try:
                report = self._build(destination)
            except Exception as exc:
                log.exception("the background index build failed")
                report = BuildReport(BuildOutcome.FAILED, f"{type(exc).__name__}: {exc}")
            if report.outcome is not BuildOutcome.BUILT:
                self.target.drop_write_log()
                remove(destination)
            log_build(report, self.options.memory_limit_bytes)
            return report

    def _build(self, destination: Path) -> BuildReport:
        if self._stop.is_set():
            return BuildReport(BuildOutcome.ABANDONED, "the store is closing")
        if not self._room_for_copy():
            return BuildReport(BuildOutcome.FAILED, "too little free disk for a copy of the shard")
        if not self.target.copy_for_index(destination):
            return BuildReport(BuildOutcome.ABANDONED, "the store is closed")
        result = self._optimize(destination)
        if isinstance(result, BuildReport):
            return result
        if not result.get("optimized"):
            return BuildReport(BuildOutcome.UNCHANGED, "nothing to optimize")
        if self._stop.is_set() or not self.target.adopt_index(destination):
            return BuildReport(BuildOutcome.ABANDONED, "the store closed or its write log overflowed")
        child_peak = result.get("peakRssBytes")
        peak = own_rss_bytes() + (child_peak if isinstance(child_peak, int) else 0)
        return BuildReport(BuildOutcome.BUILT, f"optimized in {result.get('seconds')} s", peak_bytes=peak)

    def _optimize(self, path: Path) -> dict[str, object] | BuildReport:
        command = [
            sys.executable,
            "-m",
            "kbsearch.store.edge.optimize",
            str(path),
            "--dimensions",
            str(self.target.dimensions),
            *self.options.child_args(),
        ]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._child = child
        if self._stop.is_set():  # stop() ran before the child was known to it
            child.kill()
        try:
            assert child.stdout is not None
            last = ""
            for line in child.stdout:
                last = line.strip()
                if self.on_child is not None and last in ("loaded", "optimizing"):
                    self.on_child(last, child.pid)
            stderr = child.stderr.read() if child.stderr is not None else ""
            code = child.wait()
        finally:
            self._child = None
            for stream in (child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
        if self._stop.is_set():
            return BuildReport(BuildOutcome.ABANDONED, "the store is closing")
        if code != 0:
            lines = stderr.strip().splitlines()
            why = f"killed by signal {-code}" if code < 0 else (lines[-1] if lines else f"exit status {code}")
            if code == -signal.SIGKILL:  # the build asks to be the first killed when the pod runs out
                why += f" (most likely out of memory: {_SIZING})"
            return BuildReport(BuildOutcome.FAILED, f"the optimizer process failed: {why}")
        try:
            result: dict[str, object] = json.loads(last)
        except json.JSONDecodeError:
            return BuildReport(BuildOutcome.FAILED, f"the optimizer process said {last!r}")
        return result

    def _room_for_copy(self) -> bool:
        live = self.layout.live()
        size = sum(p.stat().st_size for p in live.rglob("*") if p.is_file())
        # The copy, then the index (about as large again), and the reserve writes keep.
        return free_bytes(self.layout.data_dir) >= 2 * size + self.min_free_bytes


def own_rss_bytes() -> int:
    """This process's resident memory now (0 where /proc is missing)."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def log_build(report: BuildReport, memory_limit_bytes: int | None = None) -> None:
    if report.outcome is BuildOutcome.BUILT:
        log.info(
            "the embedded store's vector index was rebuilt",
            extra={"detail": report.detail, "peakMiB": report.peak_bytes >> 20},
        )
        # Builds recur as the collection grows, each larger: warn while this one still fitted.
        if memory_limit_bytes and report.peak_bytes > NEAR_LIMIT * memory_limit_bytes:
            log.warning(
                "the embedded store's last index build peaked at %d MiB of the %d MiB memory limit; "
                "the next, on a larger collection, may be killed: %s",
                report.peak_bytes >> 20,
                memory_limit_bytes >> 20,
                _SIZING,
            )
    elif report.outcome is BuildOutcome.FAILED:
        log.warning("a background index build failed; the store is unchanged", extra={"detail": report.detail})
    else:
        log.info("a background index build ended without a swap", extra={"outcome": report.outcome.value})
