"""Concurrent documents share embedding calls, and each gets exactly its own vectors."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kbsearch.errors import EmbedderUnavailableError
from kbsearch.services.batching import EmbeddingBatcher
from tests.support.hashing import HashingEmbedder


class GatedEmbedder(HashingEmbedder):
    """Blocks its first call until released, so that later requests pile up behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.called = threading.Event()
        self.batches: list[list[str]] = []

    def embed_documents(self, texts):
        self.batches.append(list(texts))
        if len(self.batches) == 1:
            self.called.set()
            self.gate.wait(timeout=300)
        return super().embed_documents(texts)

    async def first_call_started(self) -> None:
        assert await asyncio.to_thread(self.called.wait, 300), "the first embedding call never started"


async def settle() -> None:
    """Let every task started so far run until it blocks (a request queues in its first step)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def test_requests_queued_behind_a_call_share_the_next_one():
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=64)
    first = asyncio.create_task(batcher.embed(["first"]))
    await embedder.first_call_started()
    rest = [asyncio.create_task(batcher.embed([f"doc {i} a", f"doc {i} b"])) for i in range(5)]
    await settle()
    embedder.gate.set()
    results = await asyncio.gather(first, *rest)
    assert len(embedder.batches) == 2
    assert len(embedder.batches[1]) == 10
    reference = HashingEmbedder()
    assert results[0] == reference.embed_documents(["first"])
    for i, vectors in enumerate(results[1:]):
        assert vectors == reference.embed_documents([f"doc {i} a", f"doc {i} b"])


async def test_batches_respect_the_cap_but_never_split_a_request():
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=4)
    first = asyncio.create_task(batcher.embed(["x"]))
    await embedder.first_call_started()
    big = asyncio.create_task(batcher.embed([f"t{i}" for i in range(6)]))
    small = [asyncio.create_task(batcher.embed([f"s{i}"])) for i in range(3)]
    await settle()
    embedder.gate.set()
    await asyncio.gather(first, big, *small)
    assert [len(b) for b in embedder.batches] == [1, 6, 3]


async def test_a_failed_call_fails_every_request_in_it_and_the_next_call_still_runs():
    class FailingOnce(GatedEmbedder):
        def embed_documents(self, texts):
            self.batches.append(list(texts))
            if len(self.batches) == 1:
                self.called.set()
                self.gate.wait(timeout=300)
                raise RuntimeError("model exploded")
            return HashingEmbedder.embed_documents(self, texts)

    embedder = FailingOnce()
    batcher = EmbeddingBatcher(embedder)
    doomed = asyncio.create_task(batcher.embed(["a"]))
    await embedder.first_call_started()
    survivor = asyncio.create_task(batcher.embed(["b"]))
    await settle()
    embedder.gate.set()
    with pytest.raises(EmbedderUnavailableError, match="RuntimeError") as failed:
        await doomed
    assert str(failed.value.__cause__) == "model exploded"
    assert len(await survivor) == 1


async def test_a_text_wanted_by_several_requests_is_embedded_once():
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=64)
    running = asyncio.create_task(batcher.embed(["shared page", "own 0"]))
    await embedder.first_call_started()
    # Queued behind the running call: one text is in it, one is queued by another request.
    later = [asyncio.create_task(batcher.embed(["shared page", "queued page", f"own {i}"])) for i in (1, 2)]
    await settle()
    embedder.gate.set()
    results = await asyncio.gather(running, *later)
    embedded = [text for batch in embedder.batches for text in batch]
    assert sorted(embedded) == ["own 0", "own 1", "own 2", "queued page", "shared page"]
    reference = HashingEmbedder()
    assert results[1] == reference.embed_documents(["shared page", "queued page", "own 1"])
    assert results[2] == reference.embed_documents(["shared page", "queued page", "own 2"])


async def test_a_text_is_shared_only_within_its_partition():
    # Waiting on another source's queued text would make that source's writes observable.
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=64)
    running = asyncio.create_task(batcher.embed(["shared page"], "source\0team-b"))
    await embedder.first_call_started()
    other = asyncio.create_task(batcher.embed(["shared page"], "source\0team-a"))
    await settle()
    embedder.gate.set()
    await asyncio.gather(running, other)
    assert embedder.batches == [["shared page"], ["shared page"]]  # embedded once for each source


async def test_a_request_that_goes_away_does_not_cancel_a_text_others_wait_for():
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=64)
    leaving = asyncio.create_task(batcher.embed(["shared"]))
    await embedder.first_call_started()
    staying = asyncio.create_task(batcher.embed(["shared", "more"]))
    await settle()
    leaving.cancel()
    await settle()
    embedder.gate.set()
    assert await staying == HashingEmbedder().embed_documents(["shared", "more"])
    assert [len(b) for b in embedder.batches] == [1, 1]


async def test_a_failed_text_fails_every_request_that_shares_it():
    class FailingOnce(GatedEmbedder):
        def embed_documents(self, texts):
            self.batches.append(list(texts))
            if len(self.batches) == 1:
                self.called.set()
                self.gate.wait(timeout=300)
                raise RuntimeError("model exploded")
            return HashingEmbedder.embed_documents(self, texts)

    embedder = FailingOnce()
    batcher = EmbeddingBatcher(embedder)
    first = asyncio.create_task(batcher.embed(["shared"]))
    await embedder.first_call_started()
    second = asyncio.create_task(batcher.embed(["shared"]))
    await settle()
    embedder.gate.set()
    for waiter in (first, second):
        with pytest.raises(EmbedderUnavailableError):
            await waiter
    assert await batcher.embed(["shared"]) == HashingEmbedder().embed_documents(["shared"])  # retried afresh
