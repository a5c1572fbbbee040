"""A bounded, thread-safe LRU cache of vectors in front of any embedding provider."""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence

from kbsearch.embedders.base import EmbeddingProvider

_Key = tuple[str, str, str, str, bytes]
# The partition of a plain embed_documents call (benches, tests); the service always names one.
SHARED = ""


class CachedEmbedder(EmbeddingProvider):
    """Answers repeated texts from memory; sends only the misses to `inner`, in one call.

    Keys are (partition, provider, model, backend, sha256 of the text), so a model change never
    serves old vectors, and a text one partition (a source's writes, a caller's queries) embedded
    is a miss for every other: a hit is faster, and that time must not tell one tenant what
    another wrote or asked (see docs/operations/security-guarantees.md).
    Vectors are kept as float32 arrays (4 bytes a number, about 1.5 KiB per 384-dim vector, 6 KiB
    per 1536-dim one) and every result, hit or miss, is returned at that precision, so a text
    always gets the very same vector. The lock is not held while `inner` works: two threads
    missing the same text may both embed it, which is harmless.

    `hits` counts texts answered from the cache (a repeat within one call included), `misses`
    texts sent to `inner`.
    """

    def __init__(self, inner: EmbeddingProvider, max_entries: int):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1; do not wrap to disable caching")
        self.inner = inner
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[_Key, array[float]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def provider(self) -> str:  # type: ignore[override]
        return self.inner.provider

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.inner.model

    @property
    def dimensions(self) -> int:  # type: ignore[override]
        return self.inner.dimensions

    @property
    def backend(self) -> str | None:  # type: ignore[override]
        return self.inner.backend

    @property
    def query_prefix(self) -> str:  # type: ignore[override]
        return self.inner.query_prefix

    @property
    def turn_texts(self) -> int:  # type: ignore[override]
        return self.inner.turn_texts

    def load(self) -> None:
        self.inner.load()

    def __len__(self) -> int:
        return len(self._entries)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_keyed([(SHARED, text) for text in texts])

    def embed_query_lane(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_keyed([(SHARED, text) for text in texts], query_lane=True)

    def partition(self, key: str) -> EmbeddingProvider:
        return _Partition(self, key)

    def embed_keyed(self, items: Sequence[tuple[str, str]], *, query_lane: bool = False) -> list[list[float]]:
        """The lane decides only how the misses are embedded: both lanes share the same entries."""
        model = (self.inner.provider, self.inner.model, self.inner.backend or "")
        keys = [
            (partition, *model, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
            for partition, text in items
        ]
        texts = [text for _, text in items]
        found: dict[_Key, array[float]] = {}
        missing: dict[_Key, str] = {}  # insertion-ordered, one entry per distinct missing text
        with self._lock:
            for key, text in zip(keys, texts, strict=True):
                vector = self._entries.get(key)
                if vector is not None:
                    self._entries.move_to_end(key)
                    found[key] = vector
                elif key not in missing:
                    missing[key] = text
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)

        if missing:
            embed = self.inner.embed_query_lane if query_lane else self.inner.embed_documents
            fresh = embed(list(missing.values()))
            if len(fresh) != len(missing):
                name = type(self.inner).__name__
                raise RuntimeError(f"{name} returned {len(fresh)} vectors for {len(missing)} texts")
            with self._lock:
                for key, floats in zip(missing, fresh, strict=True):
                    packed = array("f", floats)
                    found[key] = packed
                    self._entries[key] = packed
                    self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return [found[key].tolist() for key in keys]


class _Partition(EmbeddingProvider):
    """One partition's view of a CachedEmbedder: the same entries, keyed apart from every other partition's."""

    def __init__(self, cache: CachedEmbedder, key: str) -> None:
        self.cache = cache
        self.key = key

    @property
    def provider(self) -> str:  # type: ignore[override]
        return self.cache.provider

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.cache.model

    @property
    def dimensions(self) -> int:  # type: ignore[override]
        return self.cache.dimensions

    @property
    def backend(self) -> str | None:  # type: ignore[override]
        return self.cache.backend

    @property
    def query_prefix(self) -> str:  # type: ignore[override]
        return self.cache.query_prefix

    @property
    def turn_texts(self) -> int:  # type: ignore[override]
        return self.cache.turn_texts

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.cache.embed_keyed([(self.key, text) for text in texts])

    def embed_query_lane(self, texts: Sequence[str]) -> list[list[float]]:
        return self.cache.embed_keyed([(self.key, text) for text in texts], query_lane=True)
