"""Internal value types shared by the service, the stores, the chunker and the embedders."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

# A fixed namespace makes point ids deterministic: re-ingesting never duplicates.
POINT_ID_NAMESPACE = uuid.UUID("6f1f8a52-9a7c-4d8e-b0f4-2b7d0c1e5a31")

SearchMode = Literal["hybrid", "dense", "keyword"]

# The checksum of a record whose write has not finished (or was interrupted): it matches no
# content, so the next PUT of any content rewrites the document.
INCOMPLETE = "sha256:incomplete"
MetadataValue = str | int | float | bool | list[str]


def chunk_point_id(uri: str, chunk_index: int) -> str:
    """The id of chunk `chunk_index` of document `uri`."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, f"chunk:{uri}#{chunk_index}"))


def document_point_id(uri: str) -> str:
    """The id of the vector-less record that describes document `uri`."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, f"document:{uri}"))


@dataclass(frozen=True, slots=True)
class SparseVector:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a document's body, as cut by the chunker."""

    index: int
    text: str  # what search results show
    embed_text: str  # what is embedded and BM25-encoded: context lines + text
    headings: list[str]  # heading path, outermost first
    start: int  # character offsets into the body
    end: int


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    title: str | None
    tags: list[str]
    body: str  # content without front matter
    chunks: list[Chunk]


# Backends of one model whose vectors may share a collection: measured per text against torch on
# SciFact chunks (bench/embedders.py), onnx fp32 agrees to cosine >= 0.99999 - the same numbers,
# so a query from one ranks documents from the other exactly. int8 agrees only to ~0.99 (min ~0.98):
# mixing it with float vectors would skew ranking, so it is a group of its own.
BACKEND_GROUPS: tuple[frozenset[str], ...] = (frozenset({"torch", "onnx"}), frozenset({"onnx-int8"}))


def interchangeable_backends(stored: str | None, wanted: str | None) -> bool:
    """Whether vectors made by backend `stored` and backend `wanted` may share a collection.

    A collection from before backends were recorded (None) was made with torch.
    """
    stored, wanted = stored or "torch", wanted or "torch"
    return stored == wanted or any(stored in group and wanted in group for group in BACKEND_GROUPS)


@dataclass(frozen=True, slots=True)
class CollectionSignature:
    """What the vectors of a collection were made with; a mismatch means re-index.

    `embedder_backend` is how a local model runs (torch, onnx, onnx-int8; None for an API); two
    backends of one model are compatible only within a group of BACKEND_GROUPS.
    """

    embedder_provider: str
    embedder_model: str
    dimensions: int
    sparse_encoder: str
    embedder_backend: str | None = None


@dataclass(slots=True)
class ChunkPoint:
    """A chunk ready to be written: payload plus both vectors.

    Metadata is not here: it lives once, on the document record.
    """

    uri: str
    source_identifier: str | None
    chunk_index: int
    total_chunks: int
    text: str
    text_hash: str  # sha256 of embed_text: equal hash means the vector can be reused
    title: str | None
    tags: list[str]
    headings: list[str]
    dense: list[float]
    sparse: SparseVector
    version: int = 0  # the record version of the write that made it (see DocumentRecord)

    @property
    def id(self) -> str:
        return chunk_point_id(self.uri, self.chunk_index)


@dataclass(slots=True)
class DocumentRecord:
    """The per-document manifest, stored as a vector-less point beside its chunks."""

    uri: str
    source_identifier: str | None
    checksum: str  # "sha256:<hex>" of the content's UTF-8 bytes
    chunks: int
    metadata: dict[str, MetadataValue]
    title: str | None
    ingested_at: str  # RFC 3339, UTC
    chunker: str  # chunker fingerprint: a settings change forces re-chunking
    # Optimistic concurrency: every write claims the record with a higher version (a
    # conditional write on the version it read) and a fresh write_id that tells two claims
    # apart. Records written before versions existed read as version 0.
    version: int = 0
    write_id: str | None = None

    @property
    def id(self) -> str:
        return document_point_id(self.uri)


@dataclass(frozen=True, slots=True)
class SearchFilter:
    source_identifiers: list[str] | None = None
    uri_prefix: str | None = None
    metadata: dict[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SearchHit:
    id: str
    score: float
    uri: str
    chunk_index: int
    total_chunks: int
    content: str
    title: str | None
    headings: list[str]
    metadata: dict[str, MetadataValue]
    source_identifier: str | None


@dataclass(frozen=True, slots=True)
class SourceStats:
    source_identifier: str
    documents: int
    chunks: int
    last_ingested_at: str | None


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One source's counts, from engine counts filtered on the source."""

    source_identifier: str
    documents: int
    chunks: int
    incomplete_documents: int
    last_ingested_at: str | None
