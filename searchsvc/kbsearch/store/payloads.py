"""Vendor-neutral payload mapping shared by the store backends: records, hits, signature, filters."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kbsearch.errors import ConfigurationError, InvalidRequestError
from kbsearch.models import (
    BACKEND_GROUPS,
    INCOMPLETE,
    POINT_ID_NAMESPACE,
    ChunkPoint,
    CollectionSignature,
    DocumentChunk,
    DocumentRecord,
    FileIssue,
    Freshness,
    SearchFilter,
    SearchHit,
    SourceStats,
    StoredBody,
    SyncStatus,
    interchangeable_backends,
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
    EPOCH,
    HEADINGS,
    INGESTED_AT,
    KIND,
    KIND_BODY,
    KIND_CHUNK,
    KIND_COLLECTION,
    KIND_DOCUMENT,
    KIND_SYNC_STATUS,
    MAX_METADATA_FILTER_DOCUMENTS,
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

# The one point that holds the collection's signature; fixed so every open finds it.
SIGNATURE_POINT_ID = str(uuid.uuid5(POINT_ID_NAMESPACE, "collection:signature"))

# Page size for internal scrolls (list_sources); big enough to be few round trips.
SCROLL_PAGE = 1000

_SIGNATURE_FIELDS = {
    "embedderProvider": "embedder_provider",
    "embedderModel": "embedder_model",
    "dimensions": "dimensions",
    "sparseEncoder": "sparse_encoder",
    "embedderBackend": "embedder_backend",
}


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
        },
    }


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
        phase=sync["phase"],
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


# --- signature --------------------------------------------------------------------------


def signature_payload(signature: CollectionSignature, epoch: str) -> dict[str, Any]:
    payload: dict[str, Any] = {KIND: KIND_COLLECTION, EPOCH: epoch}
    for key, attr in _SIGNATURE_FIELDS.items():
        payload[key] = getattr(signature, attr)
    return payload


def with_chunker(payload: Mapping[str, Any], fingerprint: str) -> dict[str, Any]:
    """The signature point's payload, recording the chunker the whole collection was built with."""
    return {**payload, CHUNKER: fingerprint}


def chunker_from_payload(payload: Mapping[str, Any] | None) -> str | None:
    value = (payload or {}).get(CHUNKER)
    return value if isinstance(value, str) and value else None


def new_epoch() -> str:
    """A collection epoch: random, made once when the collection (or its signature) is created."""
    return uuid.uuid4().hex


def epoch_from_payload(payload: Mapping[str, Any] | None) -> str | None:
    value = (payload or {}).get(EPOCH)
    return value if isinstance(value, str) and value else None


def signature_from_payload(payload: Mapping[str, Any]) -> CollectionSignature:
    fields: dict[str, Any] = {attr: payload.get(key) for key, attr in _SIGNATURE_FIELDS.items()}
    return CollectionSignature(**fields)


def describe(signature: CollectionSignature) -> str:
    backend = f" backend={signature.embedder_backend}" if signature.embedder_backend else ""
    return (
        f"embedder={signature.embedder_provider}/{signature.embedder_model}{backend} "
        f"dimensions={signature.dimensions} sparse={signature.sparse_encoder}"
    )


def compatible(stored: CollectionSignature, wanted: CollectionSignature) -> bool:
    """Equal but for the backend, and the two backends' vectors interchangeable (models.BACKEND_GROUPS)."""
    if replace(stored, embedder_backend=None) != replace(wanted, embedder_backend=None):
        return False
    if stored.embedder_provider != "local":
        return stored.embedder_backend == wanted.embedder_backend
    return interchangeable_backends(stored.embedder_backend, wanted.embedder_backend)


