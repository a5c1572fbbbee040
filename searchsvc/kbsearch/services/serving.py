"""What serves the collection: the parts a rebuild's swap replaces, held once for every service.

The store, the embedder that made its vectors, the keyword encoder, the chunker and the signature
live here and nowhere else: the document, search and ask services read them through their
`Serving`, so a swap is one `replace(...)` and no service can keep a stale copy. The gate is held
shared by every search and exclusively by the swap, so no query is embedded by one model and
answered from a collection built by another. A rebuild's mirror (its shadow following every live
write) is a write hook this object holds while the rebuild runs.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from kbsearch.aio.locks import SharedExclusiveLocks
from kbsearch.chunker import MarkdownChunker
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.models import CollectionSignature
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder

__all__ = ["Served", "Serving", "Target", "WriteMirror"]

# The one key of the gate.
_SERVING = "serving"


class WriteMirror(Protocol):
    """Where a rebuild's shadow collection follows every write the live one takes (services/rebuild/rebuild.py).

    Called with the document's lock still held, after the live write, so a write and the rebuild's
    copy of the same document never cross. The mirror copies what the live collection now holds
    (never the request itself, so it cannot do more than the caller was allowed to). A mirror never
    raises: what it fails to copy it remembers and copies again before the shadow is swapped in.
    """

    async def changed(self, uri: str) -> None: ...

    async def source_deleted(self, source_identifier: str) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Served:
    """One moment's parts: replaced whole, so a reader never sees half a swap."""

    store: VectorStore
    embedder: EmbeddingProvider  # the one that made the stored vectors: the collection's until a swap
    sparse: Bm25Encoder
    chunker: MarkdownChunker
    signature: CollectionSignature  # what made the stored vectors (the configured one once swapped)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """What the configured settings build: a rebuild's shadow is made by it and swaps it in."""

    embedder: EmbeddingProvider
    signature: CollectionSignature


class Serving:
    """The collection being served and what serves it; a rebuild's swap replaces them here."""

    def __init__(self, served: Served) -> None:
        self._served = served
        self._mirror: WriteMirror | None = None
        self._gate = SharedExclusiveLocks()

    @property
    def served(self) -> Served:
        return self._served

    @property
    def store(self) -> VectorStore:
        return self._served.store

    @property
    def embedder(self) -> EmbeddingProvider:
        return self._served.embedder

    @property
    def sparse(self) -> Bm25Encoder:
        return self._served.sparse

    @property
    def chunker(self) -> MarkdownChunker:
        return self._served.chunker

    @property
    def signature(self) -> CollectionSignature:
        return self._served.signature

    def shared(self) -> AbstractAsyncContextManager[None]:
        """Held by every search: a swap waits for the searches under way."""
        return self._gate.shared(_SERVING)

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        """Held by a swap: no search runs while the collection and its embedder change."""
        return self._gate.exclusive(_SERVING)

    def replace(
        self,
        *,
        store: VectorStore | None = None,
        embedder: EmbeddingProvider | None = None,
        sparse: Bm25Encoder | None = None,
        chunker: MarkdownChunker | None = None,
        signature: CollectionSignature | None = None,
    ) -> None:
        """Serve with these from now on (a swap: call holding `exclusive()`, with writes paused)."""
        now = self._served
        self._served = Served(
            store=store if store is not None else now.store,
            embedder=embedder if embedder is not None else now.embedder,
            sparse=sparse if sparse is not None else now.sparse,
            chunker=chunker if chunker is not None else now.chunker,
            signature=signature if signature is not None else now.signature,
        )

    def swap_to(self, target: Target) -> None:
        """A rebuild's swap: the configured embedder serves the rebuilt collection."""
        self.replace(embedder=target.embedder, signature=target.signature)

    @property
    def mirror(self) -> WriteMirror | None:
        """The write hook of a rebuild under way, or None."""
        return self._mirror

    def mirror_writes(self, mirror: WriteMirror | None) -> None:
        """Send every write after the live one to `mirror` (a rebuild's shadow); None: stop."""
        self._mirror = mirror
