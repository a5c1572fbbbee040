"""Two service replicas, each with its own in-process locks, writing one Qdrant collection.

qdrant-client's local mode stands in for the server. It has no locking of its own, so every
call goes through one lock, as a server applies each request atomically; the race is in the
order of the calls, which the tests choose.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from kbsearch.app import create_app
from kbsearch.chunker import MarkdownChunker
from kbsearch.settings import Settings
from kbsearch.store.qdrant_server import QdrantServerStore
from tests.searchsvc.api_fixtures import sections, sha
from tests.support.hashing import HashingEmbedder
from tests.support.service import serve

COLLECTION = "shared"


class SerialClient:
    """One replica's view of the shared client: calls serialised, with an optional pause."""

    def __init__(self, client: QdrantClient, lock: threading.Lock) -> None:
        self._client, self._lock = client, lock
        self.pause_when: Callable[[str, tuple, dict], str | None] | None = None  # -> "before" | "after"
        self.paused, self.resume = threading.Event(), threading.Event()

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            when = self.pause_when(name, args, kwargs) if self.pause_when else None
            if when == "before":
                self._hold()
            with self._lock:
                result = method(*args, **kwargs)
            if when == "after":
                self._hold()
            return result

        return call

    def _hold(self) -> None:
        self.pause_when = None  # once
        self.paused.set()
        assert self.resume.wait(30), "the test never resumed the paused replica"


def chunk_upsert(name, args, kwargs) -> bool:
    points = kwargs.get("points") or (args[1] if len(args) > 1 else [])
    return name == "upsert" and bool(points) and (points[0].payload or {}).get("kind") == "chunk"


def commit_upsert(name, args, kwargs) -> bool:
    points = kwargs.get("points") or (args[1] if len(args) > 1 else [])
    payload = (points[0].payload or {}) if name == "upsert" and points else {}
    return payload.get("kind") == "document" and payload.get("checksum") != "sha256:incomplete"


@pytest.fixture
async def replicas(tmp_path: Path):
    shared, lock = QdrantClient(":memory:"), threading.Lock()
    views = [SerialClient(shared, lock), SerialClient(shared, lock)]
    async with AsyncExitStack() as stack:
        clients = []
        for i, view in enumerate(views):
            store = QdrantServerStore(view, COLLECTION)  # type: ignore[arg-type]
            app = create_app(Settings(data_dir=tmp_path / f"r{i}"), store=store, embedder=HashingEmbedder())
            client = await stack.enter_async_context(serve(app))
            client.view = view  # type: ignore[attr-defined]
            clients.append(client)
        yield clients, shared
    shared.close()


def stored_chunks(shared: QdrantClient, uri: str) -> dict[int, str]:
    where = qm.Filter(
        must=[
            qm.FieldCondition(key="uri", match=qm.MatchValue(value=uri)),
            qm.FieldCondition(key="kind", match=qm.MatchValue(value="chunk")),
        ]
    )
    records, _ = shared.scroll(COLLECTION, scroll_filter=where, limit=10_000, with_payload=True)
    return {r.payload["chunkIndex"]: r.payload["content"] for r in records}


async def assert_consistent(client, shared: QdrantClient, uri: str, candidates: list[str | None]) -> str | None:
    """The document is exactly one of the candidates (None: absent) and returns which."""
    listed = (await client.get("/api/v1/documents", params={"uriPrefix": uri})).json()["documents"]
    chunks = stored_chunks(shared, uri)
    if not listed:
        assert None in candidates and chunks == {}, "chunks without a record"
        return None
    [record] = listed
    winner = next((c for c in candidates if c is not None and sha(c) == record["checksum"]), None)
    assert winner is not None, f"the record matches no content that was sent: {record['checksum']}"
    expected = [c.text for c in MarkdownChunker().chunk(winner).chunks]
    assert record["chunks"] == len(expected)
    assert chunks == dict(enumerate(expected)), "mixed or missing chunks"
    return winner


async def put(client, uri: str, content: str, source: str = "s"):
    return await client.put(
        "/api/v1/documents", json={"uri": uri, "content": content, "metadata": {"sourceIdentifier": source}}
    )


