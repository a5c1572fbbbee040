"""Vendor-neutral payload mapping shared by the store backends: records, bodies, hits, sync status, tallies.

The collection signature is in kbsearch.store.signature, the filter language in kbsearch.store.conditions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from kbsearch.models import (
    ChunkPoint,
    DocumentChunk,
    DocumentRecord,
    FailedQuestion,
    FileIssue,
    Freshness,
    JudgedQuality,
    SearchHit,
    SourceStats,
    StoredBody,
    SyncProgress,
    SyncStatus,
)
from kbsearch.store.base import (
    BODY,
    CELL,
    CHAR_END,
    CHAR_START,
    CHECKSUM,
    CHUNK_INDEX,
    CHUNKER,
    CHUNKS,
    CONTENT,
    DOC_VERSION,
    HEADINGS,
    INGESTED_AT,
    KIND,
    KIND_BODY,
    KIND_CHUNK,
    KIND_DOCUMENT,
    KIND_SYNC_STATUS,
    METADATA,
    PAGE,
    PAGE_KEY,
    SOURCE,
    SYNC,
    SYNCED_AT_S,
    TAGS,
    TEXT_HASH,
    TITLE,
    TOTAL_CHUNKS,
    URI,
    VERSION,
    WRITE_ID,
)
from kbsearch.store.conditions import AnyOf, Condition, Match, Missing, Range, scope_conditions

# Page size for internal scrolls (list_sources); big enough to be few round trips.
SCROLL_PAGE = 1000


# --- points -----------------------------------------------------------------------------


def chunk_payload(point: ChunkPoint) -> dict[str, Any]:
    located = {key: value for key, value in ((PAGE, point.page), (CELL, point.cell)) if value is not None}
    return located | {
        KIND: KIND_CHUNK,
        URI: point.uri,
        SOURCE: point.source_identifier,
        CHUNK_INDEX: point.chunk_index,
        TOTAL_CHUNKS: point.total_chunks,
        CONTENT: point.text,
        TEXT_HASH: point.text_hash,
        TITLE: point.title,
        TAGS: list(point.tags),
        HEADINGS: list(point.headings),
        VERSION: point.version,
        CHAR_START: point.start,
        CHAR_END: point.end,
        DOC_VERSION: point.doc_version,
        PAGE_KEY: point.page_key,
    }


def document_payload(record: DocumentRecord) -> dict[str, Any]:
    return {
        KIND: KIND_DOCUMENT,
        URI: record.uri,
        SOURCE: record.source_identifier,
        CHECKSUM: record.checksum,
        CHUNKS: record.chunks,
        METADATA: dict(record.metadata),
        TITLE: record.title,
        INGESTED_AT: record.ingested_at,
        CHUNKER: record.chunker,
        VERSION: record.version,
        WRITE_ID: record.write_id,
    }


def document_from_payload(payload: Mapping[str, Any]) -> DocumentRecord:
    return DocumentRecord(
        uri=payload[URI],
        source_identifier=payload.get(SOURCE),
        checksum=payload[CHECKSUM],
        chunks=payload[CHUNKS],
        metadata=dict(payload.get(METADATA) or {}),
        title=payload.get(TITLE),
        ingested_at=payload[INGESTED_AT],
        chunker=payload[CHUNKER],
        version=int(payload.get(VERSION) or 0),
        write_id=payload.get(WRITE_ID),
    )


def body_payload(body: StoredBody) -> dict[str, Any]:
    return {
        KIND: KIND_BODY,
        URI: body.uri,
        SOURCE: body.source_identifier,
        CHECKSUM: body.checksum,
        VERSION: body.version,
        CONTENT: body.content,
        BODY: body.body,
        "contentType": body.content_type,
        "contentEncoding": body.content_encoding,
    }


def body_from_payload(payload: Mapping[str, Any]) -> StoredBody:
    return StoredBody(
        uri=payload[URI],
        source_identifier=payload.get(SOURCE),
        checksum=payload[CHECKSUM],
        version=int(payload.get(VERSION) or 0),
        content=payload[CONTENT],
        body=payload[BODY],
        content_type=payload.get("contentType"),
        content_encoding=payload.get("contentEncoding") or "utf-8",
    )


def same_write(stored: DocumentRecord | None, written: DocumentRecord) -> bool:
    """Whether the read-back record is exactly the one a conditional write tried to store."""
    return (
        stored is not None
        and stored.write_id == written.write_id
        and stored.version == written.version
        and stored.checksum == written.checksum
        and stored.chunks == written.chunks
    )


def hit_from_payload(
    point_id: Any, score: float, payload: Mapping[str, Any], similarity: float | None = None
) -> SearchHit:
    """A hit without metadata: that lives on the record (see with_metadata)."""
    return SearchHit(
        id=str(point_id),
        score=float(score),
        uri=payload[URI],
        chunk_index=payload[CHUNK_INDEX],
        total_chunks=payload[TOTAL_CHUNKS],
        content=payload[CONTENT],
        title=payload.get(TITLE),
        headings=list(payload.get(HEADINGS) or []),
        metadata={},
        source_identifier=payload.get(SOURCE),
        version=payload.get(DOC_VERSION),
        page_key=payload.get(PAGE_KEY),
        similarity=similarity,
        page=payload.get(PAGE),
        cell=payload.get(CELL),
    )


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0 for a zero vector."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def chunk_from_payload(payload: Mapping[str, Any]) -> DocumentChunk:
    return DocumentChunk(
        uri=payload[URI],
        source_identifier=payload.get(SOURCE),
        chunk_index=payload[CHUNK_INDEX],
        total_chunks=payload[TOTAL_CHUNKS],
        content=payload[CONTENT],
        title=payload.get(TITLE),
        headings=list(payload.get(HEADINGS) or []),
        start=payload.get(CHAR_START),
        end=payload.get(CHAR_END),
        page=payload.get(PAGE),
        cell=payload.get(CELL),
    )


def with_metadata(hits: list[SearchHit], record_payloads: Iterable[Mapping[str, Any]]) -> list[SearchHit]:
    """The hits with the metadata of their document records."""
    by_uri = {p[URI]: dict(p.get(METADATA) or {}) for p in record_payloads if p.get(KIND) == KIND_DOCUMENT}
    return [replace(hit, metadata=by_uri.get(hit.uri, {})) for hit in hits]


def sync_status_payload(status: SyncStatus) -> dict[str, Any]:
    """The payload of a source's sync status point; the report itself sits under `sync`, in camelCase."""
    return {
        KIND: KIND_SYNC_STATUS,
        SOURCE: status.source_identifier,
        SYNCED_AT_S: rfc3339_seconds(status.synced_at),
        SYNC: {
            "commit": status.commit,
            "phase": status.phase,
            "documents": status.documents,
            "failed": status.failed,
            "skipped": status.skipped,
            "added": status.added,
            "modified": status.modified,
            "deleted": status.deleted,
            "unchanged": status.unchanged,
            "failedFiles": [_issue_payload(i) for i in status.failed_files],
            "skippedFiles": [_issue_payload(i) for i in status.skipped_files],
            "syncedAt": status.synced_at,
            "nextSyncAt": status.next_sync_at,
            "message": status.message,
            "lastSuccessAt": status.last_success_at,
            "freshness": _freshness_payload(status.freshness) if status.freshness else None,
            "progress": _progress_payload(status.progress) if status.progress else None,
            "quality": _quality_payload(status.quality) if status.quality else None,
        },
    }


