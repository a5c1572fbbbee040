"""Shared plumbing for services: run blocking vendor calls off the event loop, with honest errors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from kbsearch.errors import EmbedderUnavailableError, ServiceError, StoreUnavailableError

T = TypeVar("T")
log = logging.getLogger(__name__)


async def in_thread(func: Callable[..., T], *args: object) -> T:
    """Store, embedder and chunker calls block; keep the event loop free while they run."""
    return await anyio.to_thread.run_sync(func, *args)


async def _vendor_call(error: type[ServiceError], what: str, func: Callable[..., T], *args: object) -> T:
    try:
        return await in_thread(func, *args)
    except ServiceError:
        raise
    except Exception as exc:
        log.exception("%s call failed", what)
        raise error(f"the {what} failed: {type(exc).__name__}") from exc


async def store_call(func: Callable[..., T], *args: object) -> T:
    """A store call whose vendor failure becomes a transient 503, never a 500."""
    return await _vendor_call(StoreUnavailableError, "vector store", func, *args)


async def embed_call(func: Callable[..., T], *args: object) -> T:
    """An embedder call whose failure becomes a transient 503, never a 500."""
    return await _vendor_call(EmbedderUnavailableError, "embedder", func, *args)


async def run_to_completion(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end even if the caller is cancelled (a client that disconnected).

    A store-write sequence must finish or clean up; an abandoned one would leave a half-written
    document while the caller's locks are released. The caller waits, holding its locks, and
    sees its cancellation only once the work is done.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    # The shielded scope stops anyio (Starlette's task groups) from re-cancelling us in a
    # loop; the except catches a plain asyncio cancel.
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                cancelled = True
    if cancelled:
        if not task.cancelled() and task.exception() is not None:
            log.warning("a write failed after its caller was cancelled", exc_info=task.exception())
        raise asyncio.CancelledError
    return task.result()
