"""What the clients of remote APIs share when they retry: which failures are worth another try, and how long to wait.

The OpenAI embedder and the chat client each own their vendor API and retry with tenacity on their
own; this module imports neither `openai` nor `tenacity`, so both owners can use it and stay apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

F = TypeVar("F", bound=Exception)

_RETRYABLE_STATUS = frozenset({408, 409, 429})


def retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth another try: 408, 409, 429 or any 5xx."""
    return status in _RETRYABLE_STATUS or status >= 500


class Transient(Exception, Generic[F]):
    """A failure worth another try (408, 409, 429, 5xx, no connection), with the wait the server asked for."""

    def __init__(self, failure: F, retry_after: float | None) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.retry_after = retry_after


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, or Retry-After in seconds), if any."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue  # an HTTP date: fall back to our own backoff
    return None


def backoff(attempt: int, *, base: float, cap: float, jitter: float, asked: float | None) -> float:
    """The wait before retry `attempt` (0 first): `min(cap, base * 2**attempt)` times a factor in [0.5, 1)
    from `jitter` in [0, 1), or the server's `asked` wait when longer; never more than `cap`."""
    delay: float = min(cap, base * 2**attempt) * (0.5 + jitter / 2)
    if asked is not None:
        delay = max(delay, asked)
    return min(delay, cap)
