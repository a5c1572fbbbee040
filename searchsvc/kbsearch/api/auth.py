"""Bearer-token checks: a write token, and an optional separate read token."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kbsearch.errors import ForbiddenError, UnauthenticatedError
from kbsearch.settings import Settings


def _presented_token(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise UnauthenticatedError("this endpoint needs a bearer token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("the Authorization header must be 'Bearer <token>'")
    return token.strip()


def _matches(presented: str, expected: str) -> bool:
    return secrets.compare_digest(presented.encode(), expected.encode())


def require_write(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.api_token is None:
        return
    presented = _presented_token(request)
    if _matches(presented, settings.api_token.get_secret_value()):
        return
    if settings.read_token is not None and _matches(presented, settings.read_token.get_secret_value()):
        raise ForbiddenError("the read token cannot write; use the API token")
    raise UnauthenticatedError("the bearer token is not valid")


def require_read(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.read_token is None:
        return
    presented = _presented_token(request)
    for token in (settings.read_token, settings.api_token):
        if token is not None and _matches(presented, token.get_secret_value()):
            return
    raise UnauthenticatedError("the bearer token is not valid")


class AuthGate:
    """ASGI middleware: a route's token check runs before the first byte of its body is read.

    FastAPI reads and parses a body before it runs a route's dependencies, so without this an
    unauthenticated client could make the service read and parse 8 MiB before its 401. The
    routes' `require_write` / `require_read` dependencies stay the one declaration of who may
    call what: when the routed request first asks for its body, the gate runs that same check.
    Routes that take no body keep the check as a dependency only.
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
                    check(Request(scope))
            return await receive()

        await self.app(scope, receive_after_check, send)


def _check_of(route: object) -> Callable[[Request], None] | None:
    if not isinstance(route, APIRoute):
        return None
    calls = {dependency.call for dependency in route.dependant.dependencies}
    return next((check for check in (require_write, require_read) if check in calls), None)
