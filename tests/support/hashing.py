"""A deterministic hashing embedder: for tests only, never reachable from settings."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from kbsearch.embedders.base import EmbeddingProvider

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder(EmbeddingProvider):
    """Bag of hashed words, L2-normalised: texts sharing words get similar vectors."""

    provider = "hashing"

    def __init__(self, dimensions: int = 64, model: str = "hashing-v1"):
        self.dimensions = dimensions
        self.model = model
        self.calls: list[int] = []  # batch sizes, so tests can check batching

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0:
            vector[0] = 1.0
            return vector
        return [v / norm for v in vector]
