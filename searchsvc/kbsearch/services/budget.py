"""Each document's conversion and chunking: in their own pools, in turns by writer, within a budget.

A writer is a scoped token (all its writes are one writer, whatever sources its patterns match),
or, for a token that writes every source (the operator's), the team of the source: the part of
the sourceIdentifier before its first `/` (the operator's ids are `namespace/name`). So one team's
slow documents wait behind each other while another team's writes, reads and the probes go on.

The budget bounds what one document may cost: `max_chunks` chunks, `max_chunk_chars` characters
of chunk text in all, and `chunk_seconds` of the chunker's CPU time (it is interrupted when they
are spent, see aio/deadline.py; CPU time, so a loaded machine does not turn a document away).
Past any of them the write is refused with 422 DOCUMENT_TOO_COMPLEX naming the limit, before
anything is stored. A conversion is bounded by its child process's limits
(convert/worker.py: CONVERSION_LIMIT_EXCEEDED).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbsearch.aio.deadline import DeadlineExceeded, call_with_deadline
from kbsearch.aio.pool import WorkPool
from kbsearch.chunker import MarkdownChunker
from kbsearch.convert import ConversionError, ConversionWorker, Converted
from kbsearch.errors import DocumentTooComplexError
from kbsearch.models import ParsedDocument
from kbsearch.services.access.scope import Caller

__all__ = ["DocumentBudget", "DocumentWork", "writer_of"]


def writer_of(caller: Caller, source_identifier: str | None) -> str:
    """Whose turn a document's work takes: the scoped caller's, or the source's team for an all-sources one."""
    if caller.scope.unrestricted and source_identifier:
        return "team\0" + source_identifier.split("/", 1)[0]
    return "caller\0" + caller.name


@dataclass(frozen=True, slots=True)
class DocumentBudget:
    max_chunks: int = 5000
    max_chunk_chars: int = 4 * 1_048_576
    chunk_seconds: float = 30.0


def _too_complex(message: str, limit: str, maximum: float, **found: Any) -> DocumentTooComplexError:
    return DocumentTooComplexError(
        f"{message}; the document is too complex to index: split it or simplify it",
        details={"limit": limit, "max": maximum, **found},
    )


def _half(slots: int) -> int:
    return max(1, slots // 2)


class DocumentWork:
    """Converts and chunks documents in bounded pools shared fairly between writers."""

    def __init__(
        self,
        chunker: MarkdownChunker,
        converter: ConversionWorker | None = None,
        *,
        budget: DocumentBudget | None = None,
        convert_slots: int = 2,
        chunk_slots: int = 2,
        share: int = 0,
        per_writer: int = 1 << 30,
    ) -> None:
        self.chunker = chunker
        self.converter = converter
        self.budget = budget or DocumentBudget()
        # The worker runs at most its own concurrency; more slots here would only block threads.
        self._conversions = WorkPool(convert_slots, share or _half(convert_slots), per_writer)
        self._chunkings = WorkPool(chunk_slots, share or _half(chunk_slots), per_writer)

    async def convert(self, writer: str, fmt: str, raw: bytes) -> Converted:
        if self.converter is None:
            raise ConversionError(f"this service converts no {fmt} documents", code="UNSUPPORTED_CONTENT_TYPE")
        return await self._conversions.run(writer, self.converter.convert, fmt, raw)

    async def chunk(self, writer: str, text: str, name: str) -> ParsedDocument:
        """The chunks of `text`, or DocumentTooComplexError when they pass the budget."""
        return await self._chunkings.run(writer, self._chunk_within_budget, text, name)

    def _chunk_within_budget(self, text: str, name: str) -> ParsedDocument:
        budget = self.budget
        try:
            parsed = call_with_deadline(budget.chunk_seconds, lambda: self.chunker.chunk(text, name=name))
        except DeadlineExceeded:
            raise _too_complex(
                f"chunking used more than {budget.chunk_seconds:g} s of CPU time", "chunkSeconds", budget.chunk_seconds
            ) from None
        if len(parsed.chunks) > budget.max_chunks:
            raise _too_complex(
                f"it makes {len(parsed.chunks)} chunks; at most {budget.max_chunks} are allowed",
                "chunks",
                budget.max_chunks,
                chunks=len(parsed.chunks),
            )
        chars = sum(len(chunk.text) for chunk in parsed.chunks)
        if chars > budget.max_chunk_chars:
            raise _too_complex(
                f"its chunks hold {chars} characters; at most {budget.max_chunk_chars} are allowed",
                "chunkChars",
                budget.max_chunk_chars,
                chunkChars=chars,
            )
        return parsed
