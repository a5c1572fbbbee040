"""The v1 HTTP contract's request and response bodies."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

# Keys become Qdrant JSON paths (quoted), so keep them to a safe alphabet.
METADATA_KEY = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")
MAX_METADATA_KEYS = 64
MAX_METADATA_STRING = 4096
# Metadata is stored once per document, but still bounded as a whole: its JSON size (UTF-8
# bytes, compact separators) and the items of all its lists together.
MAX_METADATA_BYTES = 16_384
MAX_METADATA_LIST_ITEMS = 256

# Numbers must survive a round trip through the store unchanged (see also _int64 below).
FiniteFloat = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Scalar = StrictStr | StrictBool | StrictInt | FiniteFloat
MetadataValue = Scalar | list[StrictStr]

# Room for the operator's "<namespace>/<name>" (63 + 1 + 253) and for hand-made identifiers.
MAX_SOURCE_IDENTIFIER = 512


def _encodable(text: str) -> bool:
    """JSON may carry lone surrogates (\\ud800), which are not text and cannot be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_control(text: str) -> bool:
    return any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in text)


def check_source_identifier(value: str) -> str:
    """The one rule for a sourceIdentifier, wherever it enters: body, query, path or filter.

    It must fit in a URL path segment and a log line and round-trip through every store, so it
    is non-empty, at most MAX_SOURCE_IDENTIFIER characters, free of control characters and of
    lone surrogates, and free of U+FFFD: the mark a URL decoder leaves for bytes that were not UTF-8.
    """
    if not value:
        raise ValueError("sourceIdentifier must not be empty")
    if len(value) > MAX_SOURCE_IDENTIFIER:
        raise ValueError(f"sourceIdentifier has {len(value)} characters; at most {MAX_SOURCE_IDENTIFIER} are allowed")
    if _has_control(value):
        raise ValueError("sourceIdentifier must not contain control characters")
    if not _encodable(value) or "\ufffd" in value:
        raise ValueError("sourceIdentifier must be valid UTF-8 text (no lone surrogates or U+FFFD)")
    return value


def _check_uri(uri: str) -> str:
    if _has_control(uri) or not _encodable(uri):
        raise ValueError("uri must not contain control characters or lone surrogates")
    return uri


