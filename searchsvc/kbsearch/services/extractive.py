"""Extractive answers: the retrieved sentences most similar to the question, with no language model.

Every sentence of the retrieved chunks is embedded with the service's own embedder, in one
batch with the question, and ranked by cosine similarity to it. The answer is the best
`max_sentences` of them that reach `min_similarity`, each followed by its chunk's [n]. When none
reaches it, retrieval found nothing relevant and the answer says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.services.citations import RetrievalLedger
from kbsearch.services.runtime import embed_call
from kbsearch.services.sentences import sentences

# Bounds the embedding work of one answer: ~ a few hundred ms of MiniLM on 2 cores.
MAX_SENTENCES_PER_CHUNK = 24
MAX_CANDIDATES = 160
MAX_PER_CHUNK_IN_ANSWER = 2  # an answer from one chunk alone repeats it; prefer breadth


@dataclass(frozen=True, slots=True)
class Extract:
    n: int
    sentence: str
    similarity: float

    def cited(self) -> str:
        """The sentence with its marker before the final punctuation: "Pods restart [2]."."""
        body = self.sentence.rstrip()
        end = body[-1] if body and body[-1] in ".!?" else ""
        return f"{body[: len(body) - len(end)].rstrip()} [{self.n}]{end}"


async def extract(
    question: str,
    ledger: RetrievalLedger,
    embedder: EmbeddingProvider,
    *,
    max_sentences: int,
    min_similarity: float,
) -> list[Extract]:
    """The sentences of an extractive answer, most similar first; [] when nothing is relevant."""
    candidates: list[tuple[int, str]] = []
    seen: set[str] = set()
    for n, hit in ledger.numbered():
        for sentence in sentences(hit.content)[:MAX_SENTENCES_PER_CHUNK]:
            key = " ".join(sentence.lower().split())
            if key not in seen and len(candidates) < MAX_CANDIDATES:
                seen.add(key)
                candidates.append((n, sentence))
    if not candidates:
        return []
    vectors = np.asarray(
        await embed_call(embedder.embed_documents, [question, *(s for _, s in candidates)]), dtype=np.float32
    )
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarities = vectors[1:] @ vectors[0]
    chosen: list[Extract] = []
    per_chunk: dict[int, int] = {}
    for index in np.argsort(-similarities, kind="stable"):
        similarity = float(similarities[index])
        if similarity < min_similarity or len(chosen) == max_sentences:
            break
        n, sentence = candidates[int(index)]
        if per_chunk.get(n, 0) < MAX_PER_CHUNK_IN_ANSWER:
            per_chunk[n] = per_chunk.get(n, 0) + 1
            chosen.append(Extract(n, sentence, similarity))
    return chosen
