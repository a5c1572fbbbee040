"""BM25 sparse vectors from Qdrant Edge's built-in encoder, with a pinned configuration.

Term ids: the text is lowercased and split into word tokens; English stopwords are dropped; each
token is Snowball-stemmed (English); the id of a stem is the absolute value of its signed 32-bit
MurmurHash3 (seed 0, UTF-8 bytes), i.e. `abs(mmh3.hash(stem))`. That is the scheme of fastembed's
`Qdrant/bm25` and of Qdrant's server-side bm25, so the ids agree with theirs.

Weights: a document term gets the BM25 term-frequency part, tf*(k+1) / (tf + k*(1-b+b*len/avg_len))
with k=1.2, b=0.75, avg_len=256; a query term gets 1.0. IDF is left to the store (Qdrant's IDF
modifier), so it stays right as documents come and go.

Any change to this configuration or to the qdrant-edge-py version changes the vectors: bump
`Bm25Encoder.name`, which is part of the collection signature, so a mismatch forces a re-index.
"""

from __future__ import annotations

from collections.abc import Sequence

import qdrant_edge

from kbsearch.models import SparseVector


class Bm25Encoder:
    """Encodes chunk texts and queries as BM25 sparse vectors (indices sorted ascending)."""

    name = "qdrant-edge-bm25-en-v1"

    def __init__(self) -> None:
        # Every option is spelled out, so a changed default in a qdrant-edge upgrade cannot
        # silently change term ids.
        config = qdrant_edge.Bm25Config(
            k=1.2,
            b=0.75,
            avg_len=256.0,
            tokenizer=qdrant_edge.TokenizerType.Word,
            language="english",
            lowercase=True,
            ascii_folding=False,
            stopwords=qdrant_edge.Language.English,
            stemmer=qdrant_edge.SnowballParams(qdrant_edge.SnowballLanguage.English),
        )
        self._model = qdrant_edge.Bm25(config)

    def encode_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        return [_convert(self._model.embed_document(text)) for text in texts]

    def encode_query(self, text: str) -> SparseVector:
        """One weight-1.0 term per distinct stem; empty when the query has only stopwords."""
        return _convert(self._model.embed_query(text))


def _convert(vector: qdrant_edge.SparseVector) -> SparseVector:
    pairs = sorted(zip(vector.indices, vector.values, strict=True))
    return SparseVector(indices=[i for i, _ in pairs], values=[v for _, v in pairs])
