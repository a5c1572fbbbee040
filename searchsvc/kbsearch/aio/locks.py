"""Per-key asyncio locks and semaphores that free themselves when nobody holds or waits for them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedSemaphores:
    """Per-key semaphores of `capacity` that free themselves when nobody holds or waits for them."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._semaphores: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        semaphore, users = self._semaphores.get(key, (None, 0))
        if semaphore is None:
            semaphore = asyncio.Semaphore(self.capacity)
        self._semaphores[key] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._semaphores[key]
            if users == 1:
                del self._semaphores[key]
            else:
                self._semaphores[key] = (semaphore, users - 1)

    def __len__(self) -> int:
        return len(self._semaphores)


class KeyedLocks(KeyedSemaphores):
    """Per-key asyncio locks: one holder per key at a time."""

    def __init__(self) -> None:
        super().__init__(1)


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
