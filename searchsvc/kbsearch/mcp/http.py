"""The /mcp endpoint of the service's FastAPI app: stateless streamable HTTP with JSON responses.

It is one route at exactly `/mcp`, beside the REST routes, rather than a mounted app: a mount at
`/mcp` answers `POST /mcp` with a 307 to `/mcp/`, and a catch-all mount at `/` would answer every
unknown path in the SDK's words instead of the API's JSON errors.

Every request is authenticated first by the REST API's own Authenticator (static tokens, then
Kubernetes TokenReview in that mode), so MCP has the same identities and scope as REST. A refusal
is the API's own error answer: 401 with `WWW-Authenticate: Bearer`, or 503 `AUTH_UNAVAILABLE` when
Kubernetes cannot decide. Then the SDK checks the Host header against SEARCHSVC_MCP_ALLOWED_HOSTS
(421 otherwise) and serves the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kbsearch.api.auth import Authenticator
from kbsearch.mcp.server import build_server
from kbsearch.settings import Settings

PATH = "/mcp"
ANY_HOST = "*"


def transport_security(hosts: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection: these Host values, and browser Origins naming them; `*` turns it off."""
    if ANY_HOST in hosts:  # behind a gateway that checks hosts itself
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class McpEndpoint:
    """ASGI app of the /mcp route: the caller first, then the SDK's session manager."""

    def __init__(self, server: MCPServer, authenticator: Authenticator) -> None:
        self.server = server
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        # A ServiceError raised here reaches the app's error handlers like a route's would.
        request.state.caller = await self.authenticator.caller(request, write=False)
        await self.server.session_manager.handle_request(scope, receive, send)


class McpFace:
    """The MCP server as the app serves it; `running()` belongs in the app's lifespan."""

    def __init__(self, app: FastAPI, settings: Settings, authenticator: Authenticator) -> None:
        self.server = build_server(settings)
        # Builds the session manager; the Starlette app it returns is not used (see the module docstring).
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            transport_security=transport_security(settings.mcp_hosts),
            max_request_body_size=settings.max_body_bytes,
        )
        app.router.routes.append(Route(PATH, McpEndpoint(self.server, authenticator), include_in_schema=False))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's session manager, for as long as the app's lifespan.

        It runs in a task of its own: its task group must be entered and left in one task, and
        a lifespan may be entered and left in two (pytest's async fixtures do that).
        """
        up, down = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.server.session_manager.run():
                up.set()
                await down.wait()

        holder = asyncio.create_task(hold(), name="mcp-session-manager")
        waiting = asyncio.create_task(up.wait())
        await asyncio.wait({holder, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if holder.done():  # it failed to start: say why
            holder.result()
        try:
            yield
        finally:
            down.set()
            await holder
