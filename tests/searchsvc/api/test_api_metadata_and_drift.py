"""Metadata bounds and storage, drift signals (collection epoch, per-source counts), cancelled writes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kbsearch.deps import context_of
from kbsearch.schemas.fields import MAX_METADATA_BYTES, MAX_METADATA_LIST_ITEMS
from tests.searchsvc.api_fixtures import counts, list_all, put, sections, sha
from tests.support.service import running_service

# --- metadata ----------------------------------------------------------------------------------


async def test_a_list_of_100000_strings_is_refused_before_any_work(api):
    # The reproduction from the issue: it used to be chunked into ~400 copies of the list.
    body = {"uri": "m.md", "content": sections(3), "metadata": {"tags": ["x"] * 100_000}}
    response = await api.put("/api/v1/documents", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert f"at most {MAX_METADATA_LIST_ITEMS}" in error["message"] and "100000 items" in error["message"]
    assert await counts(api) == (0, 0)


@pytest.mark.parametrize(
    ("metadata", "limit"),
    [
        ({f"k{i}": ["v"] * 10 for i in range(MAX_METADATA_LIST_ITEMS // 10 + 1)}, f"at most {MAX_METADATA_LIST_ITEMS}"),
        ({f"k{i}": "é" * 2000 for i in range(5)}, f"at most {MAX_METADATA_BYTES} are allowed"),
    ],
    ids=["items across lists", "serialized bytes"],
)
async def test_metadata_is_bounded_as_a_whole(api, metadata, limit):
    response = await api.put("/api/v1/documents", json={"uri": "m.md", "content": "x", "metadata": metadata})
    assert response.status_code == 422 and limit in response.json()["error"]["message"]


async def test_metadata_at_the_limits_is_accepted(api):
    metadata = {"tags": ["t"] * MAX_METADATA_LIST_ITEMS, "blob": "b" * 4000}
    assert (await put(api, "m.md", sections(2), **metadata))["status"] == "created"


async def test_search_filters_and_returns_metadata_from_the_record(api):
    await put(api, "a.md", sections(4), team="x", labels=["blue"], sourceIdentifier="s")
    await put(api, "b.md", sections(4, words="alpha delta"), team="y", sourceIdentifier="s")
    body = {"query": "alpha", "limit": 3, "mode": "keyword", "filter": {"metadata": {"team": "x"}}, "collapse": False}
    results = (await api.post("/api/v1/search", json=body)).json()["results"]
    assert len(results) == 3  # exactly `limit`, filtered inside the engine
    assert {r["uri"] for r in results} == {"a.md"}
    assert all(r["metadata"] == {"team": "x", "labels": ["blue"], "sourceIdentifier": "s"} for r in results)

    # A metadata-only change rewrites the record alone; hits follow it.
    changed = await put(api, "a.md", sections(4), team="z", labels=["blue"], sourceIdentifier="s")
    assert (changed["status"], changed["chunksEmbedded"]) == ("updated", 0)
    body["filter"]["metadata"] = {"labels": "blue"}
    results = (await api.post("/api/v1/search", json=body)).json()["results"]
    assert {r["metadata"]["team"] for r in results} == {"z"}


# --- drift signals -------------------------------------------------------------------------------


async def test_status_has_a_collection_epoch_kept_across_restarts(tmp_path):
    async with running_service("edge", tmp_path / "one") as client:
        epoch = (await client.get("/api/v1/status")).json()["collectionEpoch"]
        await put(client, "a.md", "text", sourceIdentifier="s")
    async with running_service("edge", tmp_path / "one") as client:
        assert (await client.get("/api/v1/status")).json()["collectionEpoch"] == epoch
        source = (await client.get("/api/v1/sources/s")).json()
        assert source["collectionEpoch"] == epoch
    async with running_service("edge", tmp_path / "two") as client:  # a re-created collection
        assert (await client.get("/api/v1/status")).json()["collectionEpoch"] != epoch


async def test_one_source_is_counted_by_its_own_endpoint(api):
    await put(api, "a.md", sections(2), sourceIdentifier="team/docs")
    await put(api, "b.md", sections(3), sourceIdentifier="team/docs")
    await put(api, "c.md", sections(1), sourceIdentifier="other")
    epoch = (await api.get("/api/v1/status")).json()["collectionEpoch"]

    response = await api.get("/api/v1/sources/team%2Fdocs")
    assert response.status_code == 200
    body = response.json()
    assert body.pop("lastIngestedAt").endswith("Z")
    assert body == {
        "sourceIdentifier": "team/docs",
        "documents": 2,
        "chunks": 5,
        "incompleteDocuments": 0,
        "collectionEpoch": epoch,
        "sync": None,  # no sync reported for it
        "progress": None,  # nor a sync running
    }
    # Zero, not 404: a reset collection or a wrong URL looks exactly like this.
    empty = await api.get("/api/v1/sources/never-synced")
    assert empty.status_code == 200
    assert empty.json() == {
        "sourceIdentifier": "never-synced",
        "documents": 0,
        "chunks": 0,
        "incompleteDocuments": 0,
        "lastIngestedAt": None,
        "collectionEpoch": epoch,
        "sync": None,
        "progress": None,
    }
    # The listing and the bulk delete still answer on their own paths.
    assert len((await api.get("/api/v1/sources")).json()["sources"]) == 2
    assert (await api.delete("/api/v1/sources/team%2Fdocs")).json()["documentsDeleted"] == 2
    assert (await api.get("/api/v1/sources/team%2Fdocs")).json()["documents"] == 0


async def test_incomplete_documents_are_counted(api):
    await put(api, "a.md", sections(2), sourceIdentifier="s")
    store = context_of(api.app).store
    original = store.write_document

    def fail_commit(record, expected):
        if record.checksum != "sha256:incomplete":
            raise RuntimeError("injected")
        return original(record, expected)

    store.write_document = fail_commit
    failed = await api.put(
        "/api/v1/documents", json={"uri": "a.md", "content": sections(3), "metadata": {"sourceIdentifier": "s"}}
    )
    assert failed.status_code == 503
    store.write_document = original
    status = (await api.get("/api/v1/sources/s")).json()
    assert (status["documents"], status["chunks"], status["incompleteDocuments"]) == (1, 0, 1)


async def test_the_source_endpoint_needs_the_read_token(tmp_path):
    async with running_service("edge", tmp_path / "d", api_token="w-token-1", read_token="r-token-1") as client:
        assert (await client.get("/api/v1/sources/s")).status_code == 401
        ok = await client.get("/api/v1/sources/s", headers={"authorization": "Bearer r-token-1"})
        assert ok.status_code == 200


# --- cancellation ---------------------------------------------------------------------------------


async def test_a_cancelled_write_still_finishes_before_its_locks_are_released(api):
    """A client that disconnects mid-write cancels its task; the store writes must not stop halfway."""
    old, new = sections(300, tag="old"), sections(300, tag="new")
    await put(api, "big.md", old)
    store = context_of(api.app).store
    original = store.upsert_chunks
    entered, release = threading.Event(), threading.Event()

    def paused_upsert(points):
        if not entered.is_set():
            entered.set()
            release.wait(30)  # hold the first batch until the request has been cancelled
        return original(points)

    store.upsert_chunks = paused_upsert
    write = asyncio.create_task(api.put("/api/v1/documents", json={"uri": "big.md", "content": new}))
    assert await asyncio.to_thread(entered.wait, 60), "the write never reached the store"
    write.cancel()
    await asyncio.sleep(0)  # let the cancellation reach the handler before the batch returns
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await write
    store.upsert_chunks = original

    # The write ran to its end: the new record, and every chunk is the new text.
    [listed] = await list_all(api)
    assert listed["checksum"] == sha(new) and listed["chunks"] == 300
    assert await counts(api) == (1, 300)
    body = {"query": "alpha", "limit": 100, "mode": "keyword", "filter": {"uriPrefix": "big.md"}}
    assert all("new" in r["content"] for r in (await api.post("/api/v1/search", json=body)).json()["results"])


# --- start-up repair ------------------------------------------------------------------------------


async def test_start_up_repairs_what_a_killed_process_left(store_opener, tmp_path, caplog):
    """What a process killed mid-write leaves, on either store, is emptied before the first request."""
    from kbsearch.app import create_app
    from kbsearch.models import INCOMPLETE, CollectionSignature
    from kbsearch.settings import Settings
    from kbsearch.store.bm25 import Bm25Encoder
    from tests.searchsvc.store.support import ingest, make_chunks, make_record, put_record
    from tests.support.hashing import HashingEmbedder
    from tests.support.service import serve

    signature = CollectionSignature("hashing", "hashing-v1", 64, Bm25Encoder.name)
    before = store_opener.open(signature)
    ingest(before, "done.md", ["chunk text kept"], source="s")
    # Killed after its claim and some chunks, and a create from before claims existed.
    put_record(before, make_record("half.md", 0, source="s", checksum=INCOMPLETE, version=5))
    before.upsert_chunks(make_chunks("half.md", ["chunk text a", "chunk text b"], source="s", version=5))
    before.upsert_chunks(make_chunks("orphan.md", ["chunk text c"] * 3, source="s"))
    before.close()

    app = create_app(Settings(data_dir=tmp_path / "unused"), store=store_opener.new(), embedder=HashingEmbedder())
    with caplog.at_level("INFO", logger="kbsearch.services.documents.repair"):
        async with serve(app) as client:
            listed = {d["uri"]: d for d in (await client.get("/api/v1/documents")).json()["documents"]}
            assert set(listed) == {"done.md", "half.md"}
            assert (listed["half.md"]["checksum"], listed["half.md"]["chunks"]) == (INCOMPLETE, 0)
            body = {"query": "chunk text", "limit": 100, "mode": "keyword"}
            hits = (await client.post("/api/v1/search", json=body)).json()["results"]
            assert [h["uri"] for h in hits] == ["done.md"]
            status = (await client.get("/api/v1/sources/s")).json()
            assert (status["documents"], status["chunks"], status["incompleteDocuments"]) == (2, 1, 1)
            again = await put(client, "half.md", "chunk text a", sourceIdentifier="s")
            assert again["status"] == "updated"  # never unchanged, whatever the content
    [entry] = [r for r in caplog.records if r.getMessage() == "repaired interrupted writes"]
    assert (entry.incompleteDocuments, entry.chunksOfIncomplete, entry.orphanedUris, entry.orphanChunks) == (1, 2, 1, 3)
