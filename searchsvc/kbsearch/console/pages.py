"""The console's read pages: search, sources, documents, one document, insights. Each calls the services REST calls."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Literal, cast, get_args

from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError
from starlette.responses import HTMLResponse

from kbsearch.aio.deadline import DeadlineExceeded, call_with_deadline
from kbsearch.aio.runtime import in_thread
from kbsearch.console.markdown import Passage, RenderedDocument, render_document
from kbsearch.console.rendering import is_web, render
from kbsearch.console.session import console_caller
from kbsearch.deps import ContextDep, DocumentReadsDep, InsightsDep, SearchDep
from kbsearch.deps import context as app_context
from kbsearch.errors import InvalidRequestError
from kbsearch.models import SearchMode
from kbsearch.peers.router import Unanswered
from kbsearch.presenters import validation_message
from kbsearch.schemas.search import SearchRequest
from kbsearch.services.access.scope import Caller

router = APIRouter(prefix="/ui", include_in_schema=False)
Reader = Annotated[Caller, Depends(console_caller)]
Text = Annotated[str, Query(max_length=2000)]

MODES: tuple[str, ...] = get_args(SearchMode)
WINDOWS = ("24h", "7d", "30d")
Window = Literal["24h", "7d", "30d"]
RESULTS_LIMIT = 10
DOCUMENTS_PAGE = 25
# A 100 kB page of docs renders in about 0.3 s; a 1 MiB one in about 3 s; hostile text can take far longer.
RENDER_CPU_SECONDS = 4.0


def _partial(request: Request, target: str) -> bool:
    """An htmx request that swaps only `target`: answer with that fragment, not the whole page."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-target") == target


async def source_names(request: Request, caller: Caller) -> list[str]:
    """The sources for a filter menu: the catalog's ids (read at most once a second) within the caller's scope.

    Cheaper than DocumentReads.sources, whose per-source counts the menus do not show.
    """
    catalog = app_context(request).catalog
    known = await catalog.known()
    allowed = await caller.scope.resolve(catalog)
    return sorted(known if allowed is None else known & set(allowed))


def _render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    return render(request, name, context, status_code)


@router.get("/")
async def search_page(
    request: Request,
    caller: Reader,
    search: SearchDep,
    q: Text = "",
    mode: str = "hybrid",
    source: Text = "",
    version: Text = "",
) -> HTMLResponse:
    mode = mode if mode in MODES else "hybrid"
    hits, error, took_ms, nothing_relevant = [], None, None, False
    unanswered: tuple[Unanswered, ...] = ()
    if q.strip():
        try:
            body: dict[str, Any] = {"query": q, "limit": RESULTS_LIMIT, "mode": mode, "filter": {}}
            if source:
                body["filter"]["sourceIdentifier"] = source
            if version.strip():
                body["filter"]["version"] = version.strip()
            outcome = await search.search(SearchRequest.model_validate(body).to_command(), caller, origin="ui")
            hits, took_ms, nothing_relevant = outcome.hits, outcome.took_ms, outcome.nothing_relevant
            unanswered = outcome.unanswered
        except ValidationError as exc:
            error = validation_message(exc, style="bare")
        except InvalidRequestError as exc:
            error = exc.message
    context = {
        "q": q,
        "mode": mode,
        "source": source,
        "version": version.strip(),
        "hits": hits,
        "error": error,
        "took_ms": took_ms,
        "nothing_relevant": nothing_relevant,
        "unanswered": unanswered,  # peers that did not answer: the page says the results are partial
        "store": search.store_name,
    }
    if _partial(request, "results"):
        return _render(request, "_results.html", context)
    sources = await source_names(request, caller)
    ask = {"ask": True, "question": q, "answer": None, "ask_error": None}  # every ready service answers questions
    status = 422 if error else 200
    return _render(request, "search.html", context | ask | {"sources": sources, "modes": MODES}, status)


@router.get("/sources")
async def sources_page(
    request: Request, caller: Reader, documents: DocumentReadsDep, ctx: ContextDep, insights: InsightsDep
) -> HTMLResponse:
    sources = await documents.sources(caller)
    status = ctx.rebuild.status()
    # Beside each source's judged questions: what searches found little of (the insights page's lists).
    missed = await insights.insights(caller, "24h")
    return _render(request, "sources.html", {"sources": sources, "rebuild": status, "missed": missed})


@router.get("/documents")
async def documents_page(
    request: Request,
    caller: Reader,
    documents: DocumentReadsDep,
    source: Text = "",
    prefix: Text = "",
    cursor: Annotated[str, Query(max_length=64)] = "",
) -> HTMLResponse:
    records: list[Any] = []
    next_cursor, error = None, None
    try:
        records, next_cursor = await documents.list(
            source_identifier=source or None,
            uri_prefix=prefix or None,
            limit=DOCUMENTS_PAGE,
            cursor=cursor or None,
            caller=caller,
        )
    except InvalidRequestError as exc:
        error = exc.message
    context = {
        "records": records,
        "next_cursor": next_cursor,
        "source": source,
        "prefix": prefix,
        "paged": bool(cursor),
        "error": error,
    }
    if _partial(request, "documents"):
        return _render(request, "_documents.html", context)
    sources = await source_names(request, caller)
    return _render(request, "documents.html", context | {"sources": sources}, 422 if error else 200)


@router.get("/document")
async def document_page(
    request: Request,
    caller: Reader,
    documents: DocumentReadsDep,
    uri: Text,
    chunk: Annotated[int | None, Query(ge=0)] = None,
) -> HTMLResponse:
    record = await documents.document(uri, caller)
    if record is None:  # absent and out of scope look the same
        return _render(request, "missing.html", {"uri": uri}, 404)
    found = await documents.text(uri, caller)
    chunks = await documents.chunks(uri, caller)
    text = found[1] if found is not None else ""
    hit = next((c for c in chunks if c.chunk_index == chunk), None)
    passage = Passage(hit.start, hit.end) if hit and hit.start is not None and hit.end is not None else None
    base = record.uri if is_web(record.uri) else None
    render = partial(render_document, text, base=base, passage=passage, title=record.title)
    try:  # in a worker thread, under a CPU budget: hostile markdown must not hold the service
        rendered: RenderedDocument | None = await in_thread(call_with_deadline, RENDER_CPU_SECONDS, render)
    except DeadlineExceeded:
        rendered = None  # shown as its text instead
    context = {
        "record": record,
        "chunks": chunks,
        "document_html": rendered.html if rendered is not None else None,
        "text": text,
        # No passage in the text (chunks without offsets): the chunk itself is the link's target.
        "target_chunk": hit.chunk_index if hit is not None and (rendered is None or not rendered.has_passage) else None,
    }
    return _render(request, "document.html", context)


@router.get("/insights")
async def insights_page(request: Request, caller: Reader, service: InsightsDep, window: str = "24h") -> HTMLResponse:
    window = window if window in WINDOWS else "24h"
    insights = await service.insights(caller, cast(Window, window))  # one of WINDOWS now
    return _render(request, "insights.html", {"insights": insights, "window": window, "windows": WINDOWS})
