"""Shared plumbing for services: run blocking vendor calls off the event loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread

T = TypeVar("T")


async def in_thread(func: Callable[..., T], *args: object) -> T:
    """Store, embedder and chunker calls block; keep the event loop free while they run."""
    return await anyio.to_thread.run_sync(func, *args)
