"""The operator, end to end, with Secrets: who may make it read what, send it where, and deletion.

Every search service URL reaches the same real app here (the test transport ignores the host),
so a URL that the operator refuses is refused by the operator, not by the network.
"""

from __future__ import annotations

import json

import pytest

from tests.operator.kube.e2e_support import condition, has_event, synced_at
from tests.operator.secrets import create_secret, delete_secret
from tests.operator.world import World
from tests.support.kube import eventually

TEAM_URL = "http://team-search.example:8000"


async def restart_with(world: World, monkeypatch: pytest.MonkeyPatch, **settings: str) -> None:
    for key, value in settings.items():
        monkeypatch.setenv(f"KBOPERATOR_{key}", value)
    await world.stop_operator()
    await world.start_operator()


async def test_a_service_off_the_list_and_an_unlabelled_secret_are_invalid_specs(world: World) -> None:
    repo = world.repo("docs")
    repo.write("a.md", "# A\n")
    repo.commit("one")
    await create_secret(world.api, "search", {"token": "team-search-token"}, "search-token")
    await create_secret(world.api, "default-token-abcde", {"token": "sa-jwt-value"}, None)  # a legacy SA token
    await world.api.create(
        "exfiltrate",
        {
            "repository": {"url": str(repo.path)},
            "schedule": "@every 1s",
            "searchService": {"url": "http://attacker.example:8000", "secretRef": {"name": "search"}},
        },
    )
    await world.api.create(
        "borrow",
        {
            "repository": {
                "url": "https://git.example.com/acme/docs.git",
                "secretRef": {"name": "default-token-abcde"},
            },
            "schedule": "@every 1s",
        },
    )
    for name in ("exfiltrate", "borrow"):
        status = await eventually(lambda n=name: (s := world.api.status(n)).get("phase") == "Failed" and s)
        assert condition(status, "Ready")["reason"] == "InvalidSpec" and "nextSyncTime" not in status
        await has_event(world, name, "InvalidSpec")
    assert "http://attacker.example:8000" in condition(world.api.status("exfiltrate"), "Ready")["message"]
    message = condition(world.api.status("borrow"), "Ready")["message"]
    assert "Secret kb/default-token-abcde" in message and "kb.knowledgebase.dev/secret-type=repository" in message
    await world.operator_kept_working()
    assert world.api.status("exfiltrate")["consecutiveFailures"] == 1  # not retried until the spec changes
    assert world.syncs("success") == 0 and await world.listing("exfiltrate") == {}
    everything = json.dumps(
        [world.api.get(n) for n in ("exfiltrate", "borrow")]
        + world.api.events("exfiltrate")
        + world.api.events("borrow")
    )
    assert "team-search-token" not in everything and "sa-jwt-value" not in everything


async def test_cleanup_uses_the_operators_token_when_the_secret_went_first(world: World) -> None:
    repo = world.repo("gone")
    repo.write("a.md", "# A\n")
    commit = repo.commit("one")
    await create_secret(world.api, "search", {"token": "team-token"}, "search-token")
    spec = {"repository": {"url": str(repo.path)}, "searchService": {"secretRef": {"name": "search"}}}
    await world.api.create("gone", spec)
    await eventually(synced_at(world, "gone", commit), what="synced with the Secret's token")
    assert await world.listing("gone") == repo.expected("a.md")

    # What a namespace deletion does: its Secrets may go before the finalizer has run.
    await delete_secret(world.api, "search")
    await world.api.delete("gone")
    await eventually(lambda: world.api.get("gone") is None, what="the finalizer released")
    assert await world.listing("gone") == {}  # the operator's own token deleted them
    await has_event(world, "gone", "DocumentsDeleted")


async def test_cleanup_gives_up_on_a_missing_secret_after_bounded_attempts(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await restart_with(world, monkeypatch, ALLOWED_SEARCH_URLS=TEAM_URL, CLEANUP_SECRET_ATTEMPTS="3")
    repo = world.repo("orphaned")
    repo.write("a.md", "# A\n")
    commit = repo.commit("one")
    await create_secret(world.api, "team", {"token": "team-token", "url": TEAM_URL}, "search-token")
    spec = {"repository": {"url": str(repo.path)}, "searchService": {"url": TEAM_URL, "secretRef": {"name": "team"}}}
    await world.api.create("orphaned", spec)
    await eventually(synced_at(world, "orphaned", commit), what="synced to the team's service")

    await delete_secret(world.api, "team")
    await world.api.delete("orphaned")
    await eventually(lambda: world.api.get("orphaned") is None, what="the finalizer released after 3 attempts")
    events = world.api.events("orphaned")
    (left,) = [e for e in events if e["reason"] == "DocumentsLeftBehind"]
    assert left["type"] == "Warning" and "after 3 attempts" in left["message"]
    assert "Secret kb/team does not exist" in left["message"]
    assert len([e for e in events if e["reason"] == "CleanupFailed"]) >= 1
    # Not deleted: that service is not the operator's own, so its own token may not go there.
    assert await world.listing("orphaned") == repo.expected("a.md")