def check_signature(
    where: str, stored: CollectionSignature | None, has_points: bool, wanted: CollectionSignature
) -> bool:
    """Whether the signature must still be written; raise ConfigurationError on a mismatch.

    `where` names the collection (and path) for the message. A collection made by another local
    backend whose vectors are interchangeable (torch and onnx fp32) opens; the stored signature
    keeps the backend the collection was created with.
    """
    if stored is None:
        if has_points:
            # Data written by something else: its vectors cannot be trusted to match.
            raise ConfigurationError(
                f"Collection {where} holds points but no collection signature, so its vectors "
                f"cannot be checked against [{describe(wanted)}]. {_REINDEX_HINT}"
            )
        return True
    if not compatible(stored, wanted):
        keep = ""
        if replace(stored, embedder_backend=None) == replace(wanted, embedder_backend=None):
            made_with = stored.embedder_backend or "torch"  # collections from before backends were recorded
            usable = sorted(next((g for g in BACKEND_GROUPS if made_with in g), {made_with}))
            keep = f" To keep it, set SEARCHSVC_LOCAL_BACKEND to {' or '.join(usable)}."
        raise ConfigurationError(
            f"Collection {where} was built with [{describe(stored)}] but the service is "
            f"configured with [{describe(wanted)}]; its vectors are not comparable.{keep} "
            f"{_REBUILD_HINT} {_REINDEX_HINT}"
        )
    return False


_REBUILD_HINT = (
    "With SEARCHSVC_REBUILD=auto (the default) the service serves it as it is and rebuilds it in the "
    "background instead (docs/operations/upgrades-and-reindex.md)."
)
_REINDEX_HINT = (
    "To re-index, point SEARCHSVC_COLLECTION at a new collection name (or, for the embedded "
    "store, delete the collection's directory under SEARCHSVC_DATA_DIR) and re-sync the sources; "
    "or restore the embedder settings the collection was built with (SEARCHSVC_EMBEDDER, "
    "SEARCHSVC_LOCAL_MODEL, SEARCHSVC_LOCAL_BACKEND, SEARCHSVC_OPENAI_MODEL, SEARCHSVC_OPENAI_DIMENSIONS)."
)


# --- filters ----------------------------------------------------------------------------
# Each backend translates these four condition shapes into its own filter classes.


@dataclass(frozen=True, slots=True)
class Match:
    key: str
    value: str | int | bool


@dataclass(frozen=True, slots=True)
class MatchAny:
    key: str
    values: list[str]


@dataclass(frozen=True, slots=True)
class Prefix:
    key: str
    prefix: str


@dataclass(frozen=True, slots=True)
class Range:
    key: str
    gte: float | None = None
    lte: float | None = None
    lt: float | None = None


@dataclass(frozen=True, slots=True)
class Missing:
    """The key is absent (or empty): how points from before a field existed are found."""

    key: str


@dataclass(frozen=True, slots=True)
class AnyOf:
    """At least one of the conditions holds."""

    conditions: tuple[Match | MatchAny | Prefix | Range | Missing, ...]


@dataclass(frozen=True, slots=True)
class HasId:
    point_id: str


@dataclass(frozen=True, slots=True)
class OnlyAmong:
    """The list at `key` is not empty and every one of its values is in `values`."""

    key: str
    values: list[str]


Condition = Match | MatchAny | Prefix | Range | Missing | AnyOf | HasId | OnlyAmong

# A value no stored version has: a write conditional on it can only insert.
_NO_VERSION = -1


def version_at_most(version: int) -> Condition:
    """Version <= `version`, counting a missing version (older data) as 0."""
    return AnyOf((Range(VERSION, lte=float(version)), Missing(VERSION)))


def version_between(lowest: int | None, highest: int | None) -> list[Condition]:
    """Conditions for lowest <= version <= highest (None: open), a missing version being 0."""
    if lowest is None and highest is None:
        return []
    bounded = Range(
        VERSION,
        gte=float(lowest) if lowest is not None else None,
        lte=float(highest) if highest is not None else None,
    )
    if lowest is None or lowest <= 0:
        return [AnyOf((bounded, Missing(VERSION)))]
    return [bounded]


def record_version_is(version: int | None) -> list[Condition]:
    """The condition of a record write over `version` (None: only when no record exists)."""
    if version is None:
        return [Match(VERSION, _NO_VERSION)]
    if version == 0:
        return [AnyOf((Match(VERSION, 0), Missing(VERSION)))]
    return [Match(VERSION, version)]


def chunk_conditions(uri: str, lowest: int | None = None, highest: int | None = None) -> list[Condition]:
    return [Match(KIND, KIND_CHUNK), Match(URI, uri), *version_between(lowest, highest)]


