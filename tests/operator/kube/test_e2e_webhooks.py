"""A push delivered to the operator's webhook receiver becomes an incremental sync, end to end:
the real kopf operator, the emulated API server (with the chart's RBAC) and the real service."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket

import httpx
import pytest

from kboperator.kube.webhooks import hook_path
from tests.operator.kube.e2e_support import synced_at
from tests.operator.secrets import create_secret
from tests.operator.world import NAMESPACE, World
from tests.support.kube import eventually

TOKEN = "kb-team-webhook-secret-0123456789"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def deliver(
    port: int, path: str, payload: dict[str, object], delivery: str, token: str = TOKEN
) -> httpx.Response:
    body = json.dumps(payload).encode()
    digest = hmac.new(token.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-KB-Signature-256": f"sha256={digest}", "X-KB-Delivery": delivery}
    async with httpx.AsyncClient() as client:
        return await client.post(f"http://127.0.0.1:{port}{path}", content=body, headers=headers)


async def test_a_push_delivery_syncs_the_new_commit_and_reports_freshness(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    await world.stop_operator()
    monkeypatch.setenv("KBOPERATOR_WEBHOOK_PORT", str(port))
    monkeypatch.setenv("KBOPERATOR_FRESHNESS_BOUND_SECONDS", "600")
    await world.start_operator()

    repo = world.repo("docs")
    repo.write("guide/a.md", "# A\n")
    repo.write("notes.txt", "not a document\n")
    first = repo.commit("first")
    await create_secret(world.api, "docs-webhook", {"token": TOKEN}, "webhook")
    spec = {
        "repository": {"url": str(repo.path)},
        "schedule": "@every 24h",  # nothing but the webhook can bring the next commit in time
        "webhook": {"secretRef": {"name": "docs-webhook"}},
    }
    await world.api.create("docs", spec)
    status = await eventually(synced_at(world, "docs", first), what="first sync")
    path = hook_path(NAMESPACE, "docs", TOKEN)
    status = await eventually(lambda: (s := world.api.status("docs")).get("webhookPath") == path and s, what="path")
    assert status["freshness"]["boundSeconds"] == 600

    # A push that touches no document triggers nothing.
    repo.write("notes.txt", "still not a document\n")
    repo.commit("notes")
    ignored = await deliver(port, path, {"ref": "refs/heads/main", "paths": ["notes.txt"]}, "push-1")
    assert (ignored.status_code, ignored.json()["result"]) == (202, "ignored_paths")

    repo.write("guide/a.md", "# A, edited\n")
    second = repo.commit("edit")
    answer = await deliver(port, path, {"ref": "refs/heads/main", "paths": ["guide/a.md"]}, "push-2")
    assert (answer.status_code, answer.json()["result"]) == (202, "requested"), answer.text
    status = await eventually(synced_at(world, "docs", second), what="the pushed commit synced")
    assert status["lastHandledSyncRequest"] == answer.json()["request"]
    assert status["lastSync"]["full"] is False and status["lastSync"]["modified"] == 1  # incremental
    assert await world.listing("docs") == repo.expected("guide/a.md")
    fresh = status["freshness"]
    assert fresh["remoteCommit"] == second and 0 <= fresh["lagSeconds"] < 600
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["FreshWithinBound"]["status"] == "True"
    metrics = world.memo["context"].metrics.registry
    assert metrics.get_sample_value("kb_operator_push_to_searchable_seconds_count") == 1
    assert metrics.get_sample_value("kb_operator_webhook_deliveries_total", {"result": "ignored_paths"}) == 1
    assert (
        metrics.get_sample_value("kb_operator_source_freshness_lag_seconds", {"source": f"{NAMESPACE}/docs"})
        == (fresh["lagSeconds"])
    )
