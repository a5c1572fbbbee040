"""The offline answerer run on hand-made hits, as ask streams it: for the answers' tests."""

from __future__ import annotations

from kbsearch.models import SearchHit
from kbsearch.services.answers.citations import CitationFilter, RetrievalLedger
from kbsearch.services.answers.extractive import Extract, answer_pieces, extract
from tests.support.hashing import HashingEmbedder


def hit(n: int, content: str, uri: str | None = None) -> SearchHit:
    return SearchHit(
        id=f"chunk-{n}",
        score=1.0,
        uri=uri or f"https://git.example/docs/{n}.md",
        chunk_index=0,
        total_chunks=1,
        content=content,
        title="Argo CD docs",
        headings=[],
        metadata={},
        source_identifier="docs",
    )


async def answer(question: str, *chunks: str, max_sentences: int = 3) -> tuple[str, list[Extract]]:
    """The answer text as ask streams it (markers verified), and the passages chosen."""
    ledger = RetrievalLedger()
    ledger.add(hit(n, content) for n, content in enumerate(chunks, start=1))
    extracts = await extract(
        question, ledger, HashingEmbedder(dimensions=1024), max_sentences=max_sentences, min_similarity=-1.0
    )
    citations = CitationFilter(lambda n: n in ledger)
    for text, verbatim in answer_pieces(extracts):
        citations.verbatim(text) if verbatim else citations.feed(text)
    citations.finish()
    return citations.text, extracts
