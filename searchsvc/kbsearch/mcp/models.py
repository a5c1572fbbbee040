"""The MCP tools' typed outputs (their outputSchema and structuredContent).

Search, source listing, ingest and delete return the REST API's own response bodies (kbsearch.schemas),
so an agent and a program read the same records; the models here are for what REST has no body for.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbsearch.schemas.sources import SourceInfo

# Bounds of the tools' paging arguments; the tools refuse anything outside them by name.
MAX_FETCH_CHARS = 100_000
DEFAULT_FETCH_CHARS = 8_000
MAX_CONTEXT_WINDOW = 10


class Output(BaseModel):
    # As the REST bodies (schemas.fields.Body): snake_case attributes, camelCase keys in the JSON.
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", populate_by_name=True)


class ContextChunk(Output):
    chunk_index: int
    headings: list[str]
    content: str
    start: int | None = Field(description="Character offset of the chunk in the body; null for older documents.")
    end: int | None


class ChunkContext(Output):
    """The chunks around one chunk of a document, in order."""

    uri: str
    title: str | None
    source_identifier: str | None
    chunk_index: int = Field(description="The chunk asked for.")
    total_chunks: int
    chunks: list[ContextChunk]


class SourcesOverview(Output):
    """Totals over the sources the caller may read, and each source as GET /api/v1/sources lists it."""

    documents: int
    chunks: int
    sources: list[SourceInfo]
