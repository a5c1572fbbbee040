"""Micro-batching of document embedding: bounded calls shared by concurrent documents, writers in turns,
and a text embedded once."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from kbsearch.aio.runtime import embed_call
from kbsearch.embedders.base import EmbeddingProvider

_Item = tuple[str, str]  # (partition, text)


@dataclass(slots=True, eq=False)
class _Request:
    # The (partition, text)s this request added and no call has taken yet: distinct, pending nowhere else.
    texts: deque[_Item] = field(default_factory=deque)


class EmbeddingBatcher:
    """One embedding call at a time, of at most `max_batch` texts; writers take turns between calls.

    Parallel calls would only fight over the same cores, and a model is faster per text on one
    batch of 64 than on four of 16, so texts queued meanwhile go into the next call together. But
    a request is split into calls of at most `max_batch` texts, and writers (services/budget.writer_of)
    take turns round robin: each call starts with the texts of the writer whose turn it is (its
    oldest request first), fills any room left from the writers after it, and the next call starts
    with the next writer. A request of at most `max_batch` texts from a writer with nothing else
    queued therefore waits for the call in progress and at most one call per other writer, however
    large their documents: one team's 2,000-chunk write delays another's small one by seconds, not
    by the minute the whole write takes. A lone writer's texts go in full calls back to back.

    A text is embedded once however many requests want it at the same time: a request whose text
    is already queued or being embedded (versioned documentation repeats whole pages, and the
    operator sends several files at once) waits for that text's vector instead of queueing it
    again. Texts are shared only within one partition (the reach of the preparer's stored-vector
    lookup: a team's sources, a scoped writer's, or one source, services/documents/prep.py): a
    vector another partition's write is waiting for is never handed to this one, so how long a
    write takes says nothing about texts the writer could not search for.

    A failed call fails every request that has a text in it, and those requests' texts still
    queued with it (a write that fails is not embedded on; a request waiting for one of those
    texts fails too, as if the text had been in the call). Other requests go on.
    """

    def __init__(self, embedder: EmbeddingProvider, max_batch: int = 64) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.embedder = embedder
        self.max_batch = max_batch
        # Writers with texts queued, whose turn first: each one's requests, oldest first.
        self._turns: OrderedDict[str, deque[_Request]] = OrderedDict()
        self._last = ""  # the writer whose turn the latest call was: last in line until it comes round
        self._pending: dict[_Item, asyncio.Future[list[float]]] = {}  # queued or being embedded
        self._drainer: asyncio.Task[None] | None = None  # a reference keeps the task from being collected

    async def embed(self, texts: list[str], partition: str = "", writer: str = "") -> list[list[float]]:
        loop = asyncio.get_running_loop()
        request = _Request()
        futures: list[asyncio.Future[list[float]]] = []
        for item in ((partition, text) for text in texts):
            future = self._pending.get(item)
            if future is None:
                future = loop.create_future()
                # Read the outcome once, so a failure whose waiters all went away is not logged as lost.
                future.add_done_callback(lambda f: f.cancelled() or f.exception())
                self._pending[item] = future
                request.texts.append(item)
            futures.append(future)
        if request.texts:
            if writer not in self._turns:
                self._turns[writer] = deque()
                if self._last in self._turns and self._last != writer:
                    self._turns.move_to_end(self._last)  # a newcomer goes before the one just served
            self._turns[writer].append(request)
            if self._drainer is None:
                self._drainer = loop.create_task(self._drain())
        # Shielded: a client that goes away must not cancel a vector other requests wait for.
        return [await asyncio.shield(future) for future in futures]

    async def _drain(self) -> None:
        try:
            while self._turns:
                taken = self._take()
                items = [item for _, part in taken for item in part]
                if not items:  # only requests a failed call emptied were left
                    continue
                try:
                    vectors = await embed_call(self.embedder.embed_keyed, items)
                    if len(vectors) != len(items):
                        raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(items)} texts")
                except Exception as exc:  # noqa: BLE001 - handed to every waiting request, raised in its PUT
                    for request, part in taken:
                        self._settle(part, exc)
                        self._settle(list(request.texts), exc)
                        request.texts.clear()  # _take drops the emptied request
                    continue
                for item, vector in zip(items, vectors, strict=True):
                    self._settle([item], vector)
        finally:
            self._drainer = None

    def _settle(self, items: list[_Item], outcome: list[float] | Exception) -> None:
        for item in items:
            future = self._pending.pop(item)
            if future.done():
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _take(self) -> list[tuple[_Request, list[_Item]]]:
        """The next call's texts, by request: the current writer's first, then the writers after it."""
        taken: list[tuple[_Request, list[_Item]]] = []
        room = self.max_batch
        writers = list(self._turns)
        for writer in writers:
            requests = self._turns[writer]
            while requests and room:
                request = requests[0]
                part = [request.texts.popleft() for _ in range(min(room, len(request.texts)))]
                if part:
                    taken.append((request, part))
                    room -= len(part)
                if not request.texts:
                    requests.popleft()
            if not room:
                break
        self._last = writers[0]
        self._turns.move_to_end(self._last)  # its turn is over: the next call starts with the next writer
        for writer in writers:
            if not self._turns[writer]:
                del self._turns[writer]
        return taken
