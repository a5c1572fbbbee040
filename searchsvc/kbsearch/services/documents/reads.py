"""Document reads: listings, records, chunks and bodies, each within the caller's scope."""

from __future__ import annotations

import base64
import binascii
import builtins
import dataclasses
import uuid
from collections.abc import Iterable

from kbsearch.aio.runtime import store_call
from kbsearch.errors import InvalidRequestError, NotFoundError
from kbsearch.models import DocumentChunk, DocumentRecord, SourceStats, SourceStatus
from kbsearch.services.access.scope import Caller, SourceCatalog, narrow
from kbsearch.services.documents.versions import detect_version
from kbsearch.services.serving import Serving
from kbsearch.store.base import VectorStore

__all__ = ["MAX_LIST_LIMIT", "DocumentPage", "DocumentReads", "SourceDocument", "SourceDocuments", "join_chunks"]

# The most records one page of a listing holds: a response stays a few hundred kilobytes at most.
MAX_LIST_LIMIT = 1000


def encode_cursor(point_id: str) -> str:
    return base64.urlsafe_b64encode(uuid.UUID(point_id).bytes).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return str(uuid.UUID(bytes=raw))
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequestError(
            "cursor is not one this service issued; start again without a cursor",
            code="INVALID_CURSOR",
        ) from exc


def _source_not_found(source_identifier: str) -> NotFoundError:
    # The same message and code for a missing source and another team's: no existence leak.
    return NotFoundError(
        f"no source {source_identifier!r} (or it is not visible to you)",
        code="SOURCE_NOT_FOUND",
        details={"sourceIdentifier": source_identifier},
    )


def join_chunks(chunks: Iterable[DocumentChunk]) -> str:
    """Chunk texts in order, without repeating the chunker's overlap.

    Where both neighbours carry offsets, the part of a chunk already covered by the previous one
    is cut; elsewhere (older chunks, or a gap such as a dropped heading-only piece) chunks are
    joined by a blank line.
    """
    parts: list[str] = []
    covered: int | None = None  # the body offset the text so far reaches
    for chunk in chunks:
        if covered is not None and chunk.start is not None and chunk.start < covered:
            parts.append(chunk.content[covered - chunk.start :])
        else:
            parts.extend(("\n\n", chunk.content) if parts else (chunk.content,))
        covered = max(covered or 0, chunk.end) if chunk.end is not None else None
    return "".join(parts)


@dataclasses.dataclass(frozen=True, slots=True)
class DocumentPage:
    """One page of a document's body: `text` is body[start:end]; the last page ends at total_chars."""

    record: DocumentRecord
    total_chars: int
    start: int
    end: int
    text: str

    @property
    def next_start(self) -> int | None:
        return self.end if self.end < self.total_chars else None


@dataclasses.dataclass(frozen=True, slots=True)
class SourceDocument:
    """One document of a source's listing: what names it, when it was last written, its docs version."""

    uri: str
    title: str | None
    ingested_at: str
    version: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SourceDocuments:
    """One page of a source's documents; `next_cursor` is None on the last page."""

    source_identifier: str
    documents: builtins.list[SourceDocument]
    next_cursor: str | None


