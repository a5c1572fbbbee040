"""Internal value types shared by the service, the stores, the chunker and the embedders."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

# A fixed namespace makes point ids deterministic: re-ingesting never duplicates.
POINT_ID_NAMESPACE = uuid.UUID("6f1f8a52-9a7c-4d8e-b0f4-2b7d0c1e5a31")

# literal: the chunks that hold the query as written (services/search/literal.py).
SearchMode = Literal["hybrid", "dense", "keyword", "literal"]
# rrf: reciprocal rank fusion (k, lane weights); dbsf: distribution-based score fusion (each lane's
# scores normalised by their mean +- 3 standard deviations, then summed).
FusionMethod = Literal["rrf", "dbsf"]
# Which face a search came through: REST, MCP, the console or an ask (recorded in the query log).
SearchOrigin = Literal["api", "mcp", "ui", "ask"]

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


def body_point_id(uri: str) -> str:
    """The id of the vector-less point that keeps document `uri`'s text as it was written."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, f"body:{uri}"))


@dataclass(frozen=True, slots=True)
class StoredBody:
    """A document's text as written, kept so it can be read whole and re-chunked from the store alone.

    `content` is exactly what was PUT (front matter included: title and tags come from it), so a
    rebuild re-chunks the same input; `body` is the chunker's body (front matter aside), what a
    reader is shown. `checksum` is the record's checksum of `content`: a body whose checksum is not
    the record's (left by an interrupted write) is never served.
    """

    uri: str
    source_identifier: str | None
    checksum: str
    version: int
    content: str
    body: str
    content_type: str | None = None  # as PUT, so a rebuild converts a PDF or notebook the same way
    content_encoding: str = "utf-8"


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
    start: int | None = None  # character offsets of `text` in the document body
    end: int | None = None
    doc_version: str | None = None  # the documentation version the document belongs to (services/documents/versions.py)
    page_key: str | None = None  # the version-free page key every version of the page shares
    page: int | None = None  # where the chunk starts in the original file: a PDF page, 1-based
    cell: int | None = None  # ...or a notebook cell, 1-based

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
class Fusion:
    """How hybrid search merges its dense and keyword candidates, inside the engine."""

    method: FusionMethod = "rrf"
    rrf_k: int = 2
    dense_weight: float = 1.0
    keyword_weight: float = 1.0
    # Each lane scores every candidate either lane found (the union rescored), so a chunk only one
    # lane returned is not fused with a missing score of 0 from the other.
    full_scores: bool = False


@dataclass(frozen=True, slots=True)
class SearchFilter:
    source_identifiers: list[str] | None = None
    uri_prefix: str | None = None
    metadata: dict[str, str | int | float | bool] = field(default_factory=dict)
    version: str | None = None  # only chunks of documents of this documentation version


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
    version: str | None = None  # the documentation version of its document, when it has one
    page_key: str | None = None  # the version-free page key (None for chunks written before versions)
    similarity: float | None = None  # cosine of the query and the chunk's dense vector, when the query had one
    relevance: float | None = None  # calibrated [0, 1] (services/search/ranking.py)
    other_versions: list[str] = field(default_factory=list)  # other versions of the page that also matched
    more_matches: int = 0  # more chunks of the same document that matched
    page: int | None = None  # the PDF page or notebook cell the chunk starts in (see ChunkPoint)
    cell: int | None = None
    # The stores that returned this page (kbsearch.peers); empty: the local store alone.
    stores: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DocumentChunk:
    """One stored chunk as read back for display: no vectors, no score.

    `start`/`end` locate `content` in the document body; None for chunks written before the
    offsets were stored.
    """

    uri: str
    source_identifier: str | None
    chunk_index: int
    total_chunks: int
    content: str
    title: str | None
    headings: list[str]
    start: int | None
    end: int | None
    page: int | None = None
    cell: int | None = None


@dataclass(frozen=True, slots=True)
class SourceStats:
    source_identifier: str
    documents: int
    chunks: int
    last_ingested_at: str | None
    sync: SyncStatus | None = None  # the last sync its syncer reported, if any


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One source's counts, from engine counts filtered on the source."""

    source_identifier: str
    documents: int
    chunks: int
    incomplete_documents: int
    last_ingested_at: str | None
    sync: SyncStatus | None = None


