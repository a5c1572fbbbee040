"""What the end-to-end operator tests (test_e2e_*.py) wait for and read: a source synced, an event, a condition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.operator.world import GitRepo, World
from tests.support.kube import eventually


def synced_at(world: World, name: str, commit: str) -> Callable[[], dict[str, Any] | None]:
    """A check: the source is Synced at `commit`; returns its status."""

    def check() -> dict[str, Any] | None:
        status = world.api.status(name)
        ok = status.get("phase") == "Synced" and status.get("lastSyncedCommit") == commit
        return status if ok else None

    return check


async def synced_source(world: World, name: str, schedule: str) -> tuple[GitRepo, str, dict[str, Any]]:
    """Repository `name` with one commit of a.md, a source of it on `schedule`, and its first sync
    waited for: the repository, that commit and the source's status."""
    repo = world.repo(name)
    repo.write("a.md", "# A\n")
    commit = repo.commit("one")
    await world.api.create(name, {"repository": {"url": str(repo.path)}, "schedule": schedule})
    return repo, commit, await eventually(synced_at(world, name, commit))


async def has_event(world: World, name: str, reason: str) -> None:
    """Events are posted in the background: wait for one with this reason."""
    await eventually(lambda: reason in [e["reason"] for e in world.api.events(name)], what=f"event {reason}")


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == kind)
