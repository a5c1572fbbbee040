"""Per-key locks: exclusion holds across hand-overs, and idle keys are forgotten.

Holders keep their lock until the test releases them, and the test lets the event loop run
until every task is blocked (`settle`), so each step is decided by the locks, never by timing.
"""

from __future__ import annotations

import asyncio

from kbsearch.aio.locks import KeyedLocks, SharedExclusiveLocks


async def settle() -> None:
    """Run the loop until the tasks started so far are blocked: a few steps each, no clock."""
    for _ in range(50):
        await asyncio.sleep(0)


class Holders:
    """Tasks that take a lock, note it, and hold it until released by name."""

    def __init__(self, locks: SharedExclusiveLocks) -> None:
        self.locks = locks
        self.events: list[str] = []
        self._release: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, kind: str, name: str) -> None:
        self._release[name] = asyncio.Event()
        self.tasks.append(asyncio.create_task(self._hold(kind, name)))

    def release(self, name: str) -> None:
        self._release[name].set()

    async def _hold(self, kind: str, name: str) -> None:
        async with getattr(self.locks, kind)("s"):
            self.events.append(f"+{name}")
            await self._release[name].wait()
            self.events.append(f"-{name}")


async def test_shared_holders_overlap_and_exclusive_ones_do_not():
    locks = SharedExclusiveLocks()
    holders = Holders(locks)
    holders.start("exclusive", "w1")
    await settle()
    holders.start("shared", "r0")
    holders.start("shared", "r1")
    await settle()
    holders.start("exclusive", "w2")
    await settle()
    assert holders.events == ["+w1"]  # everyone else waits for the writer

    holders.release("w1")
    await settle()
    # a waiting writer goes before the readers that waited longer
    assert holders.events == ["+w1", "-w1", "+w2"]
    holders.release("w2")
    await settle()
    assert holders.events[:3] == ["+w1", "-w1", "+w2"] and holders.events[3] == "-w2"
    assert sorted(holders.events[4:]) == ["+r0", "+r1"]  # the readers hold it together
    holders.release("r0")
    holders.release("r1")
    await asyncio.gather(*holders.tasks)
    assert len(locks) == 0


async def test_a_waiting_writer_holds_back_new_readers():
    locks = SharedExclusiveLocks()
    holders = Holders(locks)
    holders.start("shared", "r1")
    await settle()
    holders.start("exclusive", "w")
    await settle()
    holders.start("shared", "r2")
    await settle()
    assert holders.events == ["+r1"]  # r2 could share with r1, but the writer is waiting

    holders.release("r1")
    await settle()
    assert holders.events == ["+r1", "-r1", "+w"]
    holders.release("w")
    holders.release("r2")
    await asyncio.gather(*holders.tasks)
    assert holders.events == ["+r1", "-r1", "+w", "-w", "+r2", "-r2"]


async def test_keyed_locks_serialise_one_key_and_forget_it_after():
    locks, inside = KeyedLocks(), []

    async def hold() -> None:
        async with locks.hold("k"):
            inside.append(1)
            assert len(inside) == 1
            await settle()  # give every other holder the chance to get in, if the lock let it
            inside.pop()

    await asyncio.gather(*(hold() for _ in range(5)))
    assert len(locks) == 0