async def wait_paused(view: SerialClient) -> None:
    assert await asyncio.to_thread(view.paused.wait, 60), "the replica never paused"


@pytest.mark.parametrize(
    "pause",
    [
        pytest.param((chunk_upsert, "after"), id="after-its-first-chunk-batch"),
        pytest.param((chunk_upsert, "before"), id="before-its-first-chunk-batch-lands"),
        pytest.param((commit_upsert, "before"), id="before-its-commit"),
    ],
)
async def test_a_slow_replica_never_mixes_its_chunks_into_a_newer_write(replicas, pause):
    (first, second), shared = replicas
    old, slow, fast = sections(5, tag="old"), sections(300, tag="slow"), sections(3, tag="fast")
    assert (await put(first, "race.md", old)).status_code == 200

    predicate, when = pause
    first.view.pause_when = lambda name, args, kwargs: when if predicate(name, args, kwargs) else None
    slow_write = asyncio.create_task(put(first, "race.md", slow))
    await wait_paused(first.view)
    fast_write = await put(second, "race.md", fast)  # the other replica writes meanwhile
    first.view.resume.set()
    slow_answer = await slow_write

    assert await assert_consistent(first, shared, "race.md", [fast]) == fast
    assert fast_write.status_code == 200
    assert slow_answer.status_code == 409
    assert slow_answer.json()["error"]["code"] == "WRITE_CONFLICT"
    assert slow_answer.headers["Retry-After"]  # the operator retries it rather than skipping the file
    # The loser's retry wins cleanly.
    assert (await put(first, "race.md", slow)).status_code == 200
    assert await assert_consistent(second, shared, "race.md", [slow]) == slow


async def test_a_delete_from_another_replica_wins_over_a_write_in_flight(replicas):
    (first, second), shared = replicas
    assert (await put(first, "gone.md", sections(4, tag="old"))).status_code == 200
    first.view.pause_when = lambda name, args, kwargs: "after" if chunk_upsert(name, args, kwargs) else None
    slow_write = asyncio.create_task(put(first, "gone.md", sections(300, tag="slow")))
    await wait_paused(first.view)
    deleted = await second.delete("/api/v1/documents", params={"uri": "gone.md", "sourceIdentifier": "s"})
    first.view.resume.set()
    slow_answer = await slow_write
    assert await assert_consistent(second, shared, "gone.md", [None]) is None
    assert deleted.status_code == 200
    assert slow_answer.status_code == 409


async def test_conflicting_puts_from_two_replicas_leave_one_whole_version(replicas):
    (first, second), shared = replicas
    versions = [sections(n, tag=f"v{n}") for n in (300, 2, 260, 7, 1, 280, 3, 270)]
    answers = await asyncio.gather(*(put(first if i % 2 else second, "hot.md", v) for i, v in enumerate(versions)))
    assert all(a.status_code == 200 or a.json()["error"]["code"] == "WRITE_CONFLICT" for a in answers)
    winner = await assert_consistent(first, shared, "hot.md", versions)
    assert answers[versions.index(winner)].status_code == 200  # the content stored was acknowledged


async def test_a_metadata_change_racing_a_delete_never_leaves_a_record_without_chunks(replicas):
    (first, second), shared = replicas
    content = sections(4, tag="meta")
    body = {"uri": "meta.md", "content": content, "metadata": {"sourceIdentifier": "s", "team": "a"}}
    assert (await first.put("/api/v1/documents", json=body)).status_code == 200
    first.view.pause_when = lambda name, args, kwargs: "before" if commit_upsert(name, args, kwargs) else None
    body["metadata"]["team"] = "b"  # metadata alone: one record write
    change = asyncio.create_task(first.put("/api/v1/documents", json=body))
    await wait_paused(first.view)
    assert (await second.delete("/api/v1/documents", params={"uri": "meta.md"})).status_code == 200
    first.view.resume.set()
    answer = await change

    assert stored_chunks(shared, "meta.md") == {}
    listed = (await second.get("/api/v1/documents")).json()["documents"]
    # Absent, or listed incomplete so that the next sync sends it again; never complete without chunks.
    assert all(d["checksum"] == "sha256:incomplete" and d["chunks"] == 0 for d in listed)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "WRITE_CONFLICT"
