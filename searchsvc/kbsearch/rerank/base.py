"""What every reranker answers: one score per passage, higher is more relevant to the query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["RerankError", "Reranker"]


class RerankError(Exception):
    """The reranker failed or answered something unusable; the first-stage order is served instead."""


class Reranker(Protocol):
    name: str  # the backend, as the metrics label it

    async def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, in the passages' order (-inf: left out, ranks last). Raises RerankError."""
        ...

    async def close(self) -> None: ...
