"""Auth, health, status, metrics, error shapes, back-pressure and start-up checks."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kbsearch.app import create_app
from kbsearch.deps import context_of
from kbsearch.errors import ConfigurationError
from kbsearch.settings import Settings
from tests.searchsvc.api_fixtures import list_all, put, sections
from tests.support.hashing import HashingEmbedder
from tests.support.service import CHALLENGE, make_store, running_service, scraped, serve

WRITE, READ = "write-token-123", "read-token-456"


@pytest.fixture
async def secured(tmp_path):
    async with running_service("edge", tmp_path / "d", api_token=WRITE, read_token=READ) as client:
        yield client


def bearer(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


async def test_writes_need_the_api_token(secured):
    doc = {"uri": "a.md", "content": "hello"}
    missing = await secured.put("/api/v1/documents", json=doc)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "UNAUTHENTICATED"
    assert missing.headers["www-authenticate"] == CHALLENGE
    wrong = await secured.put("/api/v1/documents", json=doc, headers=bearer("nope"))
    assert wrong.status_code == 401
    basic = await secured.put("/api/v1/documents", json=doc, headers={"authorization": "Basic abc"})
    assert basic.status_code == 401
    reader = await secured.put("/api/v1/documents", json=doc, headers=bearer(READ))
    assert reader.status_code == 403 and reader.json()["error"]["code"] == "FORBIDDEN"
    for call in (
        secured.delete("/api/v1/documents", params={"uri": "a.md"}, headers=bearer(READ)),
        secured.delete("/api/v1/sources/s", headers=bearer(READ)),
    ):
        assert (await call).status_code == 403
    ok = await secured.put("/api/v1/documents", json=doc, headers=bearer(WRITE))
    assert ok.status_code == 200


async def test_reads_need_a_read_or_api_token_when_configured(secured):
    assert (await secured.get("/api/v1/documents")).status_code == 401
    assert (await secured.get("/api/v1/search", params={"q": "x"})).status_code == 401
    assert (await secured.get("/api/v1/status")).status_code == 401
    assert (await secured.get("/api/v1/documents", headers=bearer(READ))).status_code == 200
    assert (await secured.get("/api/v1/sources", headers=bearer(WRITE))).status_code == 200
    for open_path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert (await secured.get(open_path)).status_code == 200, open_path


async def test_reads_are_open_when_only_a_write_token_is_set(tmp_path):
    async with running_service("edge", tmp_path / "d", api_token=WRITE) as client:
        assert (await client.get("/api/v1/sources")).status_code == 200
        assert (await client.put("/api/v1/documents", json={"uri": "a", "content": "b"})).status_code == 401


async def test_tokens_never_reach_the_logs(tmp_path, caplog):
    caplog.set_level("DEBUG")
    async with running_service("edge", tmp_path / "d", api_token=WRITE) as client:
        await client.put("/api/v1/documents", json={"uri": "a", "content": "secret body"}, headers=bearer(WRITE))
        await client.put("/api/v1/documents", json={"uri": "a", "content": "x"}, headers=bearer("guess"))
    assert WRITE not in caplog.text and "guess" not in caplog.text and "secret body" not in caplog.text


async def test_status_reports_store_embedder_and_chunker(api):
    await put(api, "a.md", sections(3))
    status = (await api.get("/api/v1/status")).json()
    assert status["version"]
    assert status["store"] == {
        "backend": "edge" if api.store_kind == "edge" else "qdrant",
        "collection": "test",
        "documents": 1,
        "chunks": 3,
    }
    assert status["embedder"] == {"provider": "hashing", "model": "hashing-v1", "dimensions": 64}
    assert status["chunker"]["minChars"] == 500 and status["chunker"]["maxChars"] == 800
    assert status["sparse"] == {"encoder": "kb-bm25-cjk-v4"}
    assert status["search"] == {
        "fusion": "dbsf",
        "rrfK": 2,
        "denseWeight": 1.0,
        "keywordWeight": 1.0,
        "fullScores": True,
        "candidates": 100,
    }


async def test_status_shows_the_configured_fusion_and_search_uses_it(tmp_path):
    settings = Settings(
        data_dir=tmp_path,
        fusion="rrf",
        rrf_k=5,
        fusion_dense_weight=0.5,
        fusion_keyword_weight=2.0,
        fusion_full_scores=False,
    )
    async with serve(create_app(settings, embedder=HashingEmbedder())) as client:
        status = (await client.get("/api/v1/status")).json()
        assert status["search"] == {
            "fusion": "rrf",
            "rrfK": 5,
            "denseWeight": 0.5,
            "keywordWeight": 2.0,
            "fullScores": False,
            "candidates": 100,
        }
        await put(client, "a.md", "# Vacuum\n\nVacuum removes dead tuples from postgres tables.")
        await put(client, "b.md", "# Bread\n\nKnead the dough for ten minutes.")
        body = {"query": "dead tuples", "limit": 10, "mode": "hybrid"}
        hits = (await client.post("/api/v1/search", json=body)).json()["results"]
        assert hits[0]["uri"] == "a.md"


async def test_health_readiness_metrics_and_request_ids(api):
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    assert (await api.get("/readyz")).json() == {"status": "ready"}
    await put(api, "a.md", "hello world")
    traced = await api.get("/api/v1/sources", headers={"x-request-id": "trace-42"})
    assert traced.headers["x-request-id"] == "trace-42"
    assert len((await api.get("/healthz")).headers["x-request-id"]) == 32
    assert (await api.get("/metrics")).status_code == 404  # metrics have a port of their own
    text = scraped(api)
    assert 'searchsvc_documents_written_total{status="created"} 1.0' in text
    assert 'route="/api/v1/documents"' in text


async def test_unknown_routes_and_methods_get_json_errors(api):
    missing = await api.get("/api/v2/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    wrong_method = await api.patch("/api/v1/documents")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


async def test_openapi_describes_the_contract(api):
    spec = (await api.get("/openapi.json")).json()
    assert {"/api/v1/documents", "/api/v1/search", "/api/v1/sources", "/api/v1/status"} <= set(spec["paths"])


async def test_requests_before_start_up_get_503_not_ready(tmp_path):
    import httpx

    app = create_app(Settings(data_dir=tmp_path), store=make_store("edge", tmp_path), embedder=HashingEmbedder())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        response = await client.post("/api/v1/search", json={"query": "x"})
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "NOT_READY"
        assert (await client.get("/readyz")).status_code == 503
        assert (await client.get("/healthz")).status_code == 200


@pytest.mark.parametrize("store_kind", ["edge", "qdrant-local"])
async def test_a_different_embedder_is_refused_at_start_up_with_rebuilds_off(tmp_path, store_kind):
    store = make_store(store_kind, tmp_path)
    if store_kind == "qdrant-local":
        store.close = lambda: None  # an in-memory collection would vanish with its client
    first = create_app(Settings(data_dir=tmp_path), store=store, embedder=HashingEmbedder(dimensions=64))
    async with serve(first) as client:
        await put(client, "a.md", "hello")
    second = create_app(
        Settings(data_dir=tmp_path, rebuild="off"),
        store=store,
        embedder=HashingEmbedder(dimensions=32, model="other-model"),
    )
    with pytest.raises(ConfigurationError, match="other-model"):
        async with serve(second):
            pass
    # With rebuilds on, the embedder that built the collection must be loadable to serve it meanwhile.
    third = create_app(
        Settings(data_dir=tmp_path), store=store, embedder=HashingEmbedder(dimensions=32, model="other-model")
    )
    with pytest.raises(ConfigurationError, match=r"hashing/hashing-v1.*SEARCHSVC_REBUILD=off"):
        async with serve(third):
            pass


async def test_writes_beyond_the_queue_bound_get_429_with_retry_after(tmp_path):
    gate = threading.Event()

    class GatedEmbedder(HashingEmbedder):
        def embed_documents(self, texts):
            gate.wait(timeout=300)
            return super().embed_documents(texts)

    async with running_service("edge", tmp_path / "d", embedder=GatedEmbedder(), max_pending_writes=1) as client:
        first = asyncio.create_task(client.put("/api/v1/documents", json={"uri": "a", "content": "one two"}))
        while context_of(client.app).documents._pending == 0:  # noqa: ASYNC110 - a counter, not an event
            await asyncio.sleep(0.01)
        refused = await client.put("/api/v1/documents", json={"uri": "b", "content": "three"})
        gate.set()
        assert (await first).status_code == 200
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "TOO_MANY_REQUESTS"
    assert refused.headers["retry-after"] == "1"


async def test_bulk_delete_has_no_cap(tmp_path):
    """More than 10,000 chunks of one source go in one request (edge store)."""
    async with running_service("edge", tmp_path / "d", chunk_min_chars=50, chunk_max_chars=100) as client:
        line = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi\n\n"
        content = "".join(f"{i} {line}" for i in range(1010))
        total = 0
        for n in range(10):
            total += (await put(client, f"bulk/{n}.md", content, sourceIdentifier="bulk"))["chunks"]
        await put(client, "other.md", "stays", sourceIdentifier="other")
        assert total > 10_000
        response = await client.delete("/api/v1/sources/bulk")
        assert response.json() == {"sourceIdentifier": "bulk", "documentsDeleted": 10, "chunksDeleted": total}
        assert [d["uri"] for d in await list_all(client)] == ["other.md"]
        status = (await client.get("/api/v1/status")).json()["store"]
        assert (status["documents"], status["chunks"]) == (1, 1)
