"""The request bodies' budget: bytes being read and handled at once, per caller and in all.

One body's size is bounded (SEARCHSVC_MAX_BODY_BYTES); how many are held at once is bounded here.
A request reserves its body's bytes once its caller is known and before its first byte is read
(the declared Content-Length, or the largest body for a chunked one), and gives them back when
its response is done, cancelled or failed. A reservation that does not fit is refused at once,
never queued: 429 when the caller's own share is spent (another caller is not slowed), 503 when
the service's total is (every caller is then refused alike until bodies finish).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kbsearch.errors import BodyBudgetExceededError, RequestTooLargeError, ServiceBusyError

__all__ = ["BodyBudget"]

RETRY_AFTER_S = 1  # a body in flight is read and answered within seconds


class BodyBudget:
    """At most `total` bytes reserved at once, and at most `per_caller` of them by one key."""

    def __init__(self, total: int, per_caller: int) -> None:
        if per_caller < 1 or total < per_caller:
            raise ValueError("per_caller must be at least 1 and total at least per_caller")
        self.total = total
        self.per_caller = per_caller
        self._in_flight = 0
        self._by_key: dict[str, int] = {}

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def held_by(self, key: str) -> int:
        return self._by_key.get(key, 0)

    def reserve(self, key: str, size: int) -> None:
        """Take `size` bytes for `key`, or raise (429 for the caller's share, 503 for the total)."""
        if size > self.per_caller:  # could never fit: a retry would not help
            raise RequestTooLargeError(
                f"request body is {size} bytes; one caller may have at most {self.per_caller} in flight",
                details={"limit": self.per_caller},
            )
        held = self._by_key.get(key, 0)
        if held + size > self.per_caller:
            raise BodyBudgetExceededError(
                f"this caller already has {held} bytes of request bodies in flight; at most {self.per_caller} "
                "are allowed at once: retry after the others are answered",
                details={"inFlightBytes": held, "limitBytes": self.per_caller, "retryAfterSeconds": RETRY_AFTER_S},
            )
        if self._in_flight + size > self.total:
            raise ServiceBusyError(
                # Not how much is in flight: that would tell one tenant about the others' load.
                f"the service has its most request body bytes in flight ({self.total} at once): retry shortly",
                details={"limitBytes": self.total, "retryAfterSeconds": RETRY_AFTER_S},
            )
        self._by_key[key] = held + size
        self._in_flight += size

    def release(self, key: str, size: int) -> None:
        left = self._by_key.get(key, 0) - size
        if left < 0 or self._in_flight < size:
            raise RuntimeError("released more body bytes than were reserved")
        if left:
            self._by_key[key] = left
        else:
            del self._by_key[key]  # a caller gone leaves no entry: the table is as large as the callers in flight
        self._in_flight -= size

    @contextmanager
    def held(self, key: str, size: int) -> Iterator[None]:
        """`size` bytes reserved for the block, released however it ends (a cancelled task included)."""
        self.reserve(key, size)
        try:
            yield
        finally:
            self.release(key, size)
