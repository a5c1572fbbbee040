"""Fair turns for searches: a caller's burst is bounded, and other callers are served in turn."""

from __future__ import annotations

import asyncio

import pytest

from kbsearch.aio.fairness import FairTurns
from kbsearch.errors import OverloadedError


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def holder(turns: FairTurns, caller: str, order: list[str], release: asyncio.Event) -> None:
    async with turns.turn(caller):
        order.append(caller)
        await release.wait()


async def test_a_caller_past_its_bound_gets_429_and_another_caller_does_not():
    turns = FairTurns(slots=1, per_caller=3)
    release = asyncio.Event()
    order: list[str] = []
    held = [asyncio.create_task(holder(turns, "a", order, release)) for _ in range(3)]  # 1 running, 2 waiting
    await settle()
    with pytest.raises(OverloadedError) as refused:
        async with turns.turn("a"):
            pass
    assert refused.value.status_code == 429 and refused.value.retryable
    assert refused.value.details["retryAfterSeconds"] == 1
    other = asyncio.create_task(holder(turns, "b", order, release))  # b's own bound is untouched
    await settle()
    release.set()
    await asyncio.gather(*held, other)
    assert sorted(order) == ["a", "a", "a", "b"]


async def test_waiting_callers_are_served_in_turn_not_behind_a_burst():
    turns = FairTurns(slots=1, per_caller=50)
    order: list[str] = []
    gates = {}

    async def one(caller: str, n: int) -> None:
        gates[(caller, n)] = gate = asyncio.Event()
        async with turns.turn(caller):
            order.append(f"{caller}{n}")
            await gate.wait()

    tasks = [asyncio.create_task(one("a", n)) for n in range(20)]  # a's burst: a0 runs, 19 wait
    await settle()
    tasks.append(asyncio.create_task(one("b", 0)))
    await settle()
    gates[("a", 0)].set()
    await settle()
    assert order == ["a0", "b0"]  # b's one search is next, not 20th
    for event in gates.values():
        event.set()
    await asyncio.gather(*tasks)
    assert len(order) == 21


async def test_a_waiter_that_goes_away_leaves_no_slot_behind():
    turns = FairTurns(slots=1, per_caller=5)
    release = asyncio.Event()
    order: list[str] = []
    running = asyncio.create_task(holder(turns, "a", order, release))
    await settle()
    leaving = asyncio.create_task(holder(turns, "b", order, release))
    await settle()
    leaving.cancel()
    await settle()
    release.set()
    await running
    async with turns.turn("c"):  # would wait forever if the cancelled waiter kept a place
        order.append("c")
    assert order == ["a", "c"]
