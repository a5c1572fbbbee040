"""REST's authentication: `require_read` / `require_write`, and the gate that runs them before a body is read.

The Authenticator itself (kbsearch.services.access.auth) is the faces' one judge of a token; this module
asks it for the request's Caller once and caches it on `request.state`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kbsearch.aio.bodies import BodyBudget
from kbsearch.deps import authenticator, client_address, known_sources
from kbsearch.errors import ForbiddenError
from kbsearch.services.access.auth import refuse_url_token
from kbsearch.services.access.scope import Caller


async def authenticate(request: Request, *, write: bool) -> Caller:
    """The Caller of a request's Authorization header; a token in its URL is refused."""
    refuse_url_token(request.query_params)
    header = request.headers.get("authorization")
    return await authenticator(request).caller_of(
        header, known_sources(request), write=write, client=client_address(request)
    )


async def _resolve(request: Request, *, write: bool) -> Caller:
    # The gate may have resolved it already, before the body was read: once per request.
    cached: Caller | None = getattr(request.state, "caller", None)
    if cached is None:
        cached = await authenticate(request, write=write)
        request.state.caller = cached
    return cached


async def require_write(request: Request) -> Caller:
    caller = await _resolve(request, write=True)
    if not caller.may_write:
        raise ForbiddenError(f"{caller.name!r} may read but not write")
    return caller


async def require_read(request: Request) -> Caller:
    return await _resolve(request, write=False)


ReaderDep = Annotated[Caller, Depends(require_read)]
WriterDep = Annotated[Caller, Depends(require_write)]


class AuthGate:
    """ASGI middleware: a route's token check runs before the first byte of its body is read.

    FastAPI reads and parses a body before it runs a route's dependencies, so without this an
    unauthenticated client could make the service read and parse 8 MiB before its 401. The
    routes' `require_write` / `require_read` dependencies stay the one declaration of who may
    call what: when the routed request first asks for its body, the gate runs that same check
    and leaves the Caller for the route. Routes that take no body keep the check as a dependency only.

    Once the caller is known, its body's bytes are reserved in the body budget (aio/bodies.py):
    the declared Content-Length, or the largest body for a chunked one. A body that does not fit
    is refused unread (429 or 503); the bytes come back when the response is done.
    """

    def __init__(self, app: ASGIApp, *, budget: BodyBudget, max_body_bytes: int) -> None:
        self.app = app
        self.budget = budget
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        checked = False
        size = _body_size(scope, self.max_body_bytes)
        reserved: str | None = None

        async def receive_after_check() -> Message:
            nonlocal checked, reserved
            if not checked:
                checked = True
                # Routing has put the matched route in the scope by now; a ServiceError raised
                # here reaches the client as itself (see errors._http_error).
                check = _check_of(scope.get("route"))
                if check is not None:
                    request = Request(scope)
                    caller = await check(request)
                    if size:
                        key = _budget_key(caller, request)
                        self.budget.reserve(key, size)
                        reserved = key
            return await receive()

        try:
            await self.app(scope, receive_after_check, send)
        finally:  # answered, failed or cancelled (the client went away): the bytes are free again
            if reserved is not None:
                self.budget.release(reserved, size)


def _body_size(scope: Scope, max_body_bytes: int) -> int:
    """The bytes a request's body will hold at most: its Content-Length, or the limit when chunked."""
    headers = dict(scope.get("headers") or [])
    declared = headers.get(b"content-length")
    if declared is not None and declared.strip().isdigit():
        return min(int(declared), max_body_bytes)  # a larger one was refused outside (413)
    return max_body_bytes if b"transfer-encoding" in headers else 0


def _budget_key(caller: Caller, request: Request) -> str:
    # Without tokens every caller is "anonymous": its share is then its client address's.
    if caller.name == "anonymous":
        return "client\0" + (client_address(request) or "")
    return "caller\0" + caller.name


def _check_of(route: object) -> Callable[[Request], Awaitable[Caller]] | None:
    if not isinstance(route, APIRoute):
        return None
    calls = {dependency.call for dependency in route.dependant.dependencies}
    return next((check for check in (require_write, require_read) if check in calls), None)
