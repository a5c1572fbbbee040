"""Fair turns for searches: one caller's burst cannot starve another caller's search.

Searches are CPU work (embedding, then the engine) on few cores and a shared thread pool. Without
a bound, 200 searches from one team queue ahead of another team's one. Here at most `slots`
searches run at a time; a freed slot goes to the waiting caller with the fewest searches running,
and among equals to the one whose last search started longest ago (round robin; first come first
served within one caller), so another caller's search waits for one running search to end, not
for the whole burst. A caller with `per_caller` searches already running or waiting gets 429
with Retry-After at once: a burst is bounded in memory as well as in time.

Every face reaches the store through SearchService, so REST, MCP, the console and ask share this.
Conversions and chunking take turns the same way (aio/pool.py), keyed by writer, with `share`
bounding the turns one writer holds at once so another writer always finds a slot free.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kbsearch.errors import OverloadedError

__all__ = ["FairTurns"]


class FairTurns:
    """At most `slots` holders at once, handed out round robin by caller key; `per_caller` bounds each key.

    `share` bounds the turns one key runs at once (default: every slot); `what` and `code` name the
    work in the 429 a key past `per_caller` gets.
    """

    def __init__(
        self,
        slots: int,
        per_caller: int,
        *,
        share: int | None = None,
        what: str = "searches",
        code: str = "TOO_MANY_SEARCHES",
    ) -> None:
        if slots < 1 or per_caller < 1 or (share is not None and share < 1):
            raise ValueError("slots, per_caller and share must be at least 1")
        self.slots = slots
        self.per_caller = per_caller
        self.share = min(share, slots) if share is not None else slots
        self._what, self._code = what, code
        self._running = 0
        self._runs: dict[str, int] = {}  # running, per caller
        self._started: dict[str, int] = {}  # when each caller's latest turn began, in turns handed out
        self._turns_given = 0
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._held: dict[str, int] = {}  # running and waiting, per caller

    @asynccontextmanager
    async def turn(self, caller: str) -> AsyncIterator[None]:
        held = self._held.get(caller, 0)
        if held >= self.per_caller:
            raise OverloadedError(
                f"{held} {self._what} of this caller are already running or waiting; retry later",
                code=self._code,
                details={"retryAfterSeconds": 1, "limit": self.per_caller},
            )
        self._held[caller] = held + 1
        try:
            await self._acquire(caller)
            try:
                yield
            finally:
                self._release(caller)
        finally:
            self._held[caller] -= 1
            if not self._held[caller]:
                del self._held[caller]
                self._started.pop(caller, None)

    async def _acquire(self, caller: str) -> None:
        granted = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(caller, deque()).append(granted)
        self._dispatch()
        if granted.done():
            return
        try:
            await granted  # _release started our turn before it resolved this
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(caller)  # the turn came just as the caller went away: pass it on
            else:
                queue = self._waiting.get(caller)
                if queue is not None and granted in queue:
                    queue.remove(granted)
                    if not queue:
                        del self._waiting[caller]
            raise

    def _start(self, caller: str) -> None:
        self._running += 1
        self._runs[caller] = self._runs.get(caller, 0) + 1
        self._turns_given += 1
        self._started[caller] = self._turns_given

    def _release(self, caller: str) -> None:
        self._running -= 1
        self._runs[caller] -= 1
        if not self._runs[caller]:
            del self._runs[caller]
        self._dispatch()

    def _dispatch(self) -> None:
        """Free slots to waiting callers below their share: fewest running first, then longest unserved."""
        while self._running < self.slots:
            eligible = [w for w in self._waiting if self._runs.get(w, 0) < self.share]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: (self._runs.get(w, 0), self._started.get(w, 0)))
            queue = self._waiting[chosen]
            granted = queue.popleft()
            if not queue:
                del self._waiting[chosen]
            if not granted.done():
                self._start(chosen)
                granted.set_result(None)
