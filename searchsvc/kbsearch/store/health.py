"""Whether the store may take writes (embedded: free disk, its directory, its last flush) and
whether it can serve at all (a server: see `server_problem`).

Edge keeps its segments and write-ahead log in memory-mapped files. On a full volume, the
first write into a page that has no disk block yet is a SIGBUS, which kills the process
with no exception to catch. So writes stop *before* the volume is full: below
`min_free_bytes` (SEARCHSVC_MIN_FREE_DISK_MB) a new write is refused with 503, and one
already under way may go on only down to half of it, which leaves room for its cleanup and
for the flush of what it wrote.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbsearch.errors import StoreUnavailableError
from kbsearch.store.diskspace import MIB, free_bytes

log = logging.getLogger(__name__)

# Stable causes, in `details.cause` of the 503 body and in the log.
DISK_FULL = "DISK_FULL"
DATA_DIR_GONE = "DATA_DIR_GONE"
FLUSH_FAILING = "FLUSH_FAILING"
SERVER_UNAVAILABLE = "SERVER_UNAVAILABLE"


@dataclass(frozen=True)
class StoreProblem:
    cause: str
    message: str  # answered over HTTP: no paths, no engine text
    retry_after_s: int
    details: dict[str, Any] = field(default_factory=dict)
    log_detail: str = ""  # for the log only

    def error(self) -> StoreUnavailableError:
        details = {"cause": self.cause, "retryAfterSeconds": self.retry_after_s, **self.details}
        return StoreUnavailableError(self.message, details=details)


def server_problem(log_detail: str) -> StoreProblem:
    """The store server cannot answer (unreachable, hanging, or a shard without a live copy)."""
    return StoreProblem(
        SERVER_UNAVAILABLE,
        "the Qdrant server cannot serve the collection (unreachable, too slow, or a shard has no live "
        "copy); the service is not ready until it can",
        retry_after_s=5,
        log_detail=log_detail,
    )


class StoreWatch:
    """Diagnoses the store's directory and volume, and logs each problem once per streak."""

    def __init__(self, path: Path, min_free_bytes: int) -> None:
        self.path = path
        self.min_free_bytes = min_free_bytes
        self._identity: tuple[int, int] | None = None  # (device, inode) of the directory opened
        self._flush_error: str | None = None
        self._logged: str | None = None  # the cause last logged; None: healthy
        self._log_lock = threading.Lock()

    def start(self) -> None:
        """Remember which directory the store opened, to notice it being deleted or replaced."""
        self._identity = _identity(self.path)

    def moved_to(self, path: Path) -> None:
        """The store now lives at `path` (a new generation, store/edge/layout.py): watch that one."""
        self.path = path
        if self._identity is not None:
            self._identity = _identity(path)

    def flush_failed(self, exc: BaseException) -> None:
        self._flush_error = f"{type(exc).__name__}: {exc}"

    def flush_succeeded(self) -> None:
        self._flush_error = None

    def problem(self, *, under_way: bool = False) -> StoreProblem | None:
        """Why writes must stop now, or None; `under_way` applies the lower floor of a started write."""
        if self._identity is None:
            return None  # not open
        try:
            identity = _identity(self.path)
            free = free_bytes(self.path)
        except OSError as exc:  # deleted between the two calls, or the volume itself fails
            identity, free, detail = None, 0, f"{self.path}: {exc}"
        else:
            detail = f"{self.path} is gone or is another directory now"
        if identity != self._identity:
            return StoreProblem(
                DATA_DIR_GONE,
                "the embedded store's data directory was deleted, replaced or cannot be read while the "
                "service ran; writes cannot be persisted: restart the service",
                retry_after_s=30,
                log_detail=detail,
            )
        floor = self.min_free_bytes // 2 if under_way else self.min_free_bytes
        if free < floor:
            return StoreProblem(
                DISK_FULL,
                f"only {free // MIB} MiB free on the data volume; writes need "
                f"{self.min_free_bytes // MIB} MiB (SEARCHSVC_MIN_FREE_DISK_MB): free space or grow the volume",
                retry_after_s=30,
                details={"freeBytes": free, "minFreeBytes": self.min_free_bytes},
                log_detail=str(self.path),
            )
        return self.flush_problem() if self._flush_error is not None else None

    def flush_problem(self) -> StoreProblem:
        return StoreProblem(
            FLUSH_FAILING,
            "the embedded store cannot flush its writes to disk; writes are refused until a flush succeeds",
            retry_after_s=5,
            log_detail=self._flush_error or "",
        )

    def check(self) -> StoreProblem | None:
        """`problem()` for a new write, logged when its cause starts and when writes work again."""
        problem = self.problem()
        self._log_change(problem)
        return problem

    def _log_change(self, problem: StoreProblem | None) -> None:
        cause = problem.cause if problem is not None else None
        with self._log_lock:
            if cause == self._logged:
                return
            previous, self._logged = self._logged, cause
        if problem is not None:
            log.error(
                "the embedded store refuses writes: %s",
                problem.message,
                extra={"cause": problem.cause, "detail": problem.log_detail, **problem.details},
            )
        else:
            log.info("the embedded store takes writes again", extra={"previousCause": previous})


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino
