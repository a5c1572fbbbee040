"""DNS-rebinding protection for every route while the service is open (no token needed).

A web page the developer visits can make its own name resolve to 127.0.0.1 and then call an open
service from the browser; the browser still sends that page's name as the Host header. So while
reads or writes need no token, a request whose Host is not one of SEARCHSVC_ALLOWED_HOSTS gets
421 MISDIRECTED_REQUEST before any route, REST, MCP or console, sees it. A service whose every
call needs a token is not exposed this way (a page cannot present a token it does not have).

The probe paths answer whatever the Host: a kubelet sends the pod's IP, and those answers hold no
documents. (Prometheus scrapes another port, kbsearch.metrics.)
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from kbsearch.presenters import error_response

ANY_HOST = "*"
UNCHECKED_PATHS = frozenset({"/healthz", "/readyz"})

__all__ = ["ANY_HOST", "HostAllowList", "host_allowed"]


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """Whether a Host value matches one of `patterns`: `name`, `name:port`, `name:*` (any port), `*`."""
    host = host.strip().lower()
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    for pattern in patterns:
        pattern = pattern.strip().lower()
        if pattern in (ANY_HOST, host):
            return True
        if pattern.endswith(":*") and name and port.isdigit() and pattern[:-2] == name:
            return True
    return False


class HostAllowList:
    """ASGI middleware: 421 for a Host outside the allow-list, on every path but the probes'."""

    def __init__(self, app: ASGIApp, *, allowed: list[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCHECKED_PATHS:
            await self.app(scope, receive, send)
            return
        host = next((value for key, value in scope.get("headers") or [] if key == b"host"), b"").decode("latin-1")
        if not host_allowed(host, self.allowed):
            response = error_response(
                421,
                "MISDIRECTED_REQUEST",
                "this service does not answer to that Host; add it to SEARCHSVC_ALLOWED_HOSTS if it is yours",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
