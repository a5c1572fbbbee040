"""Reading a stored document back: its record, its chunks in order and its rebuilt text, within scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbsearch.deps import context_of
from kbsearch.models import DocumentChunk
from kbsearch.services.access.scope import Caller, SourceScope
from kbsearch.services.documents.reads import DocumentReads, join_chunks
from tests.support.service import STORE_KINDS, running_service

TEAM_A = Caller("team-a", True, SourceScope(("team-a/*",)))
TEAM_B = Caller("team-b", True, SourceScope(("team-b/*",)))
PARAGRAPHS = [f"Paragraph {i}: " + " ".join(f"word{i}x{j}" for j in range(110)) for i in range(6)]
BODY = "\n\n".join(PARAGRAPHS)


def chunk(index: int, content: str, start: int | None, end: int | None) -> DocumentChunk:
    return DocumentChunk("u", None, index, 3, content, None, [], start, end)


def test_join_cuts_the_overlap_where_offsets_are_known():
    body = "alpha beta gamma delta"
    parts = [chunk(0, body[0:10], 0, 10), chunk(1, body[6:16], 6, 16), chunk(2, body[11:], 11, len(body))]
    assert join_chunks(parts) == body


def test_join_falls_back_to_blank_lines_without_offsets_or_across_gaps():
    assert join_chunks([chunk(0, "one", None, None), chunk(1, "two", None, None)]) == "one\n\ntwo"
    assert join_chunks([chunk(0, "one", 0, 3), chunk(1, "two", 10, 13)]) == "one\n\ntwo"
    assert join_chunks([]) == ""


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_document_reads_back_in_order_without_the_overlap(store_kind: str, tmp_path: Path):
    async with running_service(
        store_kind, tmp_path, chunk_min_chars=300, chunk_max_chars=500, chunk_overlap_chars=120
    ) as client:
        body = {"uri": "doc://a", "content": BODY, "metadata": {"sourceIdentifier": "team-a/docs"}}
        assert (await client.put("/api/v1/documents", json=body)).status_code == 200
        service: DocumentReads = context_of(client.app).document_reads  # type: ignore[attr-defined]

        record = await service.document("doc://a", TEAM_A)
        assert record is not None and record.chunks > 3
        chunks = await service.chunks("doc://a", TEAM_A)
        assert [c.chunk_index for c in chunks] == list(range(record.chunks))
        assert sum(len(c.content) for c in chunks) > len(BODY)  # the chunks overlap...
        read = await service.text("doc://a", TEAM_A)
        assert read is not None and read[1] == BODY  # ...and the rebuilt text does not repeat it

        window = await service.chunks("doc://a", TEAM_A, 1, 3)
        assert [c.chunk_index for c in window] == [1, 2]
        assert await service.chunks("doc://a", TEAM_A, record.chunks, record.chunks + 5) == []


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_another_teams_document_reads_like_a_missing_one(store_kind: str, tmp_path: Path):
    async with running_service(store_kind, tmp_path) as client:
        body = {"uri": "doc://a", "content": BODY, "metadata": {"sourceIdentifier": "team-a/docs"}}
        assert (await client.put("/api/v1/documents", json=body)).status_code == 200
        service: DocumentReads = context_of(client.app).document_reads  # type: ignore[attr-defined]

        assert await service.document("doc://a", TEAM_B) is None
        assert await service.chunks("doc://a", TEAM_B) == []
        assert await service.text("doc://a", TEAM_B) is None
        assert await service.document("doc://missing", TEAM_A) is None
        assert await service.text("doc://missing", TEAM_A) is None
