"""Vendor-neutral payload mapping shared by the store backends: records, hits, signature, filters."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbsearch.errors import ConfigurationError, InvalidRequestError
from kbsearch.models import (
    POINT_ID_NAMESPACE,
    ChunkPoint,
    CollectionSignature,
    DocumentRecord,
    SearchFilter,
    SearchHit,
    SourceStats,
)
from kbsearch.store.base import (
    CHECKSUM,
    CHUNK_INDEX,
    CHUNKER,
    CHUNKS,
    CONTENT,
    HEADINGS,
    INGESTED_AT,
    KIND,
    KIND_CHUNK,
    KIND_COLLECTION,
    KIND_DOCUMENT,
    METADATA,
    SOURCE,
    TAGS,
    TEXT_HASH,
    TITLE,
    TOTAL_CHUNKS,
    URI,
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
}


# --- points -----------------------------------------------------------------------------


def chunk_payload(point: ChunkPoint) -> dict[str, Any]:
    return {
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
        METADATA: dict(point.metadata),
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
    )


def hit_from_payload(point_id: Any, score: float, payload: Mapping[str, Any]) -> SearchHit:
    return SearchHit(
        id=str(point_id),
        score=float(score),
        uri=payload[URI],
        chunk_index=payload[CHUNK_INDEX],
        total_chunks=payload[TOTAL_CHUNKS],
        content=payload[CONTENT],
        title=payload.get(TITLE),
        headings=list(payload.get(HEADINGS) or []),
        metadata=dict(payload.get(METADATA) or {}),
        source_identifier=payload.get(SOURCE),
    )


# --- signature --------------------------------------------------------------------------


def signature_payload(signature: CollectionSignature) -> dict[str, Any]:
    payload: dict[str, Any] = {KIND: KIND_COLLECTION}
    for key, attr in _SIGNATURE_FIELDS.items():
        payload[key] = getattr(signature, attr)
    return payload


def signature_from_payload(payload: Mapping[str, Any]) -> CollectionSignature:
    return CollectionSignature(**{attr: payload.get(key) for key, attr in _SIGNATURE_FIELDS.items()})


def describe(signature: CollectionSignature) -> str:
    return (
        f"embedder={signature.embedder_provider}/{signature.embedder_model} "
        f"dimensions={signature.dimensions} sparse={signature.sparse_encoder}"
    )


def check_signature(
    where: str, stored: CollectionSignature | None, has_points: bool, wanted: CollectionSignature
) -> bool:
    """Whether the signature must still be written; raise ConfigurationError on a mismatch.

    `where` names the collection (and path) for the message.
    """
    if stored is None:
        if has_points:
            # Data written by something else: its vectors cannot be trusted to match.
            raise ConfigurationError(
                f"Collection {where} holds points but no collection signature, so its vectors "
                f"cannot be checked against [{describe(wanted)}]. {_REINDEX_HINT}"
            )
        return True
    if stored != wanted:
        raise ConfigurationError(
            f"Collection {where} was built with [{describe(stored)}] but the service is "
            f"configured with [{describe(wanted)}]; its vectors are not comparable. {_REINDEX_HINT}"
        )
    return False


_REINDEX_HINT = (
    "To re-index, point SEARCHSVC_COLLECTION at a new collection name (or, for the embedded "
    "store, delete the collection's directory under SEARCHSVC_DATA_DIR) and re-sync the sources; "
    "or restore the embedder settings the collection was built with."
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


Condition = Match | MatchAny | Prefix | Range


def metadata_key(key: str) -> str:
    """JSON path of a metadata key; quoted so dots and slashes stay part of the key."""
    # Keys are validated upstream to [A-Za-z0-9_.\-/], so they never contain a quote.
    return f'{METADATA}."{key}"'


def search_conditions(search_filter: SearchFilter) -> list[Condition]:
    """Conditions (ANDed) for a search.

    No kind condition is needed: only chunks have vectors, so record and signature points can
    never be a nearest neighbour.
    """
    conditions: list[Condition] = []
    if search_filter.source_identifiers is not None:
        conditions.append(MatchAny(SOURCE, list(search_filter.source_identifiers)))
    if search_filter.uri_prefix:
        conditions.append(Prefix(URI, search_filter.uri_prefix))
    for key, value in search_filter.metadata.items():
        path = metadata_key(key)
        if isinstance(value, bool | str):
            conditions.append(Match(path, value))
        else:
            # Numbers compare by value, so 2 matches a stored 2.0 and the reverse.
            conditions.append(Range(path, gte=float(value), lte=float(value)))
    return conditions


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
    documents: Mapping[str, tuple[int, str | None]], chunks: Mapping[str, int]
) -> list[SourceStats]:
    return [
        SourceStats(source_identifier=source, documents=count, chunks=chunks.get(source, 0), last_ingested_at=latest)
        for source, (count, latest) in sorted(documents.items())
    ]