class DocumentReads:
    """What a caller may read of the stored documents; out of scope looks like absent."""

    def __init__(self, serving: Serving, *, catalog: SourceCatalog) -> None:
        self.serving = serving
        self.catalog = catalog

    @property
    def store(self) -> VectorStore:
        return self.serving.store

    async def list(
        self, *, source_identifier: str | None, uri_prefix: str | None, limit: int, cursor: str | None, caller: Caller
    ) -> tuple[builtins.list[DocumentRecord], str | None]:
        start = decode_cursor(cursor) if cursor else None
        allowed = await caller.scope.resolve(self.catalog)
        if allowed is not None:
            allowed = narrow([source_identifier] if source_identifier else None, allowed)
            if not allowed:
                return [], None
        records, next_id = await store_call(
            lambda: self.store.list_documents(
                source_identifier=source_identifier, uri_prefix=uri_prefix, limit=limit, cursor=start, allowed=allowed
            )
        )
        return records, encode_cursor(next_id) if next_id else None

    async def source_documents(
        self, source_identifier: str, caller: Caller, *, prefix: str | None, limit: int, cursor: str | None
    ) -> SourceDocuments:
        """One page of a source's documents (those whose URI starts with `prefix`), in a stable order.

        404 SOURCE_NOT_FOUND when the source is unknown or outside the caller's scope: the two look
        alike, so another team's source names never show. Unlike `list`, which answers an empty page.
        """
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidRequestError(f"limit must be 1 to {MAX_LIST_LIMIT}, not {limit}")
        if not caller.scope.allows(source_identifier):
            raise _source_not_found(source_identifier)
        start = decode_cursor(cursor) if cursor else None
        # The scope is in the engine query too (`allowed`), not only in the check above.
        records, next_id = await store_call(
            lambda: self.store.list_documents(
                source_identifier=source_identifier,
                uri_prefix=prefix,
                limit=limit,
                cursor=start,
                allowed=[source_identifier],
            )
        )
        if not records:  # an empty page: a prefix that matches nothing, or no such source at all
            status = await store_call(self.store.source_status, source_identifier)
            if status.documents == 0 and status.sync is None:
                raise _source_not_found(source_identifier)
        documents = [
            SourceDocument(r.uri, r.title, r.ingested_at, detect_version(r.uri, r.metadata).version) for r in records
        ]
        return SourceDocuments(source_identifier, documents, encode_cursor(next_id) if next_id else None)

    async def sources(self, caller: Caller) -> builtins.list[SourceStats]:  # `list` here is the method above
        allowed = await caller.scope.resolve(self.catalog)
        if allowed == []:
            return []
        return await store_call(self.store.list_sources, allowed)

    async def source_status(self, source_identifier: str, caller: Caller) -> tuple[SourceStatus, str]:
        """One source's counts and the collection epoch; a source out of scope looks like an unknown one."""
        if caller.scope.allows(source_identifier):
            status = await store_call(self.store.source_status, source_identifier)
        else:
            status = SourceStatus(source_identifier, 0, 0, 0, None)
        return status, await store_call(self.store.collection_epoch)

    async def document(self, uri: str, caller: Caller) -> DocumentRecord | None:
        """The record of `uri`; None when absent or outside the caller's scope (the two look alike)."""
        record = await store_call(self.store.get_document, uri)
        if record is None or not caller.scope.allows(record.source_identifier):
            return None
        return record

    async def chunks(
        self, uri: str, caller: Caller, first: int = 0, last: int | None = None
    ) -> builtins.list[DocumentChunk]:
        """The stored chunks of `uri` in [first, last) in order; [] when absent or out of scope."""
        record = await self.document(uri, caller)
        if record is None:
            return []
        end = record.chunks if last is None else min(last, record.chunks)
        if end <= first:
            return []
        return await store_call(self.store.document_chunks, uri, first, end)

    async def text(self, uri: str, caller: Caller) -> tuple[DocumentRecord, str] | None:
        """The document's body as written (front matter aside); None when absent or out of scope.

        Documents written before bodies were kept have none stored: theirs is stitched from the
        chunks in order, which loses the headings the chunker dropped, until they are written again
        or rebuilt.
        """
        record = await self.document(uri, caller)
        if record is None:
            return None
        stored = await store_call(self.store.get_body, uri)
        if stored is not None and stored.checksum == record.checksum:
            return record, stored.body
        return record, join_chunks(await store_call(self.store.document_chunks, uri, 0, record.chunks))

    async def page(self, uri: str, caller: Caller, start: int, max_chars: int) -> DocumentPage | None:
        """Characters [start, start + max_chars) of the body; None when absent or out of scope."""
        if start < 0 or max_chars < 1:
            raise InvalidRequestError("start must be 0 or more and maxChars 1 or more")
        found = await self.text(uri, caller)
        if found is None:
            return None
        record, body = found
        if start > len(body):
            raise InvalidRequestError(
                f"start {start} is past the end of {uri!r} ({len(body)} characters)",
                details={"totalChars": len(body)},
            )
        end = min(start + max_chars, len(body))
        return DocumentPage(record=record, total_chars=len(body), start=start, end=end, text=body[start:end])

    async def count(self, caller: Caller) -> tuple[int, int]:
        """(documents, chunks) the caller may see."""
        allowed = await caller.scope.resolve(self.catalog)
        if allowed == []:
            return 0, 0
        return await store_call(self.store.count, allowed)
