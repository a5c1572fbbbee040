"""Per-key locks: exclusion holds across hand-overs, and idle keys are forgotten."""

from __future__ import annotations

import asyncio

from kbsearch.services.locks import KeyedLocks, SharedExclusiveLocks


async def test_shared_holders_overlap_and_exclusive_ones_do_not():
    locks, events = SharedExclusiveLocks(), []

    async def hold(kind: str, name: str, delay: float) -> None:
        async with getattr(locks, kind)("s"):
            events.append(f"+{name}")
            await asyncio.sleep(delay)
            events.append(f"-{name}")

    writer = asyncio.create_task(hold("exclusive", "w1", 0.05))
    await asyncio.sleep(0.01)
    readers = [asyncio.create_task(hold("shared", f"r{i}", 0.05)) for i in range(2)]
    await asyncio.sleep(0.01)
    late_writer = asyncio.create_task(hold("exclusive", "w2", 0.01))
    await asyncio.gather(writer, *readers, late_writer)
    # writers never overlap anything; a waiting writer goes before waiting readers, and the
    # readers then run together
    assert events[:4] == ["+w1", "-w1", "+w2", "-w2"]
    assert set(events[4:6]) == {"+r0", "+r1"}
    assert len(locks) == 0


async def test_a_waiting_writer_holds_back_new_readers():
    locks, events = SharedExclusiveLocks(), []

    async def hold(kind: str, name: str, delay: float) -> None:
        async with getattr(locks, kind)("s"):
            events.append(name)
            await asyncio.sleep(delay)

    first = asyncio.create_task(hold("shared", "r1", 0.05))
    await asyncio.sleep(0.01)
    writer = asyncio.create_task(hold("exclusive", "w", 0.01))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(hold("shared", "r2", 0.01))
    await asyncio.gather(first, writer, second)
    assert events == ["r1", "w", "r2"]


async def test_keyed_locks_serialise_one_key_and_forget_it_after():
    locks, inside = KeyedLocks(), []

    async def hold() -> None:
        async with locks.hold("k"):
            inside.append(1)
            assert len(inside) == 1
            await asyncio.sleep(0.01)
            inside.pop()

    await asyncio.gather(*(hold() for _ in range(5)))
    assert len(locks) == 0
