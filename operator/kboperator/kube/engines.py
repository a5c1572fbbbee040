"""A bounded cache of sync engines (each owning one HTTP client), leased while in use.

One engine per (search service URL, whose token): the operator's, none, or a Secret's. When that
Secret's token changes (a rotation) the engine is replaced; when the cache is full the least
recently used one is dropped. A dropped engine's HTTP client is closed as soon as no sync or
cleanup holds it, so a rotation never interrupts a request in flight and clients never pile up.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from kboperator.sync.engine import SyncEngine


@dataclass
class _Entry:
    engine: SyncEngine
    digest: str
    users: int = 0
    dropped: bool = False


class EngineCache:
    """Engines by (url, identity); `factory(url, token)` makes one."""

    def __init__(self, factory: Callable[[str, str | None], SyncEngine], max_size: int) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self._factory = factory
        self._max_size = max_size
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @asynccontextmanager
    async def lease(self, url: str, identity: str, token: str | None) -> AsyncIterator[SyncEngine]:
        """The engine for `url` with `token`, held until the block ends."""
        key = (url, identity)
        # A digest, so that tokens never sit in plain sight in the cache.
        digest = hashlib.sha256((token or "").encode()).hexdigest()
        # Bookkeeping first, without awaiting, so that concurrent leases see a consistent cache.
        idle: list[SyncEngine] = []
        entry = self._entries.get(key)
        if entry is not None and entry.digest != digest:
            idle += self._drop(key)  # the token changed: this client must not be used again
            entry = None
        if entry is None:
            entry = self._entries[key] = _Entry(self._factory(url, token), digest)
            while len(self._entries) > self._max_size:
                idle += self._drop(next(iter(self._entries)))
        self._entries.move_to_end(key)
        entry.users += 1
        for engine in idle:
            await engine.client.aclose()
        try:
            yield entry.engine
        finally:
            entry.users -= 1
            if entry.dropped and entry.users == 0:
                await entry.engine.client.aclose()

    async def close(self) -> None:
        """Close every client (at shutdown: nothing is in use any more)."""
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            entry.dropped = True
            await entry.engine.client.aclose()

    def _drop(self, key: tuple[str, str]) -> list[SyncEngine]:
        """Forget an engine; returns it when nobody holds it, to be closed now (else at its release)."""
        entry = self._entries.pop(key)
        entry.dropped = True
        return [entry.engine] if entry.users == 0 else []
