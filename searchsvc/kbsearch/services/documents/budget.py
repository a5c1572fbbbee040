"""Each document's conversion and chunking: in their own pools, in turns by writer, within a budget.

A writer is a scoped token (all its writes are one writer, whatever sources its patterns match),
or, for a token that writes every source (the operator's), the team of the source: the part of
the sourceIdentifier before its first `/` (the operator's ids are `namespace/name`). So one team's
slow documents wait behind each other while another team's writes, reads and the probes go on.

The budget bounds what one document may cost: `max_chunks` chunks; `max_chunk_chars` characters
stored with its chunks in all, counting each chunk's text and the title, tags and heading path
that every chunk carries (chunk_payload stores them in each, so a 64 KB title or tag list is
64 KB per chunk); front-matter tags (`max_tags` of them, `max_tag_chars` characters in all); and
`chunk_seconds` of the chunker's CPU time (it is interrupted when they are spent, see
aio/deadline.py; CPU time, so a loaded machine does not turn a document away). Past any of them
the write is refused with 422 DOCUMENT_TOO_COMPLEX naming the limit, before anything is stored.
The request's metadata is stored once, in the document's record, never per chunk.

Chunking runs in child processes (chunk_processes.py), so a document that chunks for its whole
budget holds a child's CPU, not the service's GIL. A conversion is bounded by its child
process's limits (convert/worker.py: CONVERSION_LIMIT_EXCEEDED).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbsearch.aio.pool import WorkPool
from kbsearch.chunker import MarkdownChunker
from kbsearch.convert import ConversionError, ConversionWorker, Converted
from kbsearch.errors import DocumentTooComplexError
from kbsearch.models import ParsedDocument
from kbsearch.services.access.scope import Caller
from kbsearch.services.documents.chunk_processes import ChunkProcesses

__all__ = ["DocumentBudget", "DocumentWork", "check_budget", "writer_of"]


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
    # Real front matter names a handful of tags; each is stored with every chunk.
    max_tags: int = 100
    max_tag_chars: int = 2000


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
        self._chunker_processes = ChunkProcesses(chunker, chunk_slots)

    def close(self) -> None:
        self._chunker_processes.close()

    async def convert(self, writer: str, fmt: str, raw: bytes) -> Converted:
        if self.converter is None:
            raise ConversionError(f"this service converts no {fmt} documents", code="UNSUPPORTED_CONTENT_TYPE")
        return await self._conversions.run(writer, self.converter.convert, fmt, raw)

    async def chunk(self, writer: str, text: str, name: str) -> ParsedDocument:
        """The chunks of `text`, or DocumentTooComplexError when they pass the budget."""
        return await self._chunkings.run(writer, self._chunk_within_budget, text, name)

    def _chunk_within_budget(self, text: str, name: str) -> ParsedDocument:
        budget = self.budget
        parsed = self._chunker_processes.chunk(budget.chunk_seconds, text, name)
        if parsed is None:
            raise _too_complex(
                f"chunking used more than {budget.chunk_seconds:g} s of CPU time", "chunkSeconds", budget.chunk_seconds
            )
        check_budget(budget, parsed)
        return parsed


def check_budget(budget: DocumentBudget, parsed: ParsedDocument) -> None:
    """DocumentTooComplexError naming the first limit `parsed` passes, if any."""
    if len(parsed.tags) > budget.max_tags:
        raise _too_complex(
            f"its front matter names {len(parsed.tags)} tags; at most {budget.max_tags} are allowed",
            "tags",
            budget.max_tags,
            tags=len(parsed.tags),
        )
    tag_chars = sum(map(len, parsed.tags))
    if tag_chars > budget.max_tag_chars:
        raise _too_complex(
            f"its front-matter tags hold {tag_chars} characters; at most {budget.max_tag_chars} are allowed",
            "tagChars",
            budget.max_tag_chars,
            tagChars=tag_chars,
        )
    if len(parsed.chunks) > budget.max_chunks:
        raise _too_complex(
            f"it makes {len(parsed.chunks)} chunks; at most {budget.max_chunks} are allowed",
            "chunks",
            budget.max_chunks,
            chunks=len(parsed.chunks),
        )
    # Each chunk's payload stores its text, its heading path and the document's title and tags.
    carried = len(parsed.title or "") + tag_chars
    chars = sum(len(chunk.text) + carried + sum(map(len, chunk.headings)) for chunk in parsed.chunks)
    if chars > budget.max_chunk_chars:
        raise _too_complex(
            f"its chunks hold {chars} characters with the title, tags and headings each carries; at most "
            f"{budget.max_chunk_chars} are allowed",
            "chunkChars",
            budget.max_chunk_chars,
            chunkChars=chars,
        )
