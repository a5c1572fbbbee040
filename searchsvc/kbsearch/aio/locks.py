"""Per-key asyncio locks that free themselves when nobody holds or waits for them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedLocks:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class _Gate:
    __slots__ = ("condition", "readers", "users", "writer", "writers_waiting")

    def __init__(self) -> None:
        self.condition = asyncio.Condition()
        self.users = 0  # tasks holding or waiting: the gate lives while there are any
        self.readers = 0
        self.writer = False
        self.writers_waiting = 0


class SharedExclusiveLocks:
    """Per-key readers-writer locks: many shared holders, or one exclusive holder.

    A waiting exclusive holder stops new shared ones, so a bulk delete is never starved by a
    steady stream of writes to the same source.
    """

    def __init__(self) -> None:
        self._gates: dict[str, _Gate] = {}

    @asynccontextmanager
    async def _entered(self, key: str) -> AsyncIterator[_Gate]:
        gate = self._gates.setdefault(key, _Gate())
        gate.users += 1
        try:
            yield gate
        finally:
            gate.users -= 1
            if gate.users == 0:
                del self._gates[key]

    @asynccontextmanager
    async def shared(self, key: str) -> AsyncIterator[None]:
        async with self._entered(key) as gate:
            async with gate.condition:
                await gate.condition.wait_for(lambda: not gate.writer and not gate.writers_waiting)
                gate.readers += 1
            try:
                yield
            finally:
                async with gate.condition:
                    gate.readers -= 1
                    gate.condition.notify_all()

    @asynccontextmanager
    async def exclusive(self, key: str) -> AsyncIterator[None]:
        async with self._entered(key) as gate:
            async with gate.condition:
                gate.writers_waiting += 1
                try:
                    await gate.condition.wait_for(lambda: not gate.writer and not gate.readers)
                finally:
                    gate.writers_waiting -= 1
                    gate.condition.notify_all()
                gate.writer = True
            try:
                yield
            finally:
                async with gate.condition:
                    gate.writer = False
                    gate.condition.notify_all()

    def __len__(self) -> int:
        return len(self._gates)
