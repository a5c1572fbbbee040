"""Start-up repair: undo what a killed process left half-written.

A write marks its record incomplete before its first chunk (services/documents/service.py), so a
process killed mid-write leaves either an incomplete record with some chunks, or nothing. This
empties every incomplete record (its chunks go; the record stays, incomplete with 0 chunks, so
the listing shows it stale and the operator's next full reconcile sends it again) and deletes
chunks whose URI has no record at all (left by versions before this protocol).

On a Qdrant server shared by replicas, emptying a record is itself a conditional claim: a
write still running on another replica loses it and answers a retryable 409 WRITE_CONFLICT.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from kbsearch.services.documents.service import next_version
from kbsearch.store.base import VectorStore

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class RepairReport:
    emptied: list[str]  # incomplete records whose chunks were deleted
    chunks_of_incomplete: int
    orphaned: list[str]  # URIs that had chunks and no record
    orphan_chunks: int


def repair(store: VectorStore) -> RepairReport:
    """Blocking; run once after the store is opened and before requests are served."""
    # Chunks of versions above this belong to writes that started after us (other replicas).
    started = next_version(None)
    emptied: list[str] = []
    chunks_of_incomplete = 0
    for record in store.incomplete_documents():
        if record.chunks == 0 and store.count_chunks(record.uri) == 0:
            continue  # already empty: repaired before, or a delete that stopped after its chunks
        claim = dataclasses.replace(record, chunks=0, version=next_version(record), write_id=uuid.uuid4().hex)
        if store.write_document(claim, record.version):
            chunks_of_incomplete += store.delete_chunks(record.uri, None, claim.version)
            emptied.append(record.uri)

    with_chunks = store.chunk_uris()
    recorded = store.existing_records(with_chunks)
    orphaned = [uri for uri in with_chunks if uri not in recorded]
    orphan_chunks = sum(store.delete_chunks(uri, None, started) for uri in orphaned)

    report = RepairReport(emptied, chunks_of_incomplete, orphaned, orphan_chunks)
    if emptied or orphaned:
        log.warning(
            "repaired interrupted writes",
            extra={
                "incompleteDocuments": len(emptied),
                "chunksOfIncomplete": chunks_of_incomplete,
                "orphanedUris": len(orphaned),
                "orphanChunks": orphan_chunks,
                "uris": (emptied + orphaned)[:20],
            },
        )
    else:
        log.info("no interrupted writes to repair")
    return report
