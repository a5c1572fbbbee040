"""Micro-batching of embedding calls: concurrent documents share one model call, and a text is embedded once."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from kbsearch.aio.runtime import embed_call
from kbsearch.embedders.base import EmbeddingProvider


@dataclass(slots=True)
class _Request:
    texts: list[tuple[str, str]]  # the (partition, text)s this request added: distinct, and pending nowhere else


class EmbeddingBatcher:
    """One embedding call at a time; whatever queued meanwhile goes into the next call together.

    Parallel calls would only fight over the same cores, and a model is faster per text on one
    batch of 64 than on four of 16. A request is never split, so a document's new texts go into
    one call.

    A text is embedded once however many requests want it at the same time: a request whose text
    is already queued or being embedded (versioned documentation repeats whole pages, and the
    operator sends several files at once) waits for that text's vector instead of queueing it
    again. A failed call fails every request waiting for one of its texts. Texts are shared only
    within one partition (a source): a vector another source's write is waiting for is never handed
    to this one, so how long a write takes says nothing about other sources' texts.
    """

    def __init__(self, embedder: EmbeddingProvider, max_batch: int = 64) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self._queue: deque[_Request] = deque()
        self._pending: dict[tuple[str, str], asyncio.Future[list[float]]] = {}  # queued or being embedded
        self._drainer: asyncio.Task[None] | None = None  # a reference keeps the task from being collected

    async def embed(self, texts: list[str], partition: str = "") -> list[list[float]]:
        loop = asyncio.get_running_loop()
        fresh: list[tuple[str, str]] = []
        futures: list[asyncio.Future[list[float]]] = []
        for item in ((partition, text) for text in texts):
            future = self._pending.get(item)
            if future is None:
                future = loop.create_future()
                # Read the outcome once, so a failure whose waiters all went away is not logged as lost.
                future.add_done_callback(lambda f: f.cancelled() or f.exception())
                self._pending[item] = future
                fresh.append(item)
            futures.append(future)
        if fresh:
            self._queue.append(_Request(fresh))
            if self._drainer is None:
                self._drainer = loop.create_task(self._drain())
        # Shielded: a client that goes away must not cancel a vector other requests wait for.
        return [await asyncio.shield(future) for future in futures]

    async def _drain(self) -> None:
        try:
            while self._queue:
                texts = [item for request in self._take() for item in request.texts]
                try:
                    vectors = await embed_call(self.embedder.embed_keyed, texts)
                    if len(vectors) != len(texts):
                        raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
                except Exception as exc:  # noqa: BLE001 - handed to every waiting request, raised in its PUT
                    for text in texts:
                        future = self._pending.pop(text)
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for text, vector in zip(texts, vectors, strict=True):
                    future = self._pending.pop(text)
                    if not future.done():
                        future.set_result(vector)
        finally:
            self._drainer = None

    def _take(self) -> list[_Request]:
        batch: list[_Request] = []
        size = 0
        while self._queue and (not batch or size + len(self._queue[0].texts) <= self.max_batch):
            request = self._queue.popleft()
            batch.append(request)
            size += len(request.texts)
        return batch
