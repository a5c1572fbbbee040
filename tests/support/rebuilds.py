"""Reading a rebuild's state through the HTTP API, and waiting for it while searching."""

from __future__ import annotations

import asyncio
import time

import httpx


async def rebuild_status(client: httpx.AsyncClient) -> dict:
    response = await client.get("/api/v1/status")
    assert response.status_code == 200, response.text
    rebuild: dict = response.json()["rebuild"]
    return rebuild


async def search_uris(client: httpx.AsyncClient, query: str, mode: str = "hybrid") -> list[str]:
    response = await client.post("/api/v1/search", json={"query": query, "limit": 10, "mode": mode})
    assert response.status_code == 200, response.text
    return list(dict.fromkeys(r["uri"] for r in response.json()["results"]))


async def wait_for(client: httpx.AsyncClient, states: set[str], *, searching: str | None = None) -> dict:
    """Poll the rebuild until it reaches one of `states`, searching meanwhile; every search must answer."""
    seen: list[str] = []
    deadline = time.monotonic() + 300  # a bound for a stuck rebuild, not a speed requirement
    while time.monotonic() < deadline:
        status = await rebuild_status(client)
        seen.append(status["state"])
        if status["state"] in states and (status["state"] != "idle" or status["finishedAt"]):
            status["seen"] = seen
            return status
        if status["state"] == "failed":
            raise AssertionError(f"the rebuild failed: {status['message']}")
        if searching is not None:
            assert await search_uris(client, searching), f"no results for {searching!r} while {status['state']}"
        await asyncio.sleep(0.02)
    raise AssertionError(f"the rebuild never reached {states}: {seen[-5:]}")
