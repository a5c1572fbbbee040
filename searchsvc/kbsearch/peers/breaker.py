"""A circuit breaker per peer: stop asking a peer that keeps failing, try again after a cool-down.

A small state machine rather than a library: pybreaker's async support goes through Tornado and
aiobreaker is unmaintained; this one is synchronous (called from one event loop, no awaits inside,
so no lock is needed) and takes its clock as an argument, so its tests need no sleeping.

closed --N consecutive failures--> open --cool-down--> half-open (one probe at a time)
half-open --probe succeeds--> closed;  half-open --probe fails--> open (a new cool-down)
A probe never heard of again (its search cancelled before it started) stops blocking after one more cool-down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

BreakerState = Literal["closed", "open", "half-open"]
# The gauge's value of each state (searchsvc_peer_breaker_state).
STATE_VALUE: dict[BreakerState, int] = {"closed": 0, "half-open": 1, "open": 2}


class CircuitBreaker:
    def __init__(self, failures: int, reset_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1 or reset_s < 0:
            raise ValueError("a breaker needs failures >= 1 and reset_s >= 0")
        self.failures, self.reset_s, self._clock = failures, reset_s, clock
        self._failed = 0  # consecutive failures while closed
        self._opened_at: float | None = None
        self._probe_at: float | None = None  # when the probe in flight was let through

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._probe_at is not None or self._clock() - self._opened_at >= self.reset_s:
            return "half-open"
        return "open"

    def allow(self) -> bool:
        """Whether to ask the peer now; in half-open only the first caller gets through (the probe)."""
        state, now = self.state, self._clock()
        if state == "closed":
            return True
        if state == "half-open" and (self._probe_at is None or now - self._probe_at >= self.reset_s):
            self._probe_at = now
            return True
        return False

    def succeeded(self) -> None:
        self._failed, self._opened_at, self._probe_at = 0, None, None

    def failed(self) -> None:
        if self._opened_at is not None:  # the probe failed (or a request from before the opening)
            self._opened_at, self._probe_at = self._clock(), None
            return
        self._failed += 1
        if self._failed >= self.failures:
            self._opened_at = self._clock()

    def released(self) -> None:
        """A probe that ended with neither success nor failure (cancelled): let the next caller probe."""
        self._probe_at = None
