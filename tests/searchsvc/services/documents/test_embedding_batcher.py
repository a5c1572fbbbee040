"""Concurrent documents share bounded embedding calls, writers take turns, and each gets exactly its own vectors."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbsearch.errors import EmbedderUnavailableError
from kbsearch.services.documents.batching import EmbeddingBatcher
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


class FailingFirstCall(GatedEmbedder):
    """A GatedEmbedder whose first call, once released, fails instead of answering."""

    def embed_documents(self, texts):
        self.batches.append(list(texts))
        if len(self.batches) == 1:
            self.called.set()
            self.gate.wait(timeout=300)
            raise RuntimeError("model exploded")
        return HashingEmbedder.embed_documents(self, texts)


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


async def test_a_request_is_split_into_calls_within_the_cap():
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=4)
    first = asyncio.create_task(batcher.embed(["x"]))
    await embedder.first_call_started()
    big = asyncio.create_task(batcher.embed([f"t{i}" for i in range(6)]))
    small = [asyncio.create_task(batcher.embed([f"s{i}"])) for i in range(3)]
    await settle()
    embedder.gate.set()
    results = await asyncio.gather(first, big, *small)
    # One writer (the default): its requests in order, in full calls.
    assert embedder.batches == [["x"], ["t0", "t1", "t2", "t3"], ["t4", "t5", "s0", "s1"], ["s2"]]
    assert results[1] == HashingEmbedder().embed_documents([f"t{i}" for i in range(6)])


async def test_writers_take_turns_and_a_small_write_waits_one_call_per_other_writer():
    embedder = GatedEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=4)
    a_first = asyncio.create_task(batcher.embed([f"a{i}" for i in range(20)], "source\0a", "team a"))
    await embedder.first_call_started()
    c_large = asyncio.create_task(batcher.embed([f"c{i}" for i in range(20)], "source\0c", "team c"))
    b_small = asyncio.create_task(batcher.embed(["b0", "b1"], "source\0b", "team b"))
    await settle()
    embedder.gate.set()
    await asyncio.gather(a_first, c_large, b_small)
    # The call in progress (a's), one call of c's, then b's turn, its room filled from a's queue.
    assert embedder.batches[:4] == [
        ["a0", "a1", "a2", "a3"],
        ["c0", "c1", "c2", "c3"],
        ["b0", "b1", "a4", "a5"],
        ["a6", "a7", "a8", "a9"],
    ]
    assert [len(b) for b in embedder.batches] == [4] * 10 + [2]


async def test_a_lone_large_write_goes_in_full_calls():
    embedder = HashingEmbedder()
    batcher = EmbeddingBatcher(embedder, max_batch=16)
    texts = [f"chunk {i}" for i in range(100)]
    assert await batcher.embed(texts, "source\0a", "team a") == HashingEmbedder().embed_documents(texts)
    assert embedder.calls == [16] * 6 + [4]


async def test_a_failed_call_fails_the_rest_of_its_request_but_not_another_writers():
    class FailingSecond(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[list[str]] = []

        def embed_documents(self, texts):
            self.batches.append(list(texts))
            if len(self.batches) == 2:
                raise RuntimeError("model exploded")
            return super().embed_documents(texts)

    embedder = FailingSecond()
    batcher = EmbeddingBatcher(embedder, max_batch=4)
    a = asyncio.create_task(batcher.embed([f"a{i}" for i in range(12)], "source\0a", "team a"))
    b = asyncio.create_task(batcher.embed([f"b{i}" for i in range(6)], "source\0b", "team b"))
    with pytest.raises(EmbedderUnavailableError):
        await b  # its first call, the second, failed
    assert await a == HashingEmbedder().embed_documents([f"a{i}" for i in range(12)])
    assert [t for batch in embedder.batches for t in batch if t.startswith("b")] == ["b0", "b1", "b2", "b3"]
    assert await batcher.embed(["b4"], "source\0b", "team b") == HashingEmbedder().embed_documents(["b4"])


async def test_a_failed_call_fails_every_request_in_it_and_the_next_call_still_runs():
    embedder = FailingFirstCall()
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
    embedder = FailingFirstCall()
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


class KeyedRecorder(HashingEmbedder):
    """Records each call's (partition, text)s; with `gated`, its first call waits for `gate`."""

    def __init__(self, gated: bool = False) -> None:
        super().__init__()
        self.keyed: list[list[tuple[str, str]]] = []
        self.gate = threading.Event()
        self.called = threading.Event()
        if not gated:
            self.gate.set()

    def embed_keyed(self, items, *, query_lane=False):
        self.keyed.append(list(items))
        self.called.set()
        self.gate.wait(timeout=300)
        return self.embed_documents([text for _, text in items])


