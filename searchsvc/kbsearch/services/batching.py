"""Micro-batching of embedding calls: concurrent documents share one model call."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.services.runtime import embed_call


@dataclass(slots=True)
class _Request:
    texts: list[str]
    done: asyncio.Future[list[list[float]]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class EmbeddingBatcher:
    """One embedding call at a time; whatever queued meanwhile goes into the next call together.

    Parallel calls would only fight over the same cores, and a model is faster per text on one
    batch of 64 than on four of 16. A request is never split, so a document's vectors come
    from one call, and a failure fails exactly the documents of that call.
    """

    def __init__(self, embedder: EmbeddingProvider, max_batch: int = 64) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self._queue: deque[_Request] = deque()
        self._drainer: asyncio.Task[None] | None = None  # a reference keeps the task from being collected

    async def embed(self, texts: list[str]) -> list[list[float]]:
        request = _Request(texts)
        self._queue.append(request)
        if self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return await request.done

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                texts = [text for request in batch for text in request.texts]
                try:
                    vectors = await embed_call(self.embedder.embed_documents, texts)
                except Exception as exc:  # noqa: BLE001 - handed to every waiting request, raised in its PUT
                    for request in batch:
                        if not request.done.done():
                            request.done.set_exception(exc)
                    continue
                start = 0
                for request in batch:
                    end = start + len(request.texts)
                    if not request.done.done():  # its client may have gone away
                        request.done.set_result(vectors[start:end])
                    start = end
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
