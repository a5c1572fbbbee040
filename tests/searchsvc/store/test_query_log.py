"""The query log through the real app on both stores: what a search leaves, and that it never hurts one.

Every face (REST, MCP, console, ask) goes through SearchService.search, so the MCP, console and
ask origins are driven here through that same call with their origin; REST through HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from kbsearch.commands import SearchQuery
from kbsearch.deps import context_of, parts_of
from kbsearch.errors import StoreUnavailableError
from kbsearch.models import QueryLogEntry
from kbsearch.services.access.scope import Caller
from kbsearch.store.factory import query_log_beside
from kbsearch.store.querylog import QueryLogStore
from tests.searchsvc.api_fixtures import put
from tests.support.scoped_access import bearer, entry, tokens_yaml
from tests.support.service import STORE_KINDS, make_store, running_service, serve

ADMIN, TEAM_A, TEAM_B, NOBODY = "admin-secret-tok-1", "team-a-secret-tok-2", "team-b-secret-tok-3", "nobody-tok-4"
TOKENS = tokens_yaml(
    entry("admin", ADMIN, '["*"]', write=True),
    entry("team-a-agent", TEAM_A, '["team-a/*"]'),
    entry("team-b-agent", TEAM_B, '["team-b/*"]'),
    entry("nobody", NOBODY, "[]"),
)


def dropped(app: Any, reason: str) -> float:
    return (
        parts_of(app).metrics.registry.get_sample_value("searchsvc_query_log_dropped_total", {"reason": reason}) or 0.0
    )


def written(app: Any) -> float:
    return parts_of(app).metrics.registry.get_sample_value("searchsvc_query_log_written_total") or 0.0


def logged(app: Any) -> list[dict[str, Any]]:
    """Every stored entry's full payload, oldest first."""
    return sorted(context_of(app).query_log.store.entries(since=0, allowed=None), key=lambda p: p["at"])


async def search(client: httpx.AsyncClient, query: str, token: str | None = None, **params: Any) -> dict[str, Any]:
    response = await client.get("/api/v1/search", params={"q": query, **params}, headers=bearer(token) if token else {})
    assert response.status_code == 200, response.text
    return response.json()


async def test_every_face_is_recorded_with_its_origin(api: httpx.AsyncClient) -> None:
    await put(api, "https://x/a.md", "# Deploys\n\nrollback a deploy with helm", sourceIdentifier="team-a/docs")
    found = await search(api, "Rollback  HELM", mode="keyword")
    service = context_of(api.app).search  # type: ignore[attr-defined]
    for origin in ("mcp", "ui", "ask"):
        await service.search(SearchQuery(query=f"{origin} question"), Caller.anonymous(), origin=origin)
    await search(api, "nothing-matches-this", mode="keyword", sourceIdentifier="team-a/docs")
    await context_of(api.app).query_log.flush()  # type: ignore[attr-defined]

    entries = logged(api.app)  # type: ignore[attr-defined]
    assert [e["origin"] for e in entries] == ["api", "mcp", "ui", "ask", "api"]
    first = entries[0]
    assert first["query"] == "Rollback  HELM" and first["normalized"] == "rollback helm"
    assert first["results"] == len(found["results"]) == 1
    assert first["topScore"] == pytest.approx(found["results"][0]["relevance"])  # calibrated, not fused
    assert first["caller"] == "anonymous" and first["sources"] == [] and first["unrestricted"] is True
    assert first["latencyMs"] >= 0 and isinstance(first["time"], str)
    last = entries[-1]
    assert last["results"] == 0 and last["topScore"] is None
    assert last["sources"] == ["team-a/docs"] and last["unrestricted"] is False
    assert written(api.app) == 5  # type: ignore[attr-defined]

    insights = (await api.get("/api/v1/insights", params={"window": "24h"})).json()
    assert insights["enabled"] is True and insights["total"] == 5
    assert insights["byOrigin"] == {"api": 2, "ask": 1, "mcp": 1, "ui": 1}
    assert insights["zeroResult"][0]["query"] == "nothing-matches-this"


@pytest.fixture(params=STORE_KINDS)
async def scoped(request, tmp_path: Path):
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS)
    async with running_service(request.param, tmp_path / "data", tokens_file=path) as client:
        for team in ("a", "b"):
            body = {"uri": f"https://x/{team}.md", "content": f"# {team}\n\nshared words {team}words"}
            body["metadata"] = {"sourceIdentifier": f"team-{team}/docs"}
            assert (await client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))).status_code == 200
        yield client


