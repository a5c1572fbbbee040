"""Ask: POST /api/v1/ask, its answer with citations, and the events of a streamed ask."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from kbsearch.schemas.fields import Body, check_source_identifier, usable_text
from kbsearch.schemas.search import SearchFilterBody, UnansweredPeer

MAX_QUESTION_CHARS = 2000


class AskRequest(Body):
    question: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUESTION_CHARS)]
    # Narrows the caller's scope, never widens it: a source outside the scope is simply not searched.
    sources: list[StrictStr] | None = Field(None, min_length=1, max_length=100)
    # The same filter as a search's, applied to every search of the ask; `sources` is its older spelling.
    filter: SearchFilterBody = Field(default_factory=SearchFilterBody)
    max_searches: Annotated[StrictInt, Field(ge=1, le=5)] = 3
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
        if self.sources is not None and self.filter.source_identifier is not None:
            raise ValueError("give the sources to ask in 'sources' or in 'filter.sourceIdentifier', not both")
        return self

    def search_filter(self) -> SearchFilterBody:
        """The filter every search of this ask runs with: `filter`, with `sources` folded in."""
        if self.sources is None:
            return self.filter
        return self.filter.model_copy(update={"source_identifier": self.sources})


class ChunkRef(Body):
    """A chunk an answer used; `n` is the number the answer's [n] markers use. `page` is a PDF page,
    `cell` a notebook cell, `version` the documentation version, where the chunk has one."""

    n: int
    id: str
    uri: str
    title: str | None
    headings: list[str]
    chunk_index: int
    source_identifier: str | None
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
    prompt_tokens: int = 0
    completion_tokens: int = 0


class AskResponse(Body):
    answer: str
    mode: Literal["llm", "extractive"]
    grounded: bool
    citations: list[AskCitation]
    sources_retrieved: list[AskSource]
    searches: list[AskSearch]
    dropped_citations: int
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
