"""Search routes: POST for programs, GET for curl and browsers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from kbsearch.api.auth import ReaderDep
from kbsearch.api.params import SourceIdListQuery, UriPrefixQuery
from kbsearch.deps import SearchDep
from kbsearch.errors import InvalidRequestError
from kbsearch.peers.client import PEER_SEARCH_HEADER
from kbsearch.presenters import field_problems, search_response, validation_message
from kbsearch.schemas.search import SearchRequest, SearchResponse
from kbsearch.schemas.system import ErrorResponse
from kbsearch.services.access.scope import Caller
from kbsearch.services.search.service import SearchService

router = APIRouter(
    prefix="/api/v1",
    tags=["search"],
    responses={code: {"model": ErrorResponse} for code in (401, 422, 503)},
)


async def _run(
    request: SearchRequest, service: SearchService, http: Request, response: Response, caller: Caller
) -> SearchResponse:
    # Another service's fan-out asking this one: answer from this store alone (no peer loops).
    command = request.to_command()
    outcome = await service.search(command, caller, ask_peers=PEER_SEARCH_HEADER not in http.headers)
    # Query embedding and engine time apart, for benchmarks and dashboards.
    response.headers["Server-Timing"] = f"embed;dur={outcome.embed_ms:.2f}, engine;dur={outcome.engine_ms:.2f}"
    return search_response(command, outcome)


@router.post("/search")
async def search(
    body: SearchRequest, service: SearchDep, http: Request, response: Response, caller: ReaderDep
) -> SearchResponse:
    """Hybrid (default), dense, keyword or literal search with optional filters, within the caller's sources.

    Literal finds the chunks that hold the query as written (whole words; case-folded unless
    `caseSensitive`), most occurrences first; its query is at most 256 characters.
    """
    return await _run(body, service, http, response, caller)


@router.get("/search")
async def search_get(
    service: SearchDep,
    http: Request,
    response: Response,
    caller: ReaderDep,
    q: Annotated[str, Query(min_length=1, max_length=1000)],
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    mode: Literal["hybrid", "dense", "keyword", "literal"] = "hybrid",
    sourceIdentifier: SourceIdListQuery = None,
    uriPrefix: UriPrefixQuery = None,
    version: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    collapse: bool = True,
    caseSensitive: bool = False,
) -> SearchResponse:
    """The same search as POST, from query parameters."""
    filter_body: dict[str, Any] = {}
    if sourceIdentifier:
        filter_body["sourceIdentifier"] = sourceIdentifier if len(sourceIdentifier) > 1 else sourceIdentifier[0]
    if uriPrefix:
        filter_body["uriPrefix"] = uriPrefix
    if version:
        filter_body["version"] = version
    try:
        request = SearchRequest(
            query=q, limit=limit, mode=mode, filter=filter_body, collapse=collapse, case_sensitive=caseSensitive
        )
    except ValidationError as exc:
        message = validation_message(exc, style="first", default="query")
        raise InvalidRequestError(message, details={"errors": field_problems(exc, default="query")}) from exc
    return await _run(request, service, http, response, caller)
