"""The ask route: a grounded answer as JSON, or as server-sent events with `"stream": true`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse

from kbsearch.api.auth import ReaderDep
from kbsearch.deps import AskDep
from kbsearch.presenters import error_response
from kbsearch.schemas.ask import AskRequest, AskResponse
from kbsearch.schemas.system import ErrorResponse
from kbsearch.services.answers.ask import AskEvent

router = APIRouter(
    prefix="/api/v1",
    tags=["ask"],
    responses={code: {"model": ErrorResponse} for code in (401, 422, 502, 503, 504)},
)


@router.post(
    "/ask",
    response_model=AskResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "The answer, or its events when streamed."}},
)
async def ask(body: AskRequest, service: AskDep, caller: ReaderDep) -> Response | AskResponse:
    """Answer a question from the caller's sources, citing only chunks retrieved for it."""
    if not body.stream:
        return await service.ask(body, caller)
    events = service.stream(body, caller)
    first = await anext(events)
    if isinstance(first.data, ErrorResponse):  # nothing sent yet: the failure can still be an honest status
        await events.aclose()
        error = first.data.error
        return error_response(first.status, error.code, error.message, error.details)
    return StreamingResponse(
        _server_sent(first, events),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},  # no proxy buffering of the stream
    )


async def _server_sent(first: AskEvent, rest: AsyncGenerator[AskEvent]) -> AsyncIterator[str]:
    async with aclosing(rest):  # a client that goes away stops the model and the searches
        yield first.server_sent()
        async for event in rest:
            yield event.server_sent()
