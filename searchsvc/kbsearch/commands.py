"""Commands: what a caller asks of a service, in the domain's words, whatever face it came through.

Each wire body (kbsearch.schemas) makes its command with one `to_command()` at the edge; services,
peers and the rebuild take these and import nothing of the wire schemas (a contract in pyproject).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from kbsearch.models import MetadataValue, SearchFilter, SearchMode, SyncStatus


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """PUT a document: its text (or base64 bytes), metadata and format, validated at the edge."""

    uri: str
    content: str
    metadata: dict[str, MetadataValue] = field(default_factory=dict)
    content_type: str | None = None  # a media type or format name; None: the URI's extension decides
    content_encoding: str = "utf-8"  # "utf-8" or "base64"

    @property
    def source_identifier(self) -> str | None:
        value = self.metadata.get("sourceIdentifier")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A search: `filter.source_identifiers` is what the caller asked for (None: every source it may
    read); the service narrows it to the caller's scope."""

    query: str
    limit: int = 10
    mode: SearchMode = "hybrid"
    filter: SearchFilter = field(default_factory=SearchFilter)
    collapse: bool = True  # one result per page; False: every matching chunk
    case_sensitive: bool = False  # literal mode only: the text's case must match too


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """How far a running sync is, as its syncer reports it (the service stamps when it came)."""

    stage: str
    done: int
    total: int | None
    started_at: datetime


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a syncer reports: one sync's outcome (the status to store, and when the sync ended, kept
    as a datetime: the service refuses a report dated beyond its clock skew), or a running sync's progress.

    A new field of the report goes on SyncStatus and in the wire body's `to_command()`."""

    source_identifier: str
    status: SyncStatus | None = None  # the outcome; None in a progress report
    synced_at: datetime | None = None
    progress: ProgressReport | None = None


WriteStatus = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True, slots=True)
class DocumentWritten:
    """What a PUT did (the presenters make the response body of it)."""

    uri: str
    status: WriteStatus
    checksum: str
    chunks: int
    chunks_embedded: int
