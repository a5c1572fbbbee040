"""The one place that turns a presented token into a Caller: who it is, whether it writes, what it sees.

Static tokens (the tokens file and the legacy SEARCHSVC_API_TOKEN / SEARCHSVC_READ_TOKEN) are
matched by their sha256; in Kubernetes mode any other token goes to a TokenReview. With neither
a tokens file nor Kubernetes mode, reads stay open when no read token is set, and writes too
when no API token is set (single-tenant, loopback).

The scheme is matched case-insensitively (`bearer`, `BEARER`): RFC 9110 makes auth schemes
case-insensitive and RFC 6750 inherits that. A token is accepted only in the Authorization
header: each face refuses a request with `access_token` in its query string (`refuse_url_token`).
Every face (REST's AuthGate, MCP's endpoint, the console's session) calls the same `caller_of`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container
from typing import TYPE_CHECKING

from kbsearch.errors import UnauthenticatedError
from kbsearch.services.access.scope import Caller, SourceScope
from kbsearch.services.access.tokens import StaticTokens, usable_token

if TYPE_CHECKING:  # imported only in Kubernetes mode: the client is slow to import
    from kbsearch.services.access.kubernetes import KubernetesAuth

# Far above any real token (a ServiceAccount JWT is ~1-2 KB); longer ones are refused unread.
MAX_TOKEN_CHARS = 8192
QUERY_TOKEN_PARAMETER = "access_token"
_OPEN_READER = Caller("anonymous", False, SourceScope.everything())
# The sources known now, for a Kubernetes caller's scope; read only when a TokenReview is needed.
KnownSources = Callable[[], Awaitable[list[str]]]


def refuse_url_token(query: Container[str], how: str = "send it as 'Authorization: Bearer <token>'") -> None:
    if QUERY_TOKEN_PARAMETER in query:
        raise UnauthenticatedError(f"a token in the URL is refused; {how}")


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

    async def caller_of(
        self, header: str | None, known_sources: KnownSources, *, write: bool, client: str | None = None
    ) -> Caller:
        """The Caller of an `Authorization` header value; the console passes its cookie's token here.

        `client` is the caller's address, which bounds its TokenReviews in flight (Kubernetes mode).
        """
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
            caller = await self.kubernetes.caller(token, known_sources, client)
            if caller is not None:
                return caller
        raise UnauthenticatedError("the bearer token is not valid")


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
