"""Ask: a grounded answer to a question, citing only chunks the caller's own searches retrieved.

With a chat model (llm mode) the model runs a tool loop: it may call `search` up to
`maxSearches` times, every call the same scoped search as the REST API (origin "ask"), and then
answers with [n] markers. Without one (extractive mode) one search with the question, and one
within its first page when more of that page's chunks matched, feed an extractive answer
(kbsearch.services.answers.extractive). Both modes produce the same events in the same order —
`search`*, `delta`*, `citation`*, then `done` — and `ask` is `stream` read to its end, so the JSON
answer and the streamed one never differ.

Grounded means the answer cites at least one retrieved chunk whose calibrated relevance reaches
SEARCHSVC_ASK_MIN_RELEVANCE. When retrieval found nothing (llm: the searches
returned no chunk at all; extractive: no retrieved chunk is relevant, or no sentence reached the
similarity threshold) the answer is NOTHING_FOUND, ungrounded, and cites nothing. Text the model writes
before anything was retrieved is not part of the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from kbsearch import tracing
from kbsearch.errors import LLMUnavailableError, ServiceError
from kbsearch.llm.chat import ChatClient, ChatMessage, TextPiece, ToolCall, ToolSpec, parse_arguments
from kbsearch.metrics import Metrics
from kbsearch.models import SearchHit
from kbsearch.schemas.ask import (
    AskCitation,
    AskDeltaEvent,
    AskRequest,
    AskResponse,
    AskSearch,
    AskSearchEvent,
    AskSource,
    AskUsage,
)
from kbsearch.schemas.search import MAX_QUERY_CHARS, SearchRequest, UnansweredPeer
from kbsearch.schemas.system import ErrorDetail, ErrorResponse
from kbsearch.services.access.scope import Caller
from kbsearch.services.answers.citations import CitationFilter, RetrievalLedger, citing_sentence, quote
from kbsearch.services.answers.extractive import Extract, answer_pieces, extract
from kbsearch.services.search.service import SearchService
from kbsearch.services.serving import Serving
from kbsearch.settings import AskSettings

log = logging.getLogger(__name__)

# Chunks of the first page an extractive answer reads besides the one that ranked it first.
PAGE_CHUNKS = 4
NOTHING_FOUND = "I found nothing in the knowledge base that answers this question."
AskEventName = Literal["search", "delta", "citation", "done", "error"]

SEARCH_TOOL = ToolSpec(
    name="search",
    description=(
        "Search the knowledge base (hybrid keyword and semantic search). Returns numbered chunks; "
        "cite them in your answer as [n]."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to look for, in a few words."}},
        "required": ["query"],
        "additionalProperties": False,
    },
)
SYSTEM_PROMPT = """You answer questions from a knowledge base, using only what its `search` tool returns.
Search before you answer; you may search at most {searches} time(s), so choose your queries well.
Every search result starts with its number, like [3]. After each statement, cite the result it comes \
from as [3]; cite several as [3][5]. Cite only numbers you were given.
If the results do not answer the question, say that the knowledge base does not cover it.
Answer concisely, in the language of the question, in plain text or simple markdown."""


@dataclass(frozen=True, slots=True)
class AskEvent:
    """One event of an ask. `data` is the event's JSON body; `status` is an error event's HTTP status."""

    event: AskEventName
    data: BaseModel
    status: int = 200

    def server_sent(self) -> str:
        """The event as one text/event-stream frame; every face that streams an ask sends exactly this."""
        return f"event: {self.event}\ndata: {self.data.model_dump_json(by_alias=True)}\n\n"


@dataclass(slots=True)
class _Run:
    """What one ask has gathered so far."""

    request: AskRequest
    caller: Caller
    ledger: RetrievalLedger = field(default_factory=RetrievalLedger)
    searches: list[AskSearch] = field(default_factory=list)
    usage: AskUsage = field(default_factory=AskUsage)
    citations: CitationFilter = field(init=False)
    unanswered: dict[str, str] = field(default_factory=dict)  # peers that missed a search: name -> reason

    def __post_init__(self) -> None:
        self.citations = CitationFilter(lambda n: n in self.ledger)


class AskService:
    def __init__(
        self,
        *,
        search: SearchService,
        serving: Serving,
        chat: ChatClient | None,
        metrics: Metrics,
        settings: AskSettings,
    ) -> None:
        self.search = search
        self.serving = serving  # the embedder that reads the sentences: the collection's
        self.chat = chat
        self.metrics = metrics
        self.settings = settings

    @property
    def mode(self) -> Literal["llm", "extractive"]:
        return "llm" if self.chat is not None else "extractive"

    async def ask(self, request: AskRequest, caller: Caller) -> AskResponse:
        """The whole answer at once; a failure raises its ServiceError (502, 504, 503...)."""
        response = None
        async with aclosing(self._events(request, caller)) as events:
            async for event in events:
                if isinstance(event.data, AskResponse):
                    response = event.data
        assert response is not None, "an ask ends with its done event or an error"
        return response

    async def stream(self, request: AskRequest, caller: Caller) -> AsyncGenerator[AskEvent]:
        """The answer as events; a failure becomes one final `error` event (with its HTTP status)."""
        try:
            async with aclosing(self._events(request, caller)) as events:
                async for event in events:
                    yield event
        except ServiceError as exc:
            yield AskEvent(
                "error",
                ErrorResponse(error=ErrorDetail(code=exc.code, message=exc.message, details=exc.details)),
                exc.status_code,
            )
        except Exception:
            log.exception("ask failed")
            detail = ErrorDetail(
                code="INTERNAL_ERROR", message="the service hit an unexpected error; it has been logged"
            )
            yield AskEvent("error", ErrorResponse(error=detail), 500)

    async def _events(self, request: AskRequest, caller: Caller) -> AsyncGenerator[AskEvent]:
        started = time.perf_counter()
        run = _Run(request, caller)
        outcome = "error"
        try:
            with tracing.ask(self.mode, self.chat.model if self.chat is not None else None) as span:
                answering = self._llm(run) if self.chat is not None else self._extractive(run)
                async with aclosing(answering) as events:
                    async for event in events:
                        yield event
                async for event in self._conclude(run):
                    yield event
                response = self._response(run)
                outcome = "grounded" if response.grounded else "ungrounded"
                span.answered(outcome, run.usage.prompt_tokens, run.usage.completion_tokens)
            yield AskEvent("done", response)
        except ServiceError as exc:
            outcome = exc.code
            raise
        except (GeneratorExit, asyncio.CancelledError):
            if outcome == "error":  # the client went away before the answer was done
                outcome = "cancelled"
            raise
        finally:
            self.metrics.asks.labels(self.mode, outcome).inc()
            self.metrics.ask_seconds.labels(self.mode).observe(time.perf_counter() - started)

    async def _llm(self, run: _Run) -> AsyncGenerator[AskEvent]:
        assert self.chat is not None
        deadline = time.monotonic() + self.settings.ask_timeout_s
        budget = run.request.max_searches
        messages = [
            ChatMessage("system", SYSTEM_PROMPT.format(searches=budget)),
            ChatMessage("user", run.request.question),
        ]
        # One turn per search, one to answer, one spare for a model that wasted a call on bad arguments.
        turns = budget + 2
        for turn in range(turns):
            offer = [SEARCH_TOOL] if budget > 0 and turn < turns - 1 else []
            text: list[str] = []
            tool_calls: tuple[ToolCall, ...] = ()
            # A turn's text follows an earlier turn's as a new paragraph (models rarely write in both).
            separator = "\n\n" if run.citations.text.strip() else ""
            async with aclosing(self.chat.turn(messages, offer, deadline=deadline)) as pieces:
                async for piece in pieces:
                    if isinstance(piece, TextPiece):
                        text.append(piece.text)
                        # Before anything was retrieved the model has nothing to cite: that text is not answer.
                        if len(run.ledger) and (out := run.citations.feed(separator + piece.text)):
                            yield AskEvent("delta", AskDeltaEvent(text=out))
                        separator = ""
                    else:
                        run.usage.prompt_tokens += piece.prompt_tokens
                        run.usage.completion_tokens += piece.completion_tokens
                        tool_calls = piece.tool_calls
            if not tool_calls:
                return
            if not offer:
                raise LLMUnavailableError("the chat model kept calling tools after its searches were used up")
            messages.append(ChatMessage("assistant", "".join(text), tool_calls=tool_calls))
            for call in tool_calls:
                reply, event = await self._tool(run, call, budget)
                if event is not None:
                    budget -= 1
                    yield event
                messages.append(ChatMessage("tool", reply, tool_call_id=call.id))

    async def _tool(self, run: _Run, call: ToolCall, budget: int) -> tuple[str, AskEvent | None]:
        """Run one tool call: the reply the model reads, and the search event when a search ran."""
        if call.name != SEARCH_TOOL.name:
            return f"error: there is no tool {call.name!r}; the only tool is 'search'", None
        if budget <= 0:
            return "error: no searches left; answer with what you have", None
        try:
            query = parse_arguments(call.arguments).get("query")
            if not isinstance(query, str):
                raise ValueError("'query' must be a string")
            hits, event = await self._search(run, query)
        except (ValueError, ValidationError) as exc:
            return f"error: invalid search arguments: {_first_problem(exc)}", None
        if not hits:
            return "No results.", event
        numbers = event.data.refs if isinstance(event.data, AskSearchEvent) else []
        return "\n\n".join(_for_model(n, hit) for n, hit in zip(numbers, hits, strict=True)), event

    def _relevant(self, hit: SearchHit) -> bool:
        return (hit.relevance or 0.0) >= self.settings.ask_min_relevance

    async def _extractive(self, run: _Run) -> AsyncGenerator[AskEvent]:
        # A question may be longer than a search query; MiniLM reads ~256 tokens, about this many characters.
        query = run.request.question.strip()[:MAX_QUERY_CHARS]
        hits, search, new = await self._searched(run, query)
        searched = [(search, new)]
        extracts: list[Extract] = []
        if any(self._relevant(hit) for hit in hits):  # else the answer says so (NOTHING_FOUND)
            if hits[0].more_matches:
                # The first page is most often the page; its answer may sit in another of its chunks
                # than the one that ranked it: those chunks too, from the same search within that page.
                _, search, new = await self._searched(run, query, within=hits[0].uri)
                searched.append((search, new))
            extracts = await extract(
                run.request.question,
                run.ledger,
                # The sentences the caller may read, in its own partition.
                self.serving.embedder.partition(run.caller.partition),
                max_sentences=self.settings.ask_answer_sentences,
                min_similarity=self.settings.ask_min_similarity,
            )
        # Citations are numbered in the order the answer reads them: [1] first, then [2]...; the chunks
        # the answer does not cite follow. The searches are announced once the numbers are final.
        mapping = run.ledger.renumber(e.n for e in extracts)
        for search in run.searches:
            search.refs = [mapping[n] for n in search.refs]
        for search, new in searched:
            sources = [_source(mapping[n], run.ledger.hit(mapping[n])) for n in new]
            body = AskSearchEvent(query=search.query, results=search.results, refs=search.refs, sources=sources)
            yield AskEvent("search", body)
        renumbered = [replace(e, passage=replace(e.passage, n=mapping[e.n])) for e in extracts]
        for text, verbatim in answer_pieces(renumbered):
            # Code is passed on as written: a `[0]` in it is code, not a citation marker.
            if out := (run.citations.verbatim(text) if verbatim else run.citations.feed(text)):
                yield AskEvent("delta", AskDeltaEvent(text=out))

    async def _search(self, run: _Run, query: str) -> tuple[list[SearchHit], AskEvent]:
        """The caller's scoped search (see _searched), and its search event."""
        hits, search, new = await self._searched(run, query)
        sources = [_source(n, run.ledger.hit(n)) for n in new]
        return hits, AskEvent(
            "search", AskSearchEvent(query=query, results=search.results, refs=search.refs, sources=sources)
        )

    async def _searched(
        self, run: _Run, query: str, *, within: str | None = None
    ) -> tuple[list[SearchHit], AskSearch, list[int]]:
        """The caller's scoped search, narrowed by the ask's filter; its hits numbered in the ledger.

        `within` a document's URI: its best PAGE_CHUNKS chunks instead of one result per page. Returns
        the hits, the search as recorded, and the ledger numbers it added.
        """
        search_filter = run.request.search_filter()
        if within is not None:
            search_filter = search_filter.model_copy(update={"uri_prefix": within})
        request = SearchRequest(
            query=query,
            limit=self.settings.ask_results_per_search if within is None else PAGE_CHUNKS,
            filter=search_filter,
            collapse=within is None,
        ).to_command()
        outcome = await self.search.search(request, run.caller, origin="ask")
        numbers, new = run.ledger.add(outcome.named_hits())
        run.unanswered.update((u.name, u.reason) for u in outcome.unanswered)
        search = AskSearch(query=query, results=len(outcome.hits), refs=numbers)
        run.searches.append(search)
        return outcome.hits, search, new

    async def _conclude(self, run: _Run) -> AsyncIterator[AskEvent]:
        """The rest of the answer (held-back text, or NOTHING_FOUND), then one citation event per cited chunk."""
        if out := run.citations.finish():
            yield AskEvent("delta", AskDeltaEvent(text=out))
        if not run.citations.text.strip():  # nothing retrieved, nothing relevant, or only dropped markers
            yield AskEvent("delta", AskDeltaEvent(text=NOTHING_FOUND))
            run.citations.text = NOTHING_FOUND
        for citation in self._citations(run):
            yield AskEvent("citation", citation)

    def _citations(self, run: _Run) -> list[AskCitation]:
        answer = run.citations.text
        return [_citation(n, run.ledger.hit(n), citing_sentence(answer, n)) for n in run.citations.cited]

    def _response(self, run: _Run) -> AskResponse:
        cited = set(run.citations.cited)
        return AskResponse(
            answer=run.citations.text,
            mode=self.mode,
            # Grounded: at least one cited passage is relevant by the calibrated measure, not merely cited.
            grounded=any(self._relevant(run.ledger.hit(n)) for n in cited),
            citations=self._citations(run),
            sources_retrieved=[_source(n, hit) for n, hit in run.ledger.numbered() if n not in cited],
            searches=run.searches,
            dropped_citations=run.citations.dropped,
            usage=run.usage,
            partial=bool(run.unanswered),
            unanswered_peers=[UnansweredPeer(name=k, reason=v) for k, v in run.unanswered.items()],
        )


def _source(n: int, hit: SearchHit) -> AskSource:
    return AskSource(**_chunk_ref(n, hit), score=hit.score, relevance=hit.relevance or 0.0)


def _citation(n: int, hit: SearchHit, citing: str) -> AskCitation:
    return AskCitation(**_chunk_ref(n, hit), quote=quote(hit, citing))


def _chunk_ref(n: int, hit: SearchHit) -> dict[str, Any]:
    """The fields of schemas.ask.ChunkRef, from a hit."""
    return {
        "n": n,
        "id": hit.id,
        "uri": hit.uri,
        "title": hit.title,
        "headings": hit.headings,
        "chunk_index": hit.chunk_index,
        "source_identifier": hit.source_identifier,
        "page": hit.page,
        "cell": hit.cell,
        "version": hit.version,
        "stores": list(hit.stores),
    }


def _for_model(n: int, hit: SearchHit) -> str:
    path = " \u203a ".join([p for p in [hit.title, *hit.headings] if p])
    return f"[{n}] {path} — {hit.uri}\n{hit.content}" if path else f"[{n}] {hit.uri}\n{hit.content}"


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False, include_input=False)[0]
        return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
    return str(exc)