async def test_the_log_keeps_the_callers_name_never_its_token(scoped: httpx.AsyncClient) -> None:
    for token in (ADMIN, TEAM_A, TEAM_B, NOBODY):
        await search(scoped, "shared words", token)
    post = await scoped.post("/api/v1/search", json={"query": "posted"}, headers=bearer(TEAM_A))
    assert post.status_code == 200
    await context_of(scoped.app).query_log.flush()  # type: ignore[attr-defined]
    entries = logged(scoped.app)  # type: ignore[attr-defined]
    assert [e["caller"] for e in entries] == ["admin", "team-a-agent", "team-b-agent", "nobody", "team-a-agent"]
    stored = json.dumps(entries)
    for token in (ADMIN, TEAM_A, TEAM_B, NOBODY):
        assert token not in stored


async def insights_of(client: httpx.AsyncClient, token: str) -> httpx.Response:
    response = await client.get("/api/v1/insights", params={"window": "7d"}, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response


async def test_a_team_sees_only_its_own_queries(scoped: httpx.AsyncClient) -> None:
    await search(scoped, "alpha-query-of-a", TEAM_A)
    await search(scoped, "alpha-query-of-a", TEAM_A, sourceIdentifier="team-a/docs")
    await search(scoped, "zebra-query-of-b", TEAM_B)
    await search(scoped, "b-asks-for-a", TEAM_B, sourceIdentifier="team-a/docs")  # narrowed to nothing
    await search(scoped, "admin-everywhere", ADMIN)
    await search(scoped, "admin-on-a", ADMIN, sourceIdentifier="team-a/docs")
    await search(scoped, "admin-on-both", ADMIN, sourceIdentifier=["team-a/docs", "team-b/docs"])
    await context_of(scoped.app).query_log.flush()  # type: ignore[attr-defined]

    def queries(response: httpx.Response) -> set[str]:
        return {q["query"] for q in response.json()["topQueries"]}

    a = await insights_of(scoped, TEAM_A)
    assert queries(a) == {"alpha-query-of-a", "admin-on-a"} and a.json()["total"] == 3
    for foreign in ("zebra", "b-asks", "admin-everywhere", "admin-on-both", "team-b"):
        assert foreign not in a.text
    b = await insights_of(scoped, TEAM_B)
    assert queries(b) == {"zebra-query-of-b"} and b.json()["total"] == 1
    assert "alpha" not in b.text and "b-asks-for-a" not in b.text  # its search of a's source touched nothing it owns
    everything = await insights_of(scoped, ADMIN)
    assert everything.json()["total"] == 7
    nobody = await insights_of(scoped, NOBODY)
    assert nobody.json()["total"] == 0 and nobody.json()["topQueries"] == []
    assert (await scoped.get("/api/v1/insights")).status_code == 401
    bad = await scoped.get("/api/v1/insights", params={"window": "1y"}, headers=bearer(ADMIN))
    assert bad.status_code == 422 and "window" in bad.json()["error"]["message"]


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_switched_off_nothing_is_recorded_or_created(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path / "data")
    async with running_service(kind, tmp_path / "data", query_log="off", store=store) as client:
        await put(client, "https://x/a.md", "alpha", sourceIdentifier="s")
        await search(client, "alpha")
        insights = (await client.get("/api/v1/insights")).json()
        assert insights["enabled"] is False and insights["total"] == 0
        assert context_of(client.app).query_log.store is None  # type: ignore[attr-defined]
        assert written(client.app) == 0 and dropped(client.app, "queue_full") == 0  # type: ignore[attr-defined]
        if kind == "edge":
            assert not (tmp_path / "data" / "test_querylog").exists()
        else:
            assert not store.client.collection_exists("test_querylog")  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_failing_log_store_never_fails_a_search_and_is_counted(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(kind, tmp_path / "data")
    failing = query_log_beside(store)

    def broken(points: object) -> None:
        raise RuntimeError("the log's disk is gone")

    failing._upsert = broken  # type: ignore[method-assign]
    async with running_service(kind, tmp_path / "data", store=store, query_log_store=failing) as client:
        await put(client, "https://x/a.md", "alpha", sourceIdentifier="s")
        with caplog.at_level(logging.WARNING, logger="kbsearch.services.search.querylog"):
            for _ in range(3):
                await search(client, "alpha")
                await context_of(client.app).query_log.flush()  # type: ignore[attr-defined]
        assert dropped(client.app, "store_error") == 3  # type: ignore[attr-defined]
        assert len([r for r in caplog.records if "cannot be written" in r.getMessage()]) == 1  # once per streak
        assert (await client.get("/api/v1/insights")).json()["total"] == 0


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_full_queue_drops_entries_and_counts_them_while_searches_go_on(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path / "data")
    slow = query_log_beside(store)
    release = threading.Event()
    write = slow._upsert

    def stalled(points: list[tuple[str, dict[str, Any]]]) -> None:
        release.wait(timeout=60)
        write(points)

    slow._upsert = stalled  # type: ignore[method-assign]
    settings = {"query_log_queue_size": 2}
    async with running_service(kind, tmp_path / "data", store=store, query_log_store=slow, **settings) as client:
        app = client.app  # type: ignore[attr-defined]
        try:
            for i in range(10):
                await search(client, f"query {i}")
            assert dropped(app, "queue_full") >= 7  # one batch stuck in the store, two queued
        finally:
            release.set()
        await context_of(app).query_log.flush()
        assert written(app) + dropped(app, "queue_full") == 10
        assert len(logged(app)) == written(app)


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_nothing_is_written_while_the_store_refuses_writes(kind: str, tmp_path: Path) -> None:
    store = make_store(kind, tmp_path / "data")
    async with running_service(kind, tmp_path / "data", store=store) as client:
        refusal = StoreUnavailableError("the data volume is full")
        store.write_problem = lambda: refusal  # type: ignore[method-assign]
        await search(client, "alpha")
        await context_of(client.app).query_log.flush()  # type: ignore[attr-defined]
        assert dropped(client.app, "store_unwritable") == 1 and written(client.app) == 0  # type: ignore[attr-defined]


def old_entry(at: float, query: str) -> QueryLogEntry:
    return QueryLogEntry(
        at=at, origin="api", query=query, results=1, top_score=0.5, latency_ms=1, caller="c", sources=None
    )


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_retention_by_age_and_count(kind: str, tmp_path: Path) -> None:
    settings = {"query_log_retention_days": 30, "query_log_max_entries": 5}
    async with running_service(kind, tmp_path / "data", **settings) as client:
        log = context_of(client.app).query_log  # type: ignore[attr-defined]
        store: QueryLogStore = log.store
        now = time.time()
        store.append([old_entry(now - 31 * 86_400, "too old"), old_entry(now - 29 * 86_400, "kept a while")])
        for i in range(5):
            await search(client, f"fresh {i}")
        await log.flush()
        assert store.count() == 7
        assert await log.prune() == 2  # "too old" by age, then "kept a while" as the oldest beyond 5
        assert [e["query"] for e in logged(client.app)] == [f"fresh {i}" for i in range(5)]  # type: ignore[attr-defined]
        assert parts_of(client.app).metrics.registry.get_sample_value("searchsvc_query_log_pruned_total") == 2  # type: ignore[attr-defined]


async def test_retention_runs_in_the_background(tmp_path: Path) -> None:
    settings = {"query_log_max_entries": 2, "query_log_prune_interval_s": 0.05}
    async with running_service("edge", tmp_path / "data", **settings) as client:
        log = context_of(client.app).query_log  # type: ignore[attr-defined]
        for i in range(6):
            await search(client, f"q{i}")
        await log.flush()
        deadline = time.monotonic() + 60  # a wait for the background task, not a timing assertion
        while log.store.count() > 2:
            assert time.monotonic() < deadline, "the background retention pass never ran"
            await asyncio.sleep(0.05)
        assert [e["query"] for e in logged(client.app)] == ["q4", "q5"]  # type: ignore[attr-defined]


async def test_the_log_is_written_by_the_app_it_was_started_in(tmp_path: Path) -> None:
    """A restart on the same data directory finds the entries written before it."""
    from kbsearch.app import create_app
    from kbsearch.settings import Settings
    from tests.support.hashing import HashingEmbedder

    for round_ in range(2):
        app = create_app(
            Settings(data_dir=tmp_path / "data"),
            store=make_store("edge", tmp_path / "data"),
            embedder=HashingEmbedder(),
        )
        async with serve(app) as client:
            await search(client, f"round {round_}")
            await context_of(app).query_log.flush()
            assert [e["query"] for e in logged(app)] == [f"round {r}" for r in range(round_ + 1)]
