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
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        checked = False

        async def receive_after_check() -> Message:
            nonlocal checked
            if not checked:
                checked = True
                # Routing has put the matched route in the scope by now; a ServiceError raised
                # here reaches the client as itself (see errors._http_error).
                check = _check_of(scope.get("route"))
                if check is not None:
                    await check(Request(scope))
            return await receive()

        await self.app(scope, receive_after_check, send)


def _check_of(route: object) -> Callable[[Request], Awaitable[Caller]] | None:
    if not isinstance(route, APIRoute):
        return None
    calls = {dependency.call for dependency in route.dependant.dependencies}
    return next((check for check in (require_write, require_read) if check in calls), None)