def _quality_payload(quality: JudgedQuality) -> dict[str, Any]:
    return {
        "questions": quality.questions,
        "hitAt1": quality.hit_at_1,
        "hitAt5": quality.hit_at_5,
        "withFacts": quality.with_facts,
        "factsShare": quality.facts_share,
        "failed": quality.failed,
        "failedQuestions": [
            {"question": q.question, "expected": q.expected, "rank": q.rank, "missingFacts": q.missing_facts}
            for q in quality.failed_questions
        ],
        "error": quality.error,
    }


def _quality(payload: Mapping[str, Any] | None) -> JudgedQuality | None:
    if not payload:  # none asked, or a status stored before quality was reported
        return None
    return JudgedQuality(
        questions=int(payload["questions"]),
        hit_at_1=_share(payload.get("hitAt1")),
        hit_at_5=_share(payload.get("hitAt5")),
        with_facts=int(payload.get("withFacts") or 0),
        facts_share=_share(payload.get("factsShare")),
        failed=int(payload.get("failed") or 0),
        failed_questions=[
            FailedQuestion(
                question=q["question"],
                expected=list(q.get("expected") or []),
                rank=q.get("rank"),
                missing_facts=list(q.get("missingFacts") or []),
            )
            for q in payload.get("failedQuestions") or []
        ],
        error=payload.get("error"),
    )


def _share(value: Any) -> float | None:
    return None if value is None else float(value)


def _progress_payload(progress: SyncProgress) -> dict[str, Any]:
    return {
        "stage": progress.stage,
        "done": progress.done,
        "total": progress.total,
        "startedAt": progress.started_at,
        "reportedAt": progress.reported_at,
    }