def sync_status_point_id(source_identifier: str) -> str:
    """The id of the vector-less point that holds a source's last reported sync."""
    return str(uuid.uuid5(POINT_ID_NAMESPACE, f"syncstatus:{source_identifier}"))


SyncPhase = Literal["ok", "partial", "error"]


@dataclass(frozen=True, slots=True)
class FileIssue:
    """One file a sync skipped or failed, and why; `code` is the search service's, when it refused it."""

    path: str
    reason: str
    code: str | None = None


@dataclass(frozen=True, slots=True)
class SyncStatus:
    """The outcome of a source's last sync, as its syncer (the operator, knowledge-sync) reported it.

    `failed` and `skipped` are the full counts; the file lists are bounded and may hold fewer.
    `added`, `modified`, `deleted` and `unchanged` are optional extras of the report (0 if not sent).
    `progress`: the sync running now, if its syncer reports one. `phase` None: no sync of the
    source has ended yet, only `progress` is known (and `synced_at` is when that sync started).
    """

    source_identifier: str
    commit: str | None
    phase: SyncPhase | None
    documents: int
    failed: int
    skipped: int
    failed_files: list[FileIssue]
    skipped_files: list[FileIssue]
    synced_at: str  # RFC 3339, UTC
    next_sync_at: str | None
    message: str | None
    added: int = 0
    modified: int = 0
    deleted: int = 0
    unchanged: int = 0
    last_success_at: str | None = None  # RFC 3339, UTC: when the last successful sync ended
    freshness: Freshness | None = None
    progress: SyncProgress | None = None
    quality: JudgedQuality | None = None  # the judged questions of `commit`, if its syncer asked them


@dataclass(frozen=True, slots=True)
class SyncProgress:
    """How far a running sync is, as its syncer last reported (times RFC 3339, UTC).

    `stage`: fetching, reading, then syncing; `total` is known from syncing on. `reported_at` is
    this service's clock when the report came: a syncer that died leaves it growing old.
    """

    stage: str
    done: int
    total: int | None
    started_at: str
    reported_at: str


@dataclass(frozen=True, slots=True)
class FailedQuestion:
    """A judged question the index did not answer: its expected page not in the top 5 (`rank` None),
    or its answer without some of its facts."""

    question: str
    expected: list[str]
    rank: int | None
    missing_facts: list[str]


@dataclass(frozen=True, slots=True)
class JudgedQuality:
    """How well a source's index answers the judged questions of its repository (.kb/questions.yaml),
    as its syncer measured them after a sync: shares in [0, 1], None when there is nothing to share
    (no questions, none with facts, or `error`: why there are no figures)."""

    questions: int
    hit_at_1: float | None
    hit_at_5: float | None
    with_facts: int
    facts_share: float | None
    failed: int
    failed_questions: list[FailedQuestion]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Freshness:
    """How fresh a source's index is, as its syncer measured it (times RFC 3339, UTC)."""

    remote_commit: str
    seen_at: str  # when the commit was first seen on the remote (a webhook's push, else the sync's start)
    searchable_at: str  # when the sync that made it searchable ended
    lag_seconds: float


@dataclass(frozen=True, slots=True)
class QueryLogEntry:
    """One search, as the query log keeps it: never a token, only the caller's name.

    `sources` are the sources the search was scoped to after the caller's scope was applied;
    None means unrestricted (no source filter at all).
    """

    at: float  # seconds since the epoch, UTC
    origin: SearchOrigin
    query: str
    results: int
    top_score: float | None
    latency_ms: float
    caller: str
    sources: list[str] | None


InsightsWindow = Literal["24h", "7d", "30d"]


@dataclass(frozen=True, slots=True)
class QueryCount:
    query: str  # the normalised text (lowercase, single spaces)
    count: int
    last_at: str  # RFC 3339, UTC


@dataclass(frozen=True, slots=True)
class QueryScore:
    query: str
    count: int
    top_score: float  # the best top score this query reached in the window


@dataclass(frozen=True, slots=True)
class Insights:
    """What people and agents searched for, over one window, as far as the viewer may see."""

    window: InsightsWindow
    total: int
    top_queries: list[QueryCount]
    zero_result: list[QueryCount]
    low_score: list[QueryScore]
    by_origin: dict[str, int]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    enabled: bool


def rfc3339(value: datetime) -> str:
    """The one form of a time the domain keeps: RFC 3339, UTC, milliseconds."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