SourceIdentifier = Annotated[StrictStr, AfterValidator(check_source_identifier)]
"""A sourceIdentifier, checked by check_source_identifier; use it for every parameter that carries one."""
Uri = Annotated[StrictStr, Field(min_length=1, max_length=2048), AfterValidator(_check_uri)]
"""A document URI, or a prefix of one: no control characters, no lone surrogates."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _check_metadata(metadata: Mapping[str, object]) -> None:
    if len(metadata) > MAX_METADATA_KEYS:
        raise ValueError(f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS} are allowed")
    items = sum(len(value) for value in metadata.values() if isinstance(value, list))
    if items > MAX_METADATA_LIST_ITEMS:
        raise ValueError(f"metadata lists hold {items} items together; at most {MAX_METADATA_LIST_ITEMS} are allowed")
    for key, value in metadata.items():
        if not METADATA_KEY.match(key):
            raise ValueError(f"metadata key {key[:40]!r} must match {METADATA_KEY.pattern}")
        if key == "sourceIdentifier" and isinstance(value, str):
            check_source_identifier(value)
        strings = value if isinstance(value, list) else [value]
        for item in strings:
            if isinstance(item, str) and (len(item) > MAX_METADATA_STRING or "\x00" in item or not _encodable(item)):
                raise ValueError(f"metadata value of {key!r} is too long, contains NUL or is not valid Unicode")
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed")


class PutDocumentRequest(Body):
    uri: Uri
    content: StrictStr
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    # The document's format: a media type ("application/pdf") or a format name ("pdf", "rst"); by
    # default the URI's extension decides, and a URI without a known one is markdown.
    contentType: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None
    # "base64": `content` is the file's bytes, base64-encoded (required for pdf and docx; allowed for
    # every format, so a client need not decode text it cannot vouch for).
    contentEncoding: Literal["utf-8", "base64"] = "utf-8"

    @field_validator("content")
    @classmethod
    def _no_nul(cls, content: str) -> str:
        if "\x00" in content:
            raise ValueError("content contains NUL characters; only text documents are accepted")
        if not _encodable(content):
            raise ValueError("content contains lone surrogate escapes; it is not valid Unicode text")
        return content

    @field_validator("metadata", mode="before")
    @classmethod
    def _int64(cls, metadata: object) -> object:
        # Checked before validation: a float field would otherwise take a huge int silently.
        if isinstance(metadata, dict):
            for key, value in metadata.items():
                if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                    raise ValueError(f"metadata value of {key!r} does not fit in a 64-bit integer")
        return metadata

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, metadata: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        _check_metadata(metadata)
        source = metadata.get("sourceIdentifier")
        if source is not None and not isinstance(source, str):
            raise ValueError("metadata.sourceIdentifier must be a string")
        return metadata

    @property
    def source_identifier(self) -> str | None:
        value = self.metadata.get("sourceIdentifier")
        return value if isinstance(value, str) else None


class PutDocumentResponse(Body):
    uri: str
    status: Literal["created", "updated", "unchanged"]
    checksum: str
    chunks: int
    chunksEmbedded: int


class DeleteDocumentResponse(Body):
    uri: str
    chunksDeleted: int


class DeleteSourceResponse(Body):
    sourceIdentifier: str
    documentsDeleted: int
    chunksDeleted: int


class DocumentInfo(Body):
    uri: str
    checksum: str
    chunks: int
    metadata: dict[str, MetadataValue]
    ingestedAt: str


class ReindexRequest(Body):
    forceSwap: StrictBool = False


class DocumentText(Body):
    """One page of a document's body as written (front matter aside); `nextStart` is null on the last page."""

    uri: str
    title: str | None
    sourceIdentifier: str | None
    checksum: str
    metadata: dict[str, MetadataValue]
    ingestedAt: str
    totalChars: int
    start: int
    end: int
    nextStart: int | None
    text: str


class DocumentList(Body):
    documents: list[DocumentInfo]
    nextCursor: str | None


# A sync status report: bounded so that one source's failures cannot bloat the store or a page.
MAX_REPORTED_FILES = 100
MAX_FILE_PATH = 1024
MAX_ISSUE_REASON = 1000
MAX_SYNC_MESSAGE = 2000
MAX_COMMIT = 128
ISSUE_CODE = r"^[A-Za-z0-9_.\-]{1,64}$"
# Counts fit the store's integers and a browser's numbers exactly.
Count = Annotated[StrictInt, Field(ge=0, le=2**53)]


def _printable(text: str, *, lines: bool) -> str:
    """No control characters (newlines and tabs allowed where `lines`) and valid Unicode."""
    allowed = {"\n", "\t"} if lines else set()
    if any(_has_control(ch) and ch not in allowed for ch in text) or not _encodable(text):
        raise ValueError("must not contain control characters or lone surrogates")
    return text


def _one_line(text: str) -> str:
    return _printable(text, lines=False)


def _text(text: str) -> str:
    return _printable(text, lines=True)


class FileIssueBody(Body):
    """One file a sync skipped or failed: its path in the repository, why, and the service's code if any."""

    path: Annotated[StrictStr, Field(min_length=1, max_length=MAX_FILE_PATH), AfterValidator(_one_line)]
    reason: Annotated[StrictStr, Field(max_length=MAX_ISSUE_REASON), AfterValidator(_text)]
    code: Annotated[StrictStr, Field(pattern=ISSUE_CODE)] | None = None


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FreshnessBody(Body):
    """How fresh the source's index is: the newest commit seen on the remote, when it was first
    seen (a webhook's push, else the sync's start), when it became searchable, and the lag between."""

    remoteCommit: Annotated[StrictStr, Field(min_length=1, max_length=MAX_COMMIT), AfterValidator(_one_line)]
    seenAt: AwareDatetime
    searchableAt: AwareDatetime
    lagSeconds: Annotated[float, Field(ge=0, le=10**9, allow_inf_nan=False)]

    @property
    def seen_at(self) -> str:
        return _rfc3339(self.seenAt)

    @property
    def searchable_at(self) -> str:
        return _rfc3339(self.searchableAt)