def _progress(payload: Mapping[str, Any] | None) -> SyncProgress | None:
    if not payload:  # none running, or a status stored before progress was reported
        return None
    total = payload.get("total")
    return SyncProgress(
        stage=str(payload["stage"]),
        done=int(payload["done"]),
        total=None if total is None else int(total),
        started_at=payload["startedAt"],
        reported_at=payload["reportedAt"],
    )


def _freshness_payload(fresh: Freshness) -> dict[str, Any]:
    return {
        "remoteCommit": fresh.remote_commit,
        "seenAt": fresh.seen_at,
        "searchableAt": fresh.searchable_at,
        "lagSeconds": fresh.lag_seconds,
    }


def _freshness(payload: Mapping[str, Any] | None) -> Freshness | None:
    if not payload:  # a status stored before freshness was reported
        return None
    return Freshness(
        remote_commit=payload["remoteCommit"],
        seen_at=payload["seenAt"],
        searchable_at=payload["searchableAt"],
        lag_seconds=float(payload["lagSeconds"]),
    )


def sync_status_from_payload(payload: Mapping[str, Any]) -> SyncStatus:
    sync = payload[SYNC]
    return SyncStatus(
        source_identifier=payload[SOURCE],
        commit=sync.get("commit"),
        phase=sync.get("phase"),
        documents=int(sync.get("documents") or 0),
        failed=int(sync.get("failed") or 0),
        skipped=int(sync.get("skipped") or 0),
        failed_files=[_issue(i) for i in sync.get("failedFiles") or []],
        skipped_files=[_issue(i) for i in sync.get("skippedFiles") or []],
        synced_at=sync["syncedAt"],
        next_sync_at=sync.get("nextSyncAt"),
        message=sync.get("message"),
        added=int(sync.get("added") or 0),
        modified=int(sync.get("modified") or 0),
        deleted=int(sync.get("deleted") or 0),
        unchanged=int(sync.get("unchanged") or 0),
        last_success_at=sync.get("lastSuccessAt"),
        freshness=_freshness(sync.get("freshness")),
        progress=_progress(sync.get("progress")),
        quality=_quality(sync.get("quality")),
    )


def _issue_payload(issue: FileIssue) -> dict[str, Any]:
    return {"path": issue.path, "reason": issue.reason, "code": issue.code}


def _issue(payload: Mapping[str, Any]) -> FileIssue:
    return FileIssue(path=payload["path"], reason=payload["reason"], code=payload.get("code"))


def rfc3339_seconds(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (validated upstream)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def sync_status_newer_than(status: SyncStatus, trusted_until_s: float | None = None) -> list[Condition]:
    """The condition of a sync status write: the stored one (if any) is not newer than `status`,
    or is dated after `trusted_until_s` (a forged or far-ahead date that would hide every real report)."""
    options: list[Range | Missing] = [Range(SYNCED_AT_S, lte=rfc3339_seconds(status.synced_at)), Missing(SYNCED_AT_S)]
    if trusted_until_s is not None:
        options.append(Range(SYNCED_AT_S, gte=trusted_until_s))
    return [AnyOf(tuple(options))]


def sync_status_conditions(allowed: list[str] | None) -> list[Condition]:
    return [Match(KIND, KIND_SYNC_STATUS), *scope_conditions(allowed)]


# --- list_sources -----------------------------------------------------------------------


def tally_documents(payloads: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, str | None]]:
    """Documents and latest ingestedAt per source, from document payloads."""
    tally: dict[str, tuple[int, str | None]] = {}
    for payload in payloads:
        source = payload.get(SOURCE)
        if source is None:
            continue
        documents, latest = tally.get(source, (0, None))
        ingested = payload.get(INGESTED_AT)
        # RFC 3339 UTC timestamps of one format order lexically.
        if ingested is not None and (latest is None or ingested > latest):
            latest = ingested
        tally[source] = (documents + 1, latest)
    return tally


def source_stats(
    documents: Mapping[str, tuple[int, str | None]],
    chunks: Mapping[str, int],
    statuses: Mapping[str, SyncStatus] | None = None,
) -> list[SourceStats]:
    """One entry per source with documents or a sync status (a source whose every file failed has none)."""
    statuses = statuses or {}
    return [
        SourceStats(
            source_identifier=source,
            documents=documents.get(source, (0, None))[0],
            chunks=chunks.get(source, 0),
            last_ingested_at=documents.get(source, (0, None))[1],
            sync=statuses.get(source),
        )
        for source in sorted(set(documents) | set(statuses))
    ]