REQUESTS = st.lists(
    st.tuples(
        st.sampled_from(["team a", "team b", "team c"]),  # writer
        st.sampled_from(["source\0a", "source\0b"]),  # partition
        st.lists(st.integers(0, 12).map(lambda n: f"text {n}"), max_size=30),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(requests=REQUESTS, max_batch=st.integers(1, 9))
def test_every_text_gets_its_vector_in_order_in_calls_within_the_bound(requests, max_batch):
    embedder = KeyedRecorder()

    async def scenario() -> list[list[list[float]]]:
        batcher = EmbeddingBatcher(embedder, max_batch=max_batch)
        return await asyncio.gather(*(batcher.embed(texts, part, writer) for writer, part, texts in requests))

    results = asyncio.run(scenario())
    reference = HashingEmbedder()
    for (_, _, texts), vectors in zip(requests, results, strict=True):
        assert vectors == reference.embed_documents(texts)
    assert all(1 <= len(call) <= max_batch for call in embedder.keyed)
    embedded = [item for call in embedder.keyed for item in call]
    # All wanted at once: each (partition, text) embedded exactly once, never shared across partitions.
    assert sorted(embedded) == sorted({(part, text) for _, part, texts in requests for text in texts})


@settings(max_examples=100, deadline=None)
@given(
    max_batch=st.integers(1, 8),
    others=st.lists(st.integers(1, 5), min_size=1, max_size=4),  # each other writer's size, in calls
    small=st.integers(1, 8),
    arrives=st.integers(0, 4),  # how many of the other writers queue before the small request
    data=st.data(),
)
def test_a_small_request_waits_at_most_one_call_per_other_writer(max_batch, others, small, arrives, data):
    small = min(small, max_batch)
    sizes = [calls * max_batch + data.draw(st.integers(0, max_batch - 1)) for calls in others]
    embedder = KeyedRecorder(gated=True)

    async def scenario() -> None:
        batcher = EmbeddingBatcher(embedder, max_batch=max_batch)
        writers = [f"writer {w}" for w in range(len(sizes))]
        tasks = [asyncio.create_task(batcher.embed([f"w{0} {i}" for i in range(sizes[0])], "p", writers[0]))]
        assert await asyncio.to_thread(embedder.called.wait, 300)  # its first call is running
        queued = [(w, [f"w{w} {i}" for i in range(sizes[w])]) for w in range(1, len(sizes))]
        mine = ("small", [f"small {i}" for i in range(small)])
        at = min(arrives, len(queued))
        for writer, texts in [*queued[:at], mine, *queued[at:]]:
            name = writer if writer == "small" else writers[writer]
            tasks.append(asyncio.create_task(batcher.embed(texts, "p", name)))
            await settle()
        embedder.gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    calls_with_small = [n for n, call in enumerate(embedder.keyed) if any(t.startswith("small") for _, t in call)]
    # Call 0 was running when it came; after that, at most one call of each other writer's went first.
    assert calls_with_small[-1] <= len(sizes)
    assert all(len(call) <= max_batch for call in embedder.keyed)
