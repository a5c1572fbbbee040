"""Shared plumbing for services: run blocking vendor calls off the event loop, with honest errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import logging

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
