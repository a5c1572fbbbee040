"""Generated documents against the per-document budget (issue 37, findings 3 and 6).

- What the budget lets through is stored within its stated bound: every chunk's payload copies the
  document's title, tags and heading path, and all of it together with the chunks' text is at
  most `max_chunk_chars`; front matter names at most `max_tags` tags of `max_tag_chars` in all.
  A refusal names a limit the document really passes, and what is accepted is exactly what the
  chunker makes in this process (texts, offsets, headings).
- Chunking ends within its CPU deadline, and that CPU is not the service's: the calling process
  spends a small part of the deadline while a pathological document is chunked to its end.
"""

from __future__ import annotations

import asyncio
import time

from hypothesis import given
from hypothesis import strategies as st

from kbsearch.chunker import MarkdownChunker
from kbsearch.errors import DocumentTooComplexError
from kbsearch.models import ChunkPoint, ParsedDocument, SparseVector
from kbsearch.services.documents.budget import DocumentBudget, DocumentWork
from kbsearch.store.base import CONTENT, HEADINGS, TAGS, TITLE
from kbsearch.store.payloads import chunk_payload
from tests.support.properties import properties, within

CHUNKER = MarkdownChunker(200, 400)
TAG = st.text(st.sampled_from("abcdefghij-_"), min_size=1, max_size=60)


@st.composite
def documents(draw: st.DrawFn) -> str:
    title = draw(st.sampled_from(["", "Short", "T" * 500, "L" * 3000]))
    tags = draw(st.lists(TAG, max_size=150, unique=True))
    front = (
        "---\n" + (f"title: {title}\n" if title else "") + (f"tags: [{', '.join(tags)}]\n" if tags else "") + "---\n"
    )
    sections = []
    for n in range(draw(st.integers(1, 40))):
        depth = draw(st.integers(1, 6))
        heading = draw(st.sampled_from(["Setup", "A heading of some length " * 4, "x" * 200]))
        sections.append("#" * depth + f" {heading} {n}\n\n" + f"word{n} text " * draw(st.integers(1, 60)))
    return (front if draw(st.booleans()) else "") + "\n\n".join(sections)


def stored_copies(parsed: ParsedDocument) -> int:
    """Characters each chunk's payload stores of its text and of what it carries, over all chunks."""
    total = 0
    for chunk in parsed.chunks:
        point = ChunkPoint("u", "s", chunk.index, len(parsed.chunks), chunk.text, "h", parsed.title, parsed.tags,
                           chunk.headings, [0.0], SparseVector([], []))  # fmt: skip
        payload = chunk_payload(point)
        total += len(payload[CONTENT]) + len(payload[TITLE] or "")
        total += sum(map(len, payload[TAGS])) + sum(map(len, payload[HEADINGS]))
    return total


def chunk(budget: DocumentBudget, text: str) -> ParsedDocument | DocumentTooComplexError:
    work = DocumentWork(CHUNKER, budget=budget)
    try:
        return asyncio.run(work.chunk("team-a", text, "doc.md"))
    except DocumentTooComplexError as refusal:
        return refusal
    finally:
        if hasattr(work, "close"):
            work.close()


@properties(max_examples=40)
@given(text=documents(), max_chars=st.integers(2_000, 60_000))
def test_the_budget_never_lets_through_more_than_its_stated_copies(text, max_chars):
    budget = DocumentBudget(max_chunk_chars=max_chars)
    outcome = within(120, lambda: chunk(budget, text))
    here = CHUNKER.chunk(text, name="doc.md")
    if isinstance(outcome, ParsedDocument):
        assert stored_copies(outcome) <= budget.max_chunk_chars
        assert len(outcome.tags) <= budget.max_tags and sum(map(len, outcome.tags)) <= budget.max_tag_chars
        assert outcome == here  # the same chunks, offsets and headings as the chunker makes here
        return
    details = outcome.details
    found = {
        "tags": len(here.tags),
        "tagChars": sum(map(len, here.tags)),
        "chunks": len(here.chunks),
        "chunkChars": stored_copies(here),
    }[details["limit"]]
    assert found > details["max"] and details[details["limit"]] == found, (details, found)


PATHOLOGICAL = {
    "list": "- a\n",
    "table": "| a |\n",
    "headings": "# h\n",
    "quotes": "> q\n",
    "fences": "```\nx\n```\n",
}


@properties(max_examples=12)
@given(kind=st.sampled_from(sorted(PATHOLOGICAL)), count=st.integers(20_000, 80_000))
def test_chunking_ends_within_its_deadline_and_off_the_callers_cpu(kind, count):
    text = ("| a |\n|---|\n" if kind == "table" else "") + PATHOLOGICAL[kind] * count
    budget = DocumentBudget(chunk_seconds=0.2)
    started = time.process_time()  # every thread of this process
    outcome = within(120, lambda: chunk(budget, text))
    spent = time.process_time() - started
    if isinstance(outcome, DocumentTooComplexError):
        assert outcome.details["limit"] in ("chunkSeconds", "chunks"), outcome.details
    # Whatever the document costs to chunk, the service's own process pays a small part of the deadline.
    assert spent < budget.chunk_seconds / 4, (spent, kind, count)