class FreshnessInfo(Body):
    remoteCommit: str
    seenAt: str
    searchableAt: str
    lagSeconds: float


class SyncStatusRequest(Body):
    """PUT /api/v1/sources/{sourceIdentifier}/status: the outcome of one sync, as its syncer saw it.

    `failed` and `skipped` are the full counts and default to the length of their lists; the
    lists hold at most MAX_REPORTED_FILES entries each (send the first ones and the full count).
    """

    commit: Annotated[StrictStr, Field(min_length=1, max_length=MAX_COMMIT), AfterValidator(_one_line)] | None = None
    phase: Literal["ok", "partial", "error"]
    documents: Count = 0
    failed: Count | None = None
    skipped: Count | None = None
    added: Count = 0
    modified: Count = 0
    deleted: Count = 0
    unchanged: Count = 0
    failedFiles: Annotated[list[FileIssueBody], Field(max_length=MAX_REPORTED_FILES)] = Field(default_factory=list)
    skippedFiles: Annotated[list[FileIssueBody], Field(max_length=MAX_REPORTED_FILES)] = Field(default_factory=list)
    syncedAt: AwareDatetime
    nextSyncAt: AwareDatetime | None = None
    message: Annotated[StrictStr, Field(max_length=MAX_SYNC_MESSAGE), AfterValidator(_text)] | None = None
    # Freshness, sent with every report (a failed one too): the service keeps only the latest.
    lastSuccessAt: AwareDatetime | None = None
    freshness: FreshnessBody | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SyncStatusRequest:
        for count, files in (("failed", "failedFiles"), ("skipped", "skippedFiles")):
            listed = len(getattr(self, files))
            total = getattr(self, count)
            if total is None:
                setattr(self, count, listed)
            elif total < listed:
                raise ValueError(f"{count} is {total} but {files} lists {listed} files; {count} is the full count")
        if self.phase == "ok" and self.failed:
            raise ValueError(f"phase is ok but {self.failed} files failed; report phase partial")
        return self

    @property
    def synced_at(self) -> str:
        return _rfc3339(self.syncedAt)

    @property
    def next_sync_at(self) -> str | None:
        return _rfc3339(self.nextSyncAt) if self.nextSyncAt is not None else None

    @property
    def last_success_at(self) -> str | None:
        return _rfc3339(self.lastSuccessAt) if self.lastSuccessAt is not None else None


class FileIssueInfo(Body):
    path: str
    reason: str
    code: str | None


class SyncStatusInfo(Body):
    """A source's last reported sync (camelCase, like the rest of the API)."""

    commit: str | None
    phase: Literal["ok", "partial", "error"]
    documents: int
    failed: int
    skipped: int
    added: int
    modified: int
    deleted: int
    unchanged: int
    failedFiles: list[FileIssueInfo]
    skippedFiles: list[FileIssueInfo]
    syncedAt: str
    nextSyncAt: str | None
    message: str | None
    lastSuccessAt: str | None = None
    freshness: FreshnessInfo | None = None


class SyncStatusResponse(Body):
    sourceIdentifier: str
    stored: bool  # false: a report with a later syncedAt is already stored, and stays
    sync: SyncStatusInfo


class SourceInfo(Body):
    sourceIdentifier: str
    documents: int
    chunks: int
    lastIngestedAt: str | None
    sync: SyncStatusInfo | None = None


class SourceList(Body):
    sources: list[SourceInfo]


class SourceStatusInfo(Body):
    """One source's counts: what the operator compares with what it synced (drift)."""

    sourceIdentifier: str
    documents: int
    chunks: int
    incompleteDocuments: int
    lastIngestedAt: str | None
    collectionEpoch: str
    sync: SyncStatusInfo | None = None


