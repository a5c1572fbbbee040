"""Chunking in child processes, so one team's pathological document never holds the service's GIL.

A chunker thread in the service process took the GIL for as long as it ran: 250,000 list items
(29 s of chunking) tripled another team's keyword search time. Here each chunking runs in one of
`processes` long-lived children forked from the conversion worker's forkserver (the chunker's
modules are preloaded there, convert/worker.py), at a lower CPU priority (nice +10) than the
service, so the service's own requests come first on a busy machine. The child keeps the
CPU-time deadline (aio/deadline.py) on its own thread; the service thread that waits for it
holds no GIL, and only unpickles the result (a few ms for a 1 MB document).

A child that dies (the kernel's OOM killer, a crash in native code) breaks the pool: it is
replaced, and the write is answered 503 CHUNKER_CRASHED (a retry may succeed).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from kbsearch.aio.deadline import DeadlineExceeded, call_with_deadline
from kbsearch.chunker import MarkdownChunker
from kbsearch.convert.worker import child_context
from kbsearch.errors import UnavailableError
from kbsearch.models import ParsedDocument

__all__ = ["CHILD_NICENESS", "ChunkProcesses"]

log = logging.getLogger(__name__)

# Added to the children's niceness: under CPU contention the service's searches run first. The
# deadline counts CPU time, so a niced child's answer does not change.
CHILD_NICENESS = 10

_Settings = tuple[int, int, int]
_chunkers: dict[_Settings, MarkdownChunker] = {}  # per child: its chunker, built on its first document


def _start_child() -> None:
    os.nice(CHILD_NICENESS)


def _chunk_in_child(settings: _Settings, seconds: float, text: str, name: str) -> ParsedDocument | None:
    """The chunks, or None when the CPU budget ran out (DeadlineExceeded is kept in the child)."""
    chunker = _chunkers.get(settings)
    if chunker is None:
        chunker = _chunkers[settings] = MarkdownChunker(*settings)
    try:
        return call_with_deadline(seconds, lambda: chunker.chunk(text, name=name))
    except DeadlineExceeded:
        return None


class ChunkProcesses:
    """Chunks with `chunker`'s settings in `processes` children; blocking calls, made from a pool thread."""

    def __init__(self, chunker: MarkdownChunker, processes: int) -> None:
        self.settings: _Settings = (chunker.min_chars, chunker.max_chars, chunker.overlap)
        self.processes = processes
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.processes, mp_context=child_context(), initializer=_start_child)

    def chunk(self, seconds: float, text: str, name: str) -> ParsedDocument | None:
        """The chunks of `text`, or None past `seconds` of the child's CPU time."""
        pool = self._pool
        try:
            return pool.submit(_chunk_in_child, self.settings, seconds, text, name).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:  # the first to see it replaces it
                    log.warning("a chunking process died; its pool is replaced")
                    self._pool = self._new_pool()
            raise UnavailableError("the chunking process died; retry the write", code="CHUNKER_CRASHED") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
