"""The MCP tools' typed outputs (their outputSchema and structuredContent).

Search, source listing, ingest and delete return the REST API's own response bodies (kbsearch.schemas),
so an agent and a program read the same records; the models here are for what REST has no body for.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kbsearch.schemas.fields import MetadataValue
from kbsearch.schemas.sources import SourceInfo

# Bounds of the tools' paging arguments; the tools refuse anything outside them by name.
MAX_FETCH_CHARS = 100_000
DEFAULT_FETCH_CHARS = 8_000
MAX_CONTEXT_WINDOW = 10


class Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentText(Output):
    """One page of a document's body text, in order; `nextStart` is null on the last page."""

    uri: str
    title: str | None
    sourceIdentifier: str | None
    checksum: str
    metadata: dict[str, MetadataValue]
    ingestedAt: str
    totalChars: int = Field(description="Characters in the whole body (front matter excluded).")
    start: int = Field(description="Offset of this page's first character.")
    end: int = Field(description="Offset just past this page's last character.")
    nextStart: int | None = Field(description="Pass as `start` to read on; null when this page reaches the end.")
    text: str


class ContextChunk(Output):
    chunkIndex: int
    headings: list[str]
    content: str
    start: int | None = Field(description="Character offset of the chunk in the body; null for older documents.")
    end: int | None


class ChunkContext(Output):
    """The chunks around one chunk of a document, in order."""

    uri: str
    title: str | None
    sourceIdentifier: str | None
    chunkIndex: int = Field(description="The chunk asked for.")
    totalChunks: int
    chunks: list[ContextChunk]


class SourcesOverview(Output):
    """Totals over the sources the caller may read, and each source as GET /api/v1/sources lists it."""

    documents: int
    chunks: int
    sources: list[SourceInfo]