def metadata_key(key: str) -> str:
    """JSON path of a metadata key; quoted so dots and slashes stay part of the key."""
    # Keys are validated upstream to [A-Za-z0-9_.\-/], so they never contain a quote.
    return f'{METADATA}."{key}"'


def _scope_conditions(search_filter: SearchFilter) -> list[Condition]:
    conditions: list[Condition] = []
    if search_filter.source_identifiers is not None:
        conditions.append(MatchAny(SOURCE, list(search_filter.source_identifiers)))
    if search_filter.uri_prefix:
        conditions.append(Prefix(URI, search_filter.uri_prefix))
    return conditions


def _chunk_only_conditions(search_filter: SearchFilter) -> list[Condition]:
    """Conditions on fields only chunks carry."""
    return [Match(DOC_VERSION, search_filter.version)] if search_filter.version else []


def metadata_record_conditions(search_filter: SearchFilter) -> list[Condition]:
    """Conditions on document records for a search's metadata filter (with its scope)."""
    conditions: list[Condition] = [Match(KIND, KIND_DOCUMENT), *_scope_conditions(search_filter)]
    for key, value in search_filter.metadata.items():
        path = metadata_key(key)
        if isinstance(value, bool | str):
            conditions.append(Match(path, value))
        else:
            # Numbers compare by value, so 2 matches a stored 2.0 and the reverse.
            conditions.append(Range(path, gte=float(value), lte=float(value)))
    return conditions


def metadata_uris(payloads: Iterable[Mapping[str, Any]]) -> list[str]:
    """URIs of the records a metadata filter matched; refused past the cap."""
    uris = [p[URI] for p in payloads]
    if len(uris) > MAX_METADATA_FILTER_DOCUMENTS:
        raise InvalidRequestError(
            f"the metadata filter matches more than {MAX_METADATA_FILTER_DOCUMENTS} documents; "
            "narrow it with sourceIdentifier or uriPrefix",
            code="FILTER_TOO_BROAD",
            details={"limit": MAX_METADATA_FILTER_DOCUMENTS},
        )
    return uris


def search_conditions(search_filter: SearchFilter, uris: list[str] | None = None) -> list[Condition]:
    """Conditions (ANDed) on chunks for a search; `uris` are those a metadata filter matched.

    No kind condition is needed: only chunks have vectors, so record and signature points can
    never be a nearest neighbour.
    """
    conditions = _scope_conditions(search_filter) + _chunk_only_conditions(search_filter)
    if uris is not None:
        conditions.append(MatchAny(URI, list(uris)))
    return conditions


def source_conditions(source_identifier: str) -> dict[str, list[Condition]]:
    """The filters of one source's status: its records, its chunks, its incomplete records."""
    source = Match(SOURCE, source_identifier)
    return {
        "documents": [Match(KIND, KIND_DOCUMENT), source],
        "chunks": [Match(KIND, KIND_CHUNK), source],
        "incomplete": [Match(KIND, KIND_DOCUMENT), source, Match(CHECKSUM, INCOMPLETE)],
    }


def scope_conditions(allowed: list[str] | None) -> list[Condition]:
    """A caller's scope as an engine filter: None is every source; callers never pass an empty list."""
    return [] if allowed is None else [MatchAny(SOURCE, list(allowed))]


def incomplete_conditions() -> list[Condition]:
    return [Match(KIND, KIND_DOCUMENT), Match(CHECKSUM, INCOMPLETE)]


def document_conditions(source_identifier: str | None, uri_prefix: str | None) -> list[Condition]:
    conditions: list[Condition] = [Match(KIND, KIND_DOCUMENT)]
    if source_identifier is not None:
        conditions.append(Match(SOURCE, source_identifier))
    if uri_prefix:
        conditions.append(Prefix(URI, uri_prefix))
    return conditions


def parse_cursor(cursor: str | None) -> str | None:
    """A list_documents cursor is a point id (UUID); anything else is a client error."""
    if cursor is None:
        return None
    try:
        return str(uuid.UUID(cursor))
    except ValueError:
        raise InvalidRequestError("cursor is not one this service returned", details={"cursor": cursor}) from None


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
