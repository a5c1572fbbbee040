"""Document writes and listings: idempotent upsert, chunk-vector reuse, deletes."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import binascii
import hashlib
import json
import logging
import uuid
from datetime import UTC, datetime

from kbsearch.chunker import MarkdownChunker
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import ConflictError, DocumentTooLargeError, InvalidRequestError, OverloadedError
from kbsearch.metrics import Metrics
from kbsearch.models import ChunkPoint, DocumentRecord, ParsedDocument, SourceStats
from kbsearch.schemas import PutDocumentRequest, PutDocumentResponse
from kbsearch.services.batching import EmbeddingBatcher
from kbsearch.services.locks import KeyedLocks, SharedExclusiveLocks
from kbsearch.services.runtime import in_thread, store_call
from kbsearch.sparse import Bm25Encoder
from kbsearch.store.base import VectorStore

log = logging.getLogger(__name__)

# Upserts go to the store in slices so a 1 MiB document never builds one giant request.
UPSERT_BATCH = 256


# The checksum an interrupted write leaves on a document: it matches no content.
INCOMPLETE = "sha256:incomplete"


def canonical(metadata: dict) -> str:
    """Metadata as typed JSON: `true` and `1`, or `1` and `1.0`, are different values here."""
    return json.dumps(metadata, sort_keys=True)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class DocumentService:
    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: EmbeddingProvider,
        sparse: Bm25Encoder,
        chunker: MarkdownChunker,
        metrics: Metrics,
        max_document_bytes: int,
        max_pending_writes: int,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.sparse = sparse
        self.chunker = chunker
        self.metrics = metrics
        self.max_document_bytes = max_document_bytes
        self.max_pending_writes = max_pending_writes
        self._uri_locks = KeyedLocks()
        self._source_gates = SharedExclusiveLocks()
        self._pending = 0
        self._batcher = EmbeddingBatcher(embedder)

    async def put(self, request: PutDocumentRequest) -> PutDocumentResponse:
        size = len(request.content.encode("utf-8"))
        if size > self.max_document_bytes:
            raise DocumentTooLargeError(
                f"content is {size} bytes; the limit is {self.max_document_bytes} bytes",
                details={"bytes": size, "limit": self.max_document_bytes},
            )
        if self._pending >= self.max_pending_writes:
            raise OverloadedError(
                f"{self._pending} writes are already queued; retry later",
                details={"retryAfterSeconds": 1},
            )
        await self._require_writable()
        self._pending += 1
        try:
            source = request.source_identifier
            # The shared source gate keeps a bulk delete of this source from running between
            # our chunk writes and our manifest write.
            async with self._uri_locks.hold(request.uri), self._source_gate(source):
                response = await self._put_locked(request)
        finally:
            self._pending -= 1
        self.metrics.documents_written.labels(response.status).inc()
        self.metrics.chunks_embedded.inc(response.chunksEmbedded)
        return response

    async def _require_writable(self) -> None:
        """Refuse a write before any work when the store says it cannot take one (503)."""
        problem = await in_thread(self.store.write_problem)
        if problem is not None:
            raise problem

    def _source_gate(self, source: str | None):
        return self._source_gates.shared(source) if source else contextlib.nullcontext()

    async def _put_locked(self, request: PutDocumentRequest) -> PutDocumentResponse:
        checksum = "sha256:" + sha256_hex(request.content)
        existing = await store_call(self.store.get_document, request.uri)
        owner = existing.source_identifier if existing is not None else None
        if owner is not None and owner != request.source_identifier:
            # Two sources mirroring the same files would otherwise overwrite and delete each
            # other's documents; the first owner keeps the URI until it lets go.
            raise ConflictError(
                f"document {request.uri!r} belongs to source {owner!r}; delete it from that source first",
                code="URI_OWNED_BY_OTHER_SOURCE",
                details={"owner": owner},
            )
        if (
            existing is not None
            and existing.checksum == checksum
            and canonical(existing.metadata) == canonical(request.metadata)
            and existing.chunker == self.chunker.fingerprint
        ):
            return PutDocumentResponse(
                uri=request.uri, status="unchanged", checksum=checksum, chunks=existing.chunks, chunksEmbedded=0
            )

        parsed: ParsedDocument = await in_thread(self.chunker.chunk, request.content)
        hashes = [sha256_hex(chunk.embed_text) for chunk in parsed.chunks]
        dense, embedded = await self._dense_vectors(request.uri, parsed, hashes, existing is not None)
        sparse = await in_thread(self.sparse.encode_documents, [c.embed_text for c in parsed.chunks])
        total = len(parsed.chunks)
        points = [
            ChunkPoint(
                uri=request.uri,
                source_identifier=request.source_identifier,
                chunk_index=chunk.index,
                total_chunks=total,
                text=chunk.text,
                text_hash=hashes[i],
                title=parsed.title,
                tags=parsed.tags,
                headings=chunk.headings,
                metadata=request.metadata,
                dense=dense[i],
                sparse=sparse[i],
            )
            for i, chunk in enumerate(parsed.chunks)
        ]
        record = DocumentRecord(
            uri=request.uri,
            source_identifier=request.source_identifier,
            checksum=checksum,
            chunks=total,
            metadata=request.metadata,
            title=parsed.title,
            ingested_at=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            chunker=self.chunker.fingerprint,
        )
        try:
            # New chunks first, then the stale tail, then the manifest: a reader never sees a
            # gap, and a crash before the manifest makes the next PUT redo the work.
            for start in range(0, total, UPSERT_BATCH):
                await store_call(self.store.upsert_chunks, points[start : start + UPSERT_BATCH])
            await store_call(self.store.delete_chunks_from, request.uri, total)
            await store_call(self.store.put_document, record)
        except Exception:
            await self._abandon(request.uri, existing)
            raise
        return PutDocumentResponse(
            uri=request.uri,
            status="created" if existing is None else "updated",
            checksum=checksum,
            chunks=total,
            chunksEmbedded=embedded,
        )

    async def _abandon(self, uri: str, existing: DocumentRecord | None) -> None:
        """After a failed write, leave nothing that looks complete (best effort: the store may be down).

        A new document loses its partial chunks; an existing one keeps its old record with a
        checksum that matches no content, so the listing shows it as stale and the next PUT,
        even of the old content, rewrites it.
        """
        try:
            if existing is None:
                await store_call(self.store.delete_document, uri)
            else:
                await store_call(self.store.put_document, dataclasses.replace(existing, checksum=INCOMPLETE))
        except Exception:  # the original failure is what the client must see
            log.warning("could not mark an interrupted write", extra={"uri": uri}, exc_info=True)

    async def _dense_vectors(
        self, uri: str, parsed: ParsedDocument, hashes: list[str], may_reuse: bool
    ) -> tuple[list[list[float]], int]:
        """Vectors for every chunk: reused where the text is unchanged, embedded in one batch otherwise."""
        unique = list(dict.fromkeys(hashes))
        by_hash = await store_call(self.store.reusable_vectors, uri, unique) if may_reuse else {}
        missing = [h for h in unique if h not in by_hash]
        if missing:
            text_of = {hashes[i]: chunk.embed_text for i, chunk in enumerate(parsed.chunks)}
            vectors = await self._batcher.embed([text_of[h] for h in missing])
            by_hash.update(zip(missing, vectors, strict=True))
        return [by_hash[h] for h in hashes], len(missing)

    async def delete(self, uri: str, source_identifier: str | None = None) -> int:
        """Delete one document; with a source given, only if the document belongs to it."""
        await self._require_writable()
        async with self._uri_locks.hold(uri):
            if source_identifier is not None:
                existing = await store_call(self.store.get_document, uri)
                if existing is None or existing.source_identifier != source_identifier:
                    return 0
            deleted = await store_call(self.store.delete_document, uri)
        self.metrics.chunks_deleted.inc(deleted)
        return deleted

    async def delete_source(self, source_identifier: str) -> tuple[int, int]:
        await self._require_writable()
        async with self._source_gates.exclusive(source_identifier):
            documents, chunks = await store_call(self.store.delete_source, source_identifier)
        self.metrics.chunks_deleted.inc(chunks)
        log.info("source deleted", extra={"sourceIdentifier": source_identifier, "documents": documents})
        return documents, chunks

    async def list(
        self, *, source_identifier: str | None, uri_prefix: str | None, limit: int, cursor: str | None
    ) -> tuple[list[DocumentRecord], str | None]:
        start = decode_cursor(cursor) if cursor else None
        records, next_id = await store_call(
            lambda: self.store.list_documents(
                source_identifier=source_identifier, uri_prefix=uri_prefix, limit=limit, cursor=start
            )
        )
        return records, encode_cursor(next_id) if next_id else None

    async def sources(self) -> list[SourceStats]:
        return await store_call(self.store.list_sources)
