"""Search: POST /api/v1/search, its filter (an ask's too) and its results."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from kbsearch.commands import SearchQuery
from kbsearch.models import SearchFilter
from kbsearch.schemas.fields import (
    MAX_METADATA_KEYS,
    Body,
    MetadataValue,
    Scalar,
    Uri,
    at_most,
    check_metadata,
    check_source_identifier,
    usable_text,
)

MAX_FILTER_SOURCES = 100


class SearchFilterBody(Body):
    # Checked in _sources, not by the SourceIdentifier type, so that errors name this field, not a union branch.
    source_identifier: Annotated[
        StrictStr | list[StrictStr] | None, at_most(MAX_FILTER_SOURCES, "sourceIdentifier")
    ] = None
    uri_prefix: Uri | None = None
    metadata: Annotated[dict[str, Scalar], at_most(MAX_METADATA_KEYS, "filter.metadata")] = Field(default_factory=dict)
    # Only documents of this documentation version (e.g. "2.21", or "source@2.21" naming the source too);
    # without it, the newest version of each page. A version no source holds is VERSION_NOT_FOUND (404).
    version: Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[\w.+-]+$")] | None = None

    @model_validator(mode="before")
    @classmethod
    def _source_at_version(cls, data: Any) -> Any:
        """`version: "team-a/docs@2.21"` is version 2.21 of that source (a version never holds '@')."""
        if not isinstance(data, dict) or not isinstance(data.get("version"), str) or "@" not in data["version"]:
            return data
        source, _, version = data["version"].rpartition("@")
        key = "source_identifier" if "source_identifier" in data else "sourceIdentifier"
        named = data.get(key)
        if named is not None and source not in ([named] if isinstance(named, str) else named):
            raise ValueError(f"version names source {source!r}, which sourceIdentifier does not include")
        return {**data, "version": version, key: named if named is not None else source}

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, metadata: dict[str, Scalar]) -> dict[str, Scalar]:
        check_metadata(metadata)
        return metadata

    @field_validator("source_identifier")
    @classmethod
    def _sources(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not value:
            raise ValueError(f"sourceIdentifier list must hold 1 to {MAX_FILTER_SOURCES} values")
        for item in [value] if isinstance(value, str) else value or []:
            check_source_identifier(item)
        return value

    def to_command(self) -> SearchFilter:
        sources = self.source_identifier
        return SearchFilter(
            source_identifiers=[sources] if isinstance(sources, str) else sources,
            uri_prefix=self.uri_prefix,
            metadata=self.metadata,
            version=self.version,
        )


# A search query's length; an ask's question may be longer (MAX_QUESTION_CHARS), and an extractive
# ask searches its first MAX_QUERY_CHARS characters (the embedder reads about as many).
MAX_QUERY_CHARS = 1000
# A literal query's length: an error message, a flag or an identifier, matched as a phrase of its words.
MAX_LITERAL_CHARS = 256


class SearchRequest(Body):
    query: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
    limit: Annotated[StrictInt, Field(ge=1, le=100)] = 10
    mode: Literal["hybrid", "dense", "keyword", "literal"] = "hybrid"
    filter: SearchFilterBody = Field(default_factory=SearchFilterBody)
    # One result per page (its best chunk, newest version first); false gives every matching chunk.
    collapse: StrictBool = True
    # Literal mode only: the text's case must match as well as its characters.
    case_sensitive: StrictBool = False

    @field_validator("query")
    @classmethod
    def _not_blank(cls, query: str) -> str:
        return usable_text(query, "query")

    @model_validator(mode="after")
    def _literal(self) -> SearchRequest:
        if self.mode != "literal":
            if self.case_sensitive:
                raise ValueError("caseSensitive applies to mode literal only")
            return self
        if len(self.query) > MAX_LITERAL_CHARS:
            raise ValueError(f"a literal query is at most {MAX_LITERAL_CHARS} characters")
        # The engine finds the text by its words: without one, no chunk can be found.
        if not any(c.isalnum() for c in self.query):
            raise ValueError("a literal query needs at least one letter or digit")
        return self

    def to_command(self) -> SearchQuery:
        """The one way a search body becomes a search: REST, MCP and the console all come through here."""
        return SearchQuery(
            query=self.query,
            limit=self.limit,
            mode=self.mode,
            filter=self.filter.to_command(),
            collapse=self.collapse,
            case_sensitive=self.case_sensitive,
        )


class SearchResult(Body):
    id: str
    uri: str
    chunk_index: int
    total_chunks: int
    content: str
    score: float  # the fusion's score: orders results within one response, means nothing across queries
    relevance: float  # calibrated in [0, 1]: comparable across queries (see docs/user/api.md)
    title: str | None
    headings: list[str]
    metadata: dict[str, MetadataValue]
    source_identifier: str | None
    version: str | None = None  # the documentation version of the page shown
    other_versions: list[str] = Field(default_factory=list)  # other versions of the page that matched, newest first
    more_matches: int = 0  # more chunks of this document that matched (collapsed into this result)
    # Where in the original file the chunk starts: a PDF's page (link `uri#page=N`) or a
    # notebook's cell, both 1-based; null for other formats.
    page: int | None = None
    cell: int | None = None
    # The stores that returned this page: the local store's name (SEARCHSVC_STORE_NAME) and/or peers'.
    stores: list[str] = Field(default_factory=list)


class UnansweredPeer(Body):
    """A peer in the caller's reach that is not in this response, and why: timeout, error, malformed,
    oversized, open-circuit (its breaker is open) or scope-undecided."""

    name: str
    reason: str


class SearchResponse(Body):
    query: str
    mode: str
    results: list[SearchResult]
    took_ms: float
    # True when no result reaches the relevance threshold (SEARCHSVC_RELEVANCE_THRESHOLD): the
    # results are the closest there are, not answers.
    nothing_relevant: bool = False
    # True when a peer in the caller's reach did not answer: the results are from the other stores.
    partial: bool = False
    unanswered_peers: list[UnansweredPeer] = Field(default_factory=list)
