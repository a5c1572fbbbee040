"""A bounded pool of threads for slow per-document work, taken in turns by writer.

Conversions and chunking can each hold a thread for a minute (waiting for the child process that
does the work, so without the GIL: convert/worker.py, services/documents/chunk_processes.py). In
the shared pool `in_thread` uses (anyio's 40 threads), fifty such documents leave stores, embeds
and `/readyz` waiting behind them.
Here they wait for a turn instead, off any thread: at most `slots` run at once, a writer runs at
most `share` of them, and a freed slot goes to the writer with the fewest running (FairTurns), so
one team's slow documents queue behind each other and never in front of another team's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from kbsearch.aio.fairness import FairTurns

__all__ = ["WorkPool"]

T = TypeVar("T")


class WorkPool:
    def __init__(self, slots: int, share: int, per_writer: int) -> None:
        self.turns = FairTurns(slots, per_writer, share=share, what="documents", code="TOO_MANY_WRITES")
        # Its own limiter: these threads never count against the default pool's 40.
        self._limiter = anyio.CapacityLimiter(slots)

    async def run(self, writer: str, func: Callable[..., T], *args: object) -> T:
        """`func(*args)` in a thread of this pool, once `writer`'s turn comes."""
        async with self.turns.turn(writer):
            return await anyio.to_thread.run_sync(func, *args, limiter=self._limiter)
