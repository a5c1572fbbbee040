"""What the clients of remote APIs share when they retry: a failure worth another try, and the wait asked for.

The OpenAI embedder and the chat client each own their vendor API and retry with tenacity on their
own; this module imports neither `openai` nor `tenacity`, so both owners can use it and stay apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

F = TypeVar("F", bound=Exception)


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
