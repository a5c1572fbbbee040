"""Failures inside the service: honest 503s, nothing half-written, no races with bulk deletes."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from pydantic import ValidationError

from kbsearch.chunker import MarkdownChunker
from kbsearch.deps import context_of
from kbsearch.settings import Settings
from tests.searchsvc.api_fixtures import counts, list_all, put, sections
from tests.support.hashing import HashingEmbedder


class Boom(RuntimeError):
    pass


def fail_once(obj, name: str):
    """Make obj.name raise once, then behave again."""
    original = getattr(obj, name)
    state = {"failed": False}

    def wrapper(*args, **kwargs):
        if not state["failed"]:
            state["failed"] = True
            raise Boom("injected failure")
        return original(*args, **kwargs)

    setattr(obj, name, wrapper)


def fail_commit_once(store):
    """Make the final record write (the commit, not the incomplete claim) raise once."""
    original = store.write_document
    state = {"failed": False}

    def wrapper(record, expected_version):
        if not state["failed"] and record.checksum != "sha256:incomplete":
            state["failed"] = True
            raise Boom("injected failure")
        return original(record, expected_version)

    store.write_document = wrapper


async def test_a_store_failure_is_a_503_and_a_new_document_leaves_no_orphans(api):
    fail_commit_once(context_of(api.app).store)
    response = await api.put("/api/v1/documents", json={"uri": "new.md", "content": sections(3)})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "STORE_UNAVAILABLE"
    assert response.headers["retry-after"]
    assert await counts(api) == (0, 0)
    assert (await put(api, "new.md", sections(3)))["status"] == "created"


async def test_an_interrupted_replacement_is_never_reported_unchanged(api):
    old = sections(2, tag="old")
    await put(api, "doc.md", old)
    fail_commit_once(context_of(api.app).store)
    response = await api.put("/api/v1/documents", json={"uri": "doc.md", "content": sections(4, tag="new")})
    assert response.status_code == 503
    [listed] = await list_all(api)
    assert listed["checksum"] == "sha256:incomplete"  # the listing shows it as stale
    assert listed["chunks"] == 0 and await counts(api) == (1, 0)  # and search serves none of it
    again = await put(api, "doc.md", old)
    assert again["status"] == "updated"
    assert await counts(api) == (1, 2)


async def test_vectors_are_reused_only_for_the_text_they_were_made_from(api):
    first = sections(2, tag="a")
    await put(api, "doc.md", first)
    fail_commit_once(context_of(api.app).store)
    shifted = sections(1, tag="b") + "\n" + first  # new text moves the old chunks to other indexes
    assert (await api.put("/api/v1/documents", json={"uri": "doc.md", "content": shifted})).status_code == 503
    done = await put(api, "doc.md", shifted)
    assert done["chunks"] == 3

    store, reference = context_of(api.app).store, HashingEmbedder()
    texts = [c.embed_text for c in MarkdownChunker().chunk(shifted).chunks]
    import hashlib

    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    stored = store.reusable_vectors("doc.md", hashes)
    for text, text_hash in zip(texts, hashes, strict=True):
        assert stored[text_hash] == pytest.approx(reference.embed_documents([text])[0])


async def test_an_embedder_failure_is_a_503_on_writes_and_searches(api):
    fail_once(context_of(api.app).embedder, "embed_documents")
    response = await api.put("/api/v1/documents", json={"uri": "a.md", "content": "hello there"})
    assert response.status_code == 503 and response.json()["error"]["code"] == "EMBEDDER_UNAVAILABLE"
    assert await counts(api) == (0, 0)
    fail_once(context_of(api.app).embedder, "embed_query")
    search = await api.post("/api/v1/search", json={"query": "hello", "mode": "dense"})
    assert search.status_code == 503 and search.json()["error"]["code"] == "EMBEDDER_UNAVAILABLE"


async def test_a_bulk_delete_waits_for_a_write_in_flight_to_its_source(api):
    store = context_of(api.app).store
    original = store.upsert_chunks
    writing, proceed = threading.Event(), threading.Event()

    def held_upsert(points):
        writing.set()
        proceed.wait(timeout=300)  # the write stays in flight until the delete has had every chance
        return original(points)

    store.upsert_chunks = held_upsert
    write = asyncio.create_task(
        api.put(
            "/api/v1/documents", json={"uri": "doc.md", "content": sections(3), "metadata": {"sourceIdentifier": "s"}}
        )
    )
    assert await asyncio.to_thread(writing.wait, 300)
    delete = asyncio.create_task(api.delete("/api/v1/sources/s"))
    for _ in range(200):  # the delete runs as far as it can: up to the lock it must wait on
        await asyncio.sleep(0)
    assert not delete.done()
    proceed.set()
    deleted = await delete
    assert (await write).status_code == 200
    assert deleted.json() == {"sourceIdentifier": "s", "documentsDeleted": 1, "chunksDeleted": 3}
    assert await list_all(api) == []
    assert await counts(api) == (0, 0)


async def test_metadata_of_another_type_is_a_change(api):
    await put(api, "a.md", "text", flag=1)
    assert (await put(api, "a.md", "text", flag=True))["status"] == "updated"
    assert (await put(api, "a.md", "text", flag=1.0))["status"] == "updated"
    [listed] = await list_all(api)
    assert listed["metadata"]["flag"] == 1.0 and listed["metadata"]["flag"] is not True


@pytest.mark.parametrize(
    "body",
    [
        '{"uri": "a.md", "content": "abc \\ud800"}',
        '{"uri": "a.md", "content": "x", "metadata": {"k": "\\udc00"}}',
        '{"uri": "a.md", "content": "x", "metadata": {"k": Infinity}}',
        '{"uri": "a.md", "content": "x", "metadata": {"k": NaN}}',
        json.dumps({"uri": "a.md", "content": "x", "metadata": {"k": 10**30}}),
    ],
)
async def test_values_that_cannot_be_stored_faithfully_are_422(api, body):
    response = await api.put("/api/v1/documents", content=body.encode(), headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert await counts(api) == (0, 0)
    assert (await api.get("/api/v1/documents")).status_code == 200


async def test_an_oversize_body_without_content_length_is_413(api):
    async def chunks():
        yield b'{"uri": "x", "content": "'
        for _ in range(9):
            yield b"a" * 1024 * 1024
        yield b'"}'

    response = await api.put("/api/v1/documents", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "REQUEST_TOO_LARGE"


def test_a_read_token_without_a_write_token_is_refused():
    with pytest.raises(ValidationError, match="leave writes open"):
        Settings(read_token="r")
