"""The /mcp endpoint of the service's FastAPI app: stateless streamable HTTP with JSON responses.

It is one route at exactly `/mcp`, beside the REST routes, rather than a mounted app: a mount at
`/mcp` answers `POST /mcp` with a 307 to `/mcp/`, and a catch-all mount at `/` would answer every
unknown path in the SDK's words instead of the API's JSON errors.

Every request is authenticated first by the Authenticator REST uses too (static tokens, then
Kubernetes TokenReview in that mode), so MCP has the same identities and scope as REST. A refusal
is the API's own error answer: 401 with `WWW-Authenticate: Bearer resource_metadata="…"` (the RFC 9728
document of kbsearch.api.resource_metadata), or 503 `AUTH_UNAVAILABLE` when
Kubernetes cannot decide. Then the SDK checks the Host header against SEARCHSVC_MCP_ALLOWED_HOSTS
(421 otherwise) and serves the request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from kbsearch.deps import client_address, known_sources
from kbsearch.mcp.server import build_server
from kbsearch.presenters import error_response
from kbsearch.services.access.auth import Authenticator, refuse_url_token
from kbsearch.settings import CompatSettings, HttpSettings

PATH = "/mcp"
ANY_HOST = "*"


def transport_security(hosts: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection: these Host values, and browser Origins naming them; `*` turns it off."""
    if ANY_HOST in hosts:  # behind a gateway that checks hosts itself
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class McpEndpoint:
    """ASGI app of the /mcp route: the caller first, then one of the SDK's two session managers.

    Answers are single JSON bodies, except a `tools/call` whose `_meta` carries a `progressToken`
    from a client that accepts `text/event-stream`: that one is answered as a stream, so its
    progress notifications reach the client while the tool runs (a JSON answer has no channel
    for them, and the SDK drops them there).
    """

    def __init__(
        self,
        server: MCPServer,
        authenticator: Authenticator,
        streaming: StreamableHTTPSessionManager,
    ) -> None:
        self.server = server
        self.authenticator = authenticator
        self.streaming = streaming

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            # Stateless: no session to resume or end, and a GET's event stream would never carry
            # anything while holding a connection and a file descriptor for as long as the client likes.
            response = error_response(
                405, "METHOD_NOT_ALLOWED", "this MCP endpoint is stateless: send each JSON-RPC message as a POST",
                headers={"Allow": "POST"},
            )  # fmt: skip
            await response(scope, receive, send)
            return
        request = Request(scope, receive)
        # A ServiceError raised here reaches the app's error handlers like a route's would.
        refuse_url_token(request.query_params)
        header = request.headers.get("authorization")
        request.state.caller = await self.authenticator.caller_of(
            header, known_sources(request), write=False, client=client_address(request)
        )
        manager = self.server.session_manager
        if scope["method"] == "POST" and "text/event-stream" in request.headers.get("accept", ""):
            body = await request.body()  # at most SEARCHSVC_MAX_BODY_BYTES: the request middleware holds to that
            if wants_progress(body):
                manager = self.streaming
            receive = replay(body, receive)
        await manager.handle_request(scope, receive, send)


def wants_progress(body: bytes) -> bool:
    """Whether a POSTed JSON-RPC message is a tool call that asks for progress notifications."""
    try:
        message = json.loads(body)
    except ValueError:
        return False  # the SDK answers a parse error itself
    messages = message if isinstance(message, list) else [message]
    for item in messages:
        if isinstance(item, dict) and item.get("method") == "tools/call":
            meta = (item.get("params") or {}).get("_meta") if isinstance(item.get("params"), dict) else None
            if isinstance(meta, dict) and meta.get("progressToken") is not None:
                return True
    return False


def replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, then whatever the connection sends next (its disconnect)."""
    pending = True

    async def receive_again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


class McpRoute(Route):
    """The /mcp route, named in the request's scope like FastAPI's routes are.

    The HTTP metrics label a request with `scope["route"].path`; a plain Starlette route leaves it
    unset, and every MCP request was counted as `route="unmatched"`, the label of a 404.
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


class McpFace:
    """The MCP server as the app serves it; `running()` belongs in the app's lifespan."""

    def __init__(self, app: FastAPI, http: HttpSettings, compat: CompatSettings, authenticator: Authenticator) -> None:
        self.server = build_server(compat)
        security = transport_security(http.mcp_hosts)
        # Builds the session manager; the Starlette app it returns is not used (see the module docstring).
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
            max_request_body_size=http.max_body_bytes,
        )
        # The same server, answering as a stream: for the calls that asked for progress.
        self.streaming = StreamableHTTPSessionManager(
            app=self.server._lowlevel_server,  # the app streamable_http_app hands its own manager
            json_response=False,
            stateless=True,
            security_settings=security,
            max_request_body_size=http.max_body_bytes,
        )
        endpoint = McpEndpoint(self.server, authenticator, self.streaming)
        app.router.routes.append(McpRoute(PATH, endpoint, include_in_schema=False))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's session manager, for as long as the app's lifespan.

        It runs in a task of its own: its task group must be entered and left in one task, and
        a lifespan may be entered and left in two (pytest's async fixtures do that).
        """
        up, down = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.server.session_manager.run(), self.streaming.run():
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
