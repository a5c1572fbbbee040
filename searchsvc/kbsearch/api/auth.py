"""The one place that turns a request into a Caller: who it is, whether it writes, what it sees.

Static tokens (the tokens file and the legacy SEARCHSVC_API_TOKEN / SEARCHSVC_READ_TOKEN) are
matched by their sha256; in Kubernetes mode any other token goes to a TokenReview. With neither
a tokens file nor Kubernetes mode, reads stay open when no read token is set, and writes too
when no API token is set (single-tenant, loopback).

The scheme is matched case-insensitively (`bearer`, `BEARER`): RFC 9110 makes auth schemes
case-insensitive and RFC 6750 inherits that. A token is accepted only in the Authorization
header: a request with `access_token` in its query string is refused, whatever its header says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kbsearch.api.deps import ready_state
from kbsearch.errors import ForbiddenError, UnauthenticatedError
from kbsearch.services.access import Caller, SourceCatalog, SourceScope
from kbsearch.services.tokens import StaticTokens, usable_token

if TYPE_CHECKING:  # imported only in Kubernetes mode: the client is slow to import
    from kbsearch.services.kubeauth import KubernetesAuth

# Far above any real token (a ServiceAccount JWT is ~1-2 KB); longer ones are refused unread.
MAX_TOKEN_CHARS = 8192
QUERY_TOKEN_PARAMETER = "access_token"
_OPEN_READER = Caller("anonymous", False, SourceScope.everything())


class Authenticator:
    def __init__(
        self,
        tokens: StaticTokens,
        *,
        reads_need_token: bool,
        writes_need_token: bool,
        kubernetes: KubernetesAuth | None = None,
    ) -> None:
        self.tokens = tokens
        self.kubernetes = kubernetes
        self.reads_need_token = reads_need_token
        self.writes_need_token = writes_need_token

    async def caller(self, request: Request, *, write: bool) -> Caller:
        if QUERY_TOKEN_PARAMETER in request.query_params:
            raise UnauthenticatedError("a token in the URL is refused; send it as 'Authorization: Bearer <token>'")
        return await self.caller_of(request.headers.get("authorization"), request, write=write)

    async def caller_of(self, header: str | None, request: Request, *, write: bool) -> Caller:
        """The Caller of an `Authorization` header value; the console passes its cookie's token here."""
        needed = self.writes_need_token if write else self.reads_need_token
        if not needed:
            # Open (single-tenant): a token is optional, and one not known here counts as none,
            # so a client configured with some token keeps working against an open service.
            known = self.tokens.table().lookup(_presented_token(header)) if _is_usable(header) else None
            return known or (Caller.anonymous() if not self.writes_need_token else _OPEN_READER)
        token = _presented_token(header)
        caller = self.tokens.table().lookup(token)
        if caller is not None:
            return caller
        if self.kubernetes is not None:  # static tokens first, then the API server's TokenReview
            caller = await self.kubernetes.caller(token, lambda: _known_sources(request))
            if caller is not None:
                return caller
        raise UnauthenticatedError("the bearer token is not valid")


async def _known_sources(request: Request) -> list[str]:
    catalog: SourceCatalog = ready_state(request).catalog
    return sorted(await catalog.known())


def _is_usable(header: str | None) -> bool:
    try:
        _presented_token(header)
    except UnauthenticatedError:
        return False
    return True


def _presented_token(header: str | None) -> str:
    if not header:
        raise UnauthenticatedError("this endpoint needs a bearer token")
    scheme, _, token = header.partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer" or not token:
        raise UnauthenticatedError("the Authorization header must be 'Bearer <token>'")
    if len(token) > MAX_TOKEN_CHARS or not usable_token(token):
        raise UnauthenticatedError("the bearer token is not valid")
    return token


async def _resolve(request: Request, *, write: bool) -> Caller:
    # The gate may have resolved it already, before the body was read: once per request.
    cached: Caller | None = getattr(request.state, "caller", None)
    if cached is None:
        authenticator: Authenticator = request.app.state.authenticator
        cached = await authenticator.caller(request, write=write)
        request.state.caller = cached
    return cached


async def require_write(request: Request) -> Caller:
    caller = await _resolve(request, write=True)
    if not caller.may_write:
        raise ForbiddenError(f"{caller.name!r} may read but not write")
    return caller


async def require_read(request: Request) -> Caller:
    return await _resolve(request, write=False)


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