class SearchFilterBody(Body):
    # Checked in _sources, not by the SourceIdentifier type, so that errors name this field, not a union branch.
    sourceIdentifier: StrictStr | list[StrictStr] | None = None
    uriPrefix: Uri | None = None
    metadata: dict[str, Scalar] = Field(default_factory=dict)
    # Only documents of this documentation version (e.g. "2.21"); without it, the newest version of each page.
    version: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[\w.+-]+$")] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, metadata: dict[str, Scalar]) -> dict[str, Scalar]:
        _check_metadata(metadata)
        return metadata

    @field_validator("sourceIdentifier")
    @classmethod
    def _sources(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not 1 <= len(value) <= 100:
            raise ValueError("sourceIdentifier list must hold 1 to 100 values")
        for item in [value] if isinstance(value, str) else value or []:
            check_source_identifier(item)
        return value


def usable_text(text: str, name: str) -> str:
    """The one rule for free text the service embeds: something to search for, and valid UTF-8."""
    if not text.strip():
        raise ValueError(f"{name} must contain a non-whitespace character")
    if "\x00" in text or not _encodable(text):
        raise ValueError(f"{name} must not contain NUL characters or lone surrogates")
    return text


# A search query's length; an ask's question may be longer (MAX_QUESTION_CHARS), and an extractive
# ask searches its first MAX_QUERY_CHARS characters (the embedder reads about as many).
MAX_QUERY_CHARS = 1000


class SearchRequest(Body):
    query: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
    limit: Annotated[StrictInt, Field(ge=1, le=100)] = 10
    mode: Literal["hybrid", "dense", "keyword"] = "hybrid"
    filter: SearchFilterBody = Field(default_factory=SearchFilterBody)
    # One result per page (its best chunk, newest version first); false gives every matching chunk.
    collapse: StrictBool = True

    @field_validator("query")
    @classmethod
    def _not_blank(cls, query: str) -> str:
        return usable_text(query, "query")


class SearchResult(Body):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    id: str
    uri: str
    chunkIndex: int
    totalChunks: int
    content: str
    score: float  # the fusion's score: orders results within one response, means nothing across queries
    relevance: float  # calibrated in [0, 1]: comparable across queries (see docs/user/api.md)
    title: str | None
    headings: list[str]
    metadata: dict[str, MetadataValue]
    sourceIdentifier: str | None
    version: str | None = None  # the documentation version of the page shown
    otherVersions: list[str] = Field(default_factory=list)  # other versions of the page that matched, newest first
    moreMatches: int = 0  # more chunks of this document that matched (collapsed into this result)
    # Where in the original file the chunk starts: a PDF's page (link `uri#page=N`) or a
    # notebook's cell, both 1-based; null for other formats.
    page: int | None = None
    cell: int | None = None
    # The stores that returned this page: the local store's name (SEARCHSVC_STORE_NAME) and/or peers'.
    stores: list[str] = Field(default_factory=list)


class UnansweredPeer(Body):
    """A peer in the caller's reach that is not in this response, and why: timeout, error, malformed,
    oversized, open-circuit (its breaker is open) or scope-undecided."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str
    reason: str


class SearchResponse(Body):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    query: str
    mode: str
    results: list[SearchResult]
    tookMs: float
    # True when no result reaches the relevance threshold (SEARCHSVC_RELEVANCE_THRESHOLD): the
    # results are the closest there are, not answers.
    nothingRelevant: bool = False
    # True when a peer in the caller's reach did not answer: the results are from the other stores.
    partial: bool = False
    unanswered_peers: list[UnansweredPeer] = Field(default_factory=list)


MAX_QUESTION_CHARS = 2000


class AskRequest(Body):
    question: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUESTION_CHARS)]
    # Narrows the caller's scope, never widens it: a source outside the scope is simply not searched.
    sources: list[StrictStr] | None = Field(None, min_length=1, max_length=100)
    # The same filter as a search's, applied to every search of the ask; `sources` is its older spelling.
    filter: SearchFilterBody = Field(default_factory=SearchFilterBody)
    maxSearches: Annotated[StrictInt, Field(ge=1, le=5)] = 3
    stream: StrictBool = False

    @field_validator("question")
    @classmethod
    def _question(cls, question: str) -> str:
        return usable_text(question, "question")

    @field_validator("sources")
    @classmethod
    def _sources(cls, sources: list[str] | None) -> list[str] | None:
        for source in sources or []:
            check_source_identifier(source)
        return sources

    @model_validator(mode="after")
    def _one_source_list(self) -> AskRequest:
        # Two lists would have to be intersected, and an empty intersection has no filter to say it.
        if self.sources is not None and self.filter.sourceIdentifier is not None:
            raise ValueError("give the sources to ask in 'sources' or in 'filter.sourceIdentifier', not both")
        return self

    def search_filter(self) -> SearchFilterBody:
        """The filter every search of this ask runs with: `filter`, with `sources` folded in."""
        if self.sources is None:
            return self.filter
        return self.filter.model_copy(update={"sourceIdentifier": self.sources})


class ChunkRef(Body):
    """A chunk an answer used; `n` is the number the answer's [n] markers use. `page` is a PDF page,
    `cell` a notebook cell, `version` the documentation version, where the chunk has one."""

    n: int
    id: str
    uri: str
    title: str | None
    headings: list[str]
    chunkIndex: int
    sourceIdentifier: str | None
    page: int | None = None
    cell: int | None = None
    version: str | None = None
    stores: list[str] = Field(default_factory=list)  # the stores that returned it; its text is the first's


class AskSource(ChunkRef):
    """A chunk retrieved while answering: `score` orders one search's results (the fusion's), `relevance`
    is calibrated in [0, 1] and comparable across searches, as in SearchResult."""

    score: float
    relevance: float


class AskCitation(ChunkRef):
    """A retrieved chunk the answer cites; `quote` is its sentence closest to the citing one."""

    quote: str


class AskSearch(Body):
    query: str
    results: int
    refs: list[int]  # the numbers of the chunks it returned (a chunk found twice keeps its first number)


class AskUsage(Body):
    promptTokens: int = 0
    completionTokens: int = 0


class AskResponse(Body):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    answer: str
    mode: Literal["llm", "extractive"]
    grounded: bool
    citations: list[AskCitation]
    sourcesRetrieved: list[AskSource]
    searches: list[AskSearch]
    droppedCitations: int
    usage: AskUsage
    # As in SearchResponse: a peer in the caller's reach missed at least one of the ask's searches.
    partial: bool = False
    unanswered_peers: list[UnansweredPeer] = Field(default_factory=list)


class AskSearchEvent(Body):
    """Stream event `search`: one search ran; `sources` are the chunks it numbered for the first time."""

    query: str
    results: int
    refs: list[int]
    sources: list[AskSource]


class AskDeltaEvent(Body):
    """Stream event `delta`: the next piece of the answer, citation markers already verified."""

    text: str


class ErrorDetail(Body):
    code: str
    message: str
    details: dict[str, object] = Field(default_factory=dict)


class ErrorResponse(Body):
    error: ErrorDetail


class QueryCountInfo(Body):
    query: str
    count: int
    lastAt: str


class QueryScoreInfo(Body):
    query: str
    count: int
    topScore: float


class InsightsResponse(Body):
    """GET /api/v1/insights: what was searched in the window, as far as the caller's scope reaches."""

    window: Literal["24h", "7d", "30d"]
    enabled: bool  # false: the query log is switched off (SEARCHSVC_QUERY_LOG=off)
    total: int
    topQueries: list[QueryCountInfo]
    zeroResult: list[QueryCountInfo]
    lowScore: list[QueryScoreInfo]
    byOrigin: dict[str, int]
    latencyP50Ms: float | None
    latencyP95Ms: float | None
