"""A peer's hits re-scored by this service's own model, so every store's relevance is on one scale.

A peer's relevance is only its claim: any peer could say 1.0. Each hit's text is embedded here,
as a local chunk is (its title and heading path as the context line, chunker.embedtext), and its
cosine with the query's vector goes through the model local hits get (services/search/ranking.py, passed
in as `relevance`: Relevance.ranked), with the same features computed over the peer's answer alone: the hit's cosine,
the answer's best cosine, and its score over the answer's best score (the peer's order, clamped to
[0, 1]; a peer can claim no more than that its hits are all as good as its best). Its further
matches are a claim too: counted as none. A peer's text that is not about the query ranks like a
local one would.

Bound: the router keeps at most the search's `limit` hits of each peer (kbsearch.peers.router),
each text is cut to MAX_RESCORED_CHARS before it is embedded (MiniLM reads ~256 tokens of it), and
all of one search's peer texts go to the embedder in one call: at most peers x limit texts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from kbsearch.aio.runtime import embed_call
from kbsearch.chunker.embedtext import embed_text
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.models import SearchHit
from kbsearch.store.payloads import cosine

__all__ = ["MAX_RESCORED_CHARS", "rescored"]

MAX_RESCORED_CHARS = 8192


async def rescored(
    answers: Sequence[Sequence[SearchHit]],
    query_vector: Sequence[float],
    embedder: EmbeddingProvider,
    relevance: Callable[[list[SearchHit], list[float], list[int]], list[SearchHit]],
) -> list[list[SearchHit]]:
    """Each peer's hits with `similarity` and `relevance` this service's own, highest relevance first."""
    texts = {
        (a, i): text
        for a, answer in enumerate(answers)
        for i, hit in enumerate(answer)
        if (text := embed_text(hit.title, hit.headings, [], hit.content[:MAX_RESCORED_CHARS]))
    }
    # The query lane: a search waits on these, and must not queue behind another team's document.
    vectors = await embed_call(embedder.embed_query_lane, list(texts.values())) if texts else []
    similarity = {key: cosine(query_vector, vector) for key, vector in zip(texts, vectors, strict=True)}
    # A hit with no words to embed has no similarity: relevance 0, as a local chunk without a vector.
    out = []
    for a, answer in enumerate(answers):
        hits = [replace(hit, similarity=similarity.get((a, i))) for i, hit in enumerate(answer)]
        out.append(relevance(hits, [hit.score for hit in hits], [0] * len(hits)))
    return out
