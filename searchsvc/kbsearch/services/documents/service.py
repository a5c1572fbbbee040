"""Document writes: the claim-and-commit protocol and deletes (prepared in document_prep; reads: document_reads)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from kbsearch.aio.locks import KeyedLocks, SharedExclusiveLocks
from kbsearch.aio.runtime import in_thread, run_to_completion, store_call
from kbsearch.commands import DocumentWrite, DocumentWritten, WriteStatus
from kbsearch.errors import (
    ConflictError,
    OverloadedError,
    WriteConflictError,
)
from kbsearch.metrics import Metrics
from kbsearch.models import (
    INCOMPLETE,
    DocumentRecord,
    StoredBody,
)
from kbsearch.services.access.scope import Caller, SourceCatalog, require_writer
from kbsearch.services.documents.budget import DocumentWork, writer_of
from kbsearch.services.documents.prep import DocumentPreparer, Prepared, Source
from kbsearch.services.documents.versions import detect_version
from kbsearch.services.serving import Serving
from kbsearch.settings import DocumentSettings
from kbsearch.store.base import VectorStore

log = logging.getLogger(__name__)

# Upserts go to the store in slices so a 1 MiB document never builds one giant request.
UPSERT_BATCH = 256

# Attempts to claim a record whose version moved between our read and our conditional write
# (another replica wrote it); past them the client gets a retryable 409 WRITE_CONFLICT.
CLAIM_ATTEMPTS = 3

__all__ = ["INCOMPLETE", "DocumentService"]


def canonical(metadata: Mapping[str, Any]) -> str:
    """Metadata as typed JSON: `true` and `1`, or `1` and `1.0`, are different values here."""
    return json.dumps(metadata, sort_keys=True)


def next_version(previous: DocumentRecord | None) -> int:
    """A version above the record's, and above any a deleted record of the URI had.

    Microseconds since the epoch keep versions rising across a delete and re-create, so a
    chunk left by an older write never outranks a newer one.
    """
    floor = time.time_ns() // 1000
    return max(floor, (previous.version if previous is not None else 0) + 1)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# The key of the gate every write holds shared, and a swap of the collection exclusively.
_ALL_WRITES = "*"


class _Superseded(Exception):
    """Another writer claimed the record while this write ran; it owns the document now."""


class DocumentService:
    """Writes and deletes of documents.

    A write touches the store in this order, so a process killed at any point leaves no chunk
    without a record and no record that claims chunks it does not have:

    1. claim: the record, marked incomplete (checksum INCOMPLETE, 0 chunks) with a new version,
       written only over the version read before (a conditional write);
    2. the chunks, in batches, tagged with that version;
    3. the chunks of older versions: the stale tail of the previous content;
    4. commit: the final record, written only if the claim is still ours.

    Start-up repair (services/documents/repair.py) empties any record still marked incomplete. In one
    process the per-URI locks serialise writers; across replicas on one Qdrant server the
    conditional writes do: the later claim wins, a chunk is never overwritten by an older
    version, and the loser removes its own chunks and answers 409 WRITE_CONFLICT.
    """

    def __init__(
        self,
        *,
        serving: Serving,
        metrics: Metrics,
        catalog: SourceCatalog,
        work: DocumentWork,
        prep: DocumentPreparer,
        settings: DocumentSettings,
    ) -> None:
        self.serving = serving  # the store, embedder and chunker; a rebuild's mirror while one runs
        self.catalog = catalog
        self.metrics = metrics
        # Conversions and chunking: off the shared thread pool, in turns by writer, within a budget.
        self.work = work
        self.settings = settings  # the queue's bounds; the sizes are the preparer's
        self._pending_by_writer: dict[str, int] = {}
        self._uri_locks = KeyedLocks()
        self._source_gates = SharedExclusiveLocks()
        self._pending = 0
        self._prep = prep  # checks, converts, chunks and embeds what a write stores
        self._writes = SharedExclusiveLocks()

    @property
    def store(self) -> VectorStore:
        return self.serving.store

    @contextlib.asynccontextmanager
    async def holding(self, uri: str, source_identifier: str | None) -> AsyncIterator[None]:
        """Hold back writes to `uri` (and bulk deletes of its source) while a rebuild copies it."""
        async with self._writes.shared(_ALL_WRITES), self._uri_locks.hold(uri), self._source_gate(source_identifier):
            yield

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """No write runs while this is held (waits for those under way): the moment of a swap."""
        async with self._writes.exclusive(_ALL_WRITES):
            yield

    async def put(self, request: DocumentWrite, caller: Caller) -> DocumentWritten:
        require_writer(caller, request.source_identifier)
        document = self._prep.source(request)
        writer = writer_of(caller, request.source_identifier)
        if self._pending >= self.settings.max_pending_writes:
            raise OverloadedError(
                f"{self._pending} writes are already queued; retry later",
                details={"retryAfterSeconds": 1},
            )
        mine = self._pending_by_writer.get(writer, 0)
        if mine >= self.settings.max_pending_writes_per_writer:
            # One team's backlog must leave room in the queue for the others' writes.
            raise OverloadedError(
                f"{mine} writes of this writer are already queued; retry later",
                code="TOO_MANY_WRITES",
                details={"retryAfterSeconds": 1, "limit": self.settings.max_pending_writes_per_writer},
            )
        await self._require_writable()
        self._pending += 1
        self._pending_by_writer[writer] = self._pending_by_writer.get(writer, 0) + 1
        try:
            source = request.source_identifier
            # The shared source gate keeps a bulk delete of this source from running between
            # our chunk writes and our manifest write.
            async with self.holding(request.uri, source):
                response = await self._put_locked(request, document, caller, writer)
                mirror = self.serving.mirror
                if mirror is not None and response.status != "unchanged":
                    await run_to_completion(mirror.changed(request.uri))
        finally:
            self._pending -= 1
            self._pending_by_writer[writer] -= 1
            if not self._pending_by_writer[writer]:
                del self._pending_by_writer[writer]
        self.catalog.wrote(request.source_identifier)
        self.metrics.documents_written.labels(response.status).inc()
        self.metrics.chunks_embedded.inc(response.chunks_embedded)
        return response

    async def _require_writable(self) -> None:
        """Refuse a write before any work when the store says it cannot take one (503)."""
        problem = await in_thread(self.store.write_problem)
        if problem is not None:
            raise problem

    def _source_gate(self, source: str | None) -> contextlib.AbstractAsyncContextManager[None]:
        return self._source_gates.shared(source) if source else contextlib.nullcontext()

    async def _put_locked(self, request: DocumentWrite, source: Source, caller: Caller, writer: str) -> DocumentWritten:
        checksum = source.checksum
        prepared: Prepared | None = None
        for _ in range(CLAIM_ATTEMPTS):
            existing = await store_call(self.store.get_document, request.uri)
            owner = existing.source_identifier if existing is not None else None
            if existing is not None and not caller.scope.allows(owner):
                # A PUT over a document replaces it: the caller's scope must cover the document
                # it replaces exactly as a DELETE's would (a sourceless one needs `*`).
                raise ConflictError(
                    f"document {request.uri!r} belongs to another source", code="URI_OWNED_BY_OTHER_SOURCE"
                )
            if owner is not None and owner != request.source_identifier:
                # Two sources mirroring the same files would otherwise overwrite and delete each
                # other's documents; the first owner keeps the URI until it lets go. The answer
                # never names the owner, whoever asks: the operator writes with a token that sees
                # every source and copies this text into the other team's status and events.
                raise ConflictError(
                    f"document {request.uri!r} belongs to another source; it must be deleted there first",
                    code="URI_OWNED_BY_OTHER_SOURCE",
                )
            if (
                existing is not None and existing.checksum == checksum and existing.chunker == source.fingerprint
            ):  # the same content: at most the metadata changed
                if canonical(existing.metadata) == canonical(request.metadata):
                    return DocumentWritten(
                        uri=request.uri,
                        status="unchanged",
                        checksum=checksum,
                        chunks=existing.chunks,
                        chunks_embedded=0,
                    )
                # A new version or page key lives on every chunk too: those are written again (vectors reused).
                located = detect_version(request.uri, request.metadata)
                same_page = detect_version(request.uri, existing.metadata) == located
                if owner == request.source_identifier and same_page:
                    # Only the metadata changed, and it lives on the record alone: one conditional write.
                    record = dataclasses.replace(
                        existing, metadata=request.metadata, ingested_at=now(), write_id=uuid.uuid4().hex
                    )
                    if await run_to_completion(self._write_metadata(record, existing.version)):
                        return self._response(request, "updated", record, 0)
                    continue
            if prepared is None:
                prepared = await self._prep.prepare(request, source, writer, caller)
            outcome = await run_to_completion(self._write(request, prepared, existing))
            if outcome is not None:
                return self._response(request, "created" if existing is None else "updated", outcome, prepared.embedded)
        raise WriteConflictError(
            f"document {request.uri!r} kept changing under this write (another replica is writing it); retry",
        )

    @staticmethod
    def _response(
        request: DocumentWrite, status: WriteStatus, record: DocumentRecord, embedded: int
    ) -> DocumentWritten:
        return DocumentWritten(
            uri=request.uri, status=status, checksum=record.checksum, chunks=record.chunks, chunks_embedded=embedded
        )

    async def _write(
        self, request: DocumentWrite, prepared: Prepared, existing: DocumentRecord | None
    ) -> DocumentRecord | None:
        """The store writes of one PUT; the final record, or None when the claim was lost at once."""
        uri, total = request.uri, len(prepared.points)
        claim = DocumentRecord(
            uri=uri,
            source_identifier=request.source_identifier,
            checksum=INCOMPLETE,
            chunks=0,
            metadata=request.metadata,
            title=prepared.title,
            ingested_at=now(),
            chunker=prepared.chunker,
            version=next_version(existing),
            write_id=uuid.uuid4().hex,
        )
        final = dataclasses.replace(claim, checksum=prepared.checksum, chunks=total, ingested_at=now())
        try:
            # Inside the try: a claim that landed but whose read-back failed is cleaned up too.
            if not await store_call(self.store.write_document, claim, existing.version if existing else None):
                return None  # another writer moved the record first; nothing of ours is stored
            log.debug("write claimed", extra={"uri": uri, "version": claim.version, "total": total})
            for point in prepared.points:
                point.version = claim.version
            for start in range(0, total, UPSERT_BATCH):
                if start and not await self._still_ours(claim):
                    raise _Superseded
                await store_call(self.store.upsert_chunks, prepared.points[start : start + UPSERT_BATCH])
                log.debug(
                    "chunks written", extra={"uri": uri, "written": min(start + UPSERT_BATCH, total), "total": total}
                )
            # The text as written, beside its chunks: reads show it, a rebuild re-chunks it. Before
            # the commit, so a committed record always has its body.
            body = StoredBody(
                uri=uri,
                source_identifier=request.source_identifier,
                checksum=prepared.checksum,
                version=claim.version,
                content=request.content,
                body=prepared.body,
                content_type=request.content_type,
                content_encoding=request.content_encoding,
            )
            await store_call(self.store.put_body, body)
            # Everything older than this write: the previous content's tail, or leftovers.
            await store_call(self.store.delete_chunks, uri, None, claim.version - 1)
            if not await store_call(self.store.write_document, final, claim.version):
                raise _Superseded
            if await store_call(self.store.count_chunks, uri, claim.version) != total:
                # Only a bulk delete of the source, from another replica, removes chunks
                # without claiming the record first.
                raise _Superseded
        except _Superseded:
            await self._drop_own_chunks(claim)
            raise WriteConflictError(
                f"a concurrent write or delete of {uri!r} replaced this one; retry if this content must win"
            ) from None
        except BaseException:
            await self._abandon(claim, existing is None)
            raise
        return final

    async def _write_metadata(self, record: DocumentRecord, expected_version: int) -> bool:
        """A record-only write (the chunks stay); False when another writer moved the record first."""
        if not await store_call(self.store.write_document, record, expected_version):
            return False
        if await store_call(self.store.count_chunks, record.uri) != record.chunks:
            # A conditional write recreates a record that a replica deleted meanwhile; without
            # its chunks it must not look complete.
            await self._abandon(dataclasses.replace(record, checksum=INCOMPLETE, chunks=0), False)
            raise WriteConflictError(f"document {record.uri!r} was deleted while this write ran; retry")
        return True

    async def _still_ours(self, claim: DocumentRecord) -> bool:
        stored = await store_call(self.store.get_document, claim.uri)
        return stored is not None and stored.write_id == claim.write_id

    async def _drop_own_chunks(self, claim: DocumentRecord) -> None:
        try:
            await store_call(self.store.delete_chunks, claim.uri, claim.version, claim.version)
            # A record we resurrected over a concurrent delete is ours to remove as well.
            await store_call(self.store.delete_record, claim.uri, claim.version)
        except Exception:
            log.warning("could not remove the chunks of a superseded write", extra={"uri": claim.uri}, exc_info=True)

    async def _abandon(self, claim: DocumentRecord, new: bool) -> None:
        """After a failed write, leave no chunk a reader could trust (best effort: the store may be down).

        A new document disappears again. An existing one keeps its record, incomplete with no
        chunks, so the listing shows it stale and the next PUT, even of the old content,
        rewrites it. If the store is unreachable now, start-up repair finishes the job.
        """
        try:
            emptied = dataclasses.replace(claim, write_id=uuid.uuid4().hex)
            if await store_call(self.store.write_document, emptied, claim.version):
                await store_call(self.store.delete_chunks, claim.uri, None, claim.version)
                if new:
                    await store_call(self.store.delete_record, claim.uri, claim.version)
            else:
                await self._drop_own_chunks(claim)
        except Exception:  # the original failure is what the client must see
            log.warning("could not mark an interrupted write", extra={"uri": claim.uri}, exc_info=True)

    async def delete(self, uri: str, source_identifier: str | None, caller: Caller) -> int:
        """Delete one document; with a source given, only if the document belongs to it.

        A document of a source the caller may not write is answered like an absent one (0).
        """
        require_writer(caller, source_identifier, check_source=source_identifier is not None)
        await self._require_writable()
        async with self._writes.shared(_ALL_WRITES), self._uri_locks.hold(uri):
            deleted = await run_to_completion(self._delete_locked(uri, source_identifier, caller))
            mirror = self.serving.mirror
            if mirror is not None:
                await run_to_completion(mirror.changed(uri))
        self.metrics.chunks_deleted.inc(deleted)
        return deleted

    async def _delete_locked(self, uri: str, source_identifier: str | None, caller: Caller) -> int:
        """Mark the record incomplete, then delete the chunks, then the record."""
        for _ in range(CLAIM_ATTEMPTS):
            existing = await store_call(self.store.get_document, uri)
            if source_identifier is not None and (existing is None or existing.source_identifier != source_identifier):
                return 0
            if existing is not None and not caller.scope.allows(existing.source_identifier):
                return 0
            if existing is None:
                if not caller.scope.unrestricted:
                    return 0  # stray chunks carry no owner a scoped caller could be checked against
                # No record: only chunks a killed process may have left, which no reader trusts.
                return await store_call(self.store.delete_chunks, uri)
            claim = dataclasses.replace(
                existing, checksum=INCOMPLETE, chunks=0, version=next_version(existing), write_id=uuid.uuid4().hex
            )
            if not await store_call(self.store.write_document, claim, existing.version):
                continue
            deleted = await store_call(self.store.delete_chunks, uri, None, claim.version)
            await store_call(self.store.delete_body, uri, claim.version)
            await store_call(self.store.delete_record, uri, claim.version)
            return deleted
        raise WriteConflictError(
            f"document {uri!r} kept changing under this delete (another replica is writing it); retry"
        )

    async def delete_source(self, source_identifier: str, caller: Caller) -> tuple[int, int]:
        require_writer(caller, source_identifier)
        await self._require_writable()
        async with self._writes.shared(_ALL_WRITES), self._source_gates.exclusive(source_identifier):
            documents, chunks = await run_to_completion(store_call(self.store.delete_source, source_identifier))
            mirror = self.serving.mirror
            if mirror is not None:
                await run_to_completion(mirror.source_deleted(source_identifier))
        self.metrics.chunks_deleted.inc(chunks)
        log.info("source deleted", extra={"sourceIdentifier": source_identifier, "documents": documents})
        return documents, chunks
