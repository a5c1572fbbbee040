"""`knowledge-mcp --service URL --token-env VAR`: the service's MCP tools over stdio, for desktop agents.

A bridge, not a second server: the tools, the resources (kb://sources and the document template)
and the prompt are forwarded to the service's /mcp endpoint with the bearer token read from the
named environment variable, so their schemas, their answers (cache hints included) and the
caller's scope are exactly the HTTP ones; a refusal is the service's own error, passed on. The
token never appears on the command line, in a URL or in a log line. stdout carries only the MCP
protocol; messages go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)

from kbsearch import __version__
from kbsearch.version import package_version

log = logging.getLogger("knowledge-mcp")

MCP_PATH = "/mcp"
# Searches are quick; an ingest of a large document embeds it first, which can take a while.
TIMEOUT_S = 300.0


class BridgeError(Exception):
    """Why the bridge cannot serve: a bad argument, a missing token, an unreachable or refusing service."""


def endpoint_url(service: str) -> str:
    """The service's /mcp URL from its base URL (or from the /mcp URL itself)."""
    parts = urlsplit(service.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BridgeError(f"--service must be an http:// or https:// URL with a host, not {service!r}")
    if parts.username or parts.password:
        raise BridgeError("--service must not carry credentials; name the token's variable with --token-env")
    if parts.query or parts.fragment:
        raise BridgeError("--service must not have a query or fragment")
    path = parts.path.rstrip("/")
    if not path.endswith(MCP_PATH):
        path += MCP_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def read_token(variable: str | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    if variable is None:
        return None
    token = environ.get(variable)
    if not token:
        raise BridgeError(f"--token-env {variable}: that environment variable is not set or is empty")
    if token != token.strip() or not all(0x20 <= ord(ch) < 0x7F for ch in token):
        # The value is never shown: it is a secret, even when malformed.
        raise BridgeError(
            f"--token-env {variable}: the token must be printable ASCII without surrounding whitespace "
            "(often a trailing newline from a file)"
        )
    return token


def describe(exc: BaseException, endpoint: str) -> str:
    """One line for a failure to reach or use the service; never the token."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        if status == 401:
            return f"{endpoint} refused the token (401): check the variable named by --token-env"
        if status == 404:
            return f"{endpoint} answered 404: is --service the search service's URL?"
        if status == 421:
            return f"{endpoint} answered 421: add its host to the service's SEARCHSVC_MCP_ALLOWED_HOSTS"
        return f"{endpoint} answered HTTP {status}"
    if isinstance(exc, httpx2.TransportError):
        return f"cannot reach {endpoint}: {type(exc).__name__}: {exc}"
    return f"{endpoint}: {type(exc).__name__}: {exc}"


async def preflight(http: httpx2.AsyncClient, endpoint: str) -> None:
    """One stateless tools/list, to tell an unreachable service, a refused token and a wrong URL apart."""
    request = {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}}
    try:
        response = await http.post(endpoint, json=request, headers={"accept": "application/json, text/event-stream"})
        response.raise_for_status()
    except httpx2.HTTPError as exc:
        raise BridgeError(describe(exc, endpoint)) from None


def bridge(remote: Client) -> Server[Any]:
    """A stdio server whose tools, resources and prompts are the remote service's."""

    def cursor(params: PaginatedRequestParams | None) -> str | None:
        return params.cursor if params else None

    async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
        return await remote.list_tools(cursor=cursor(params))

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        return await remote.call_tool(params.name, params.arguments or {})

    async def list_resources(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return await remote.list_resources(cursor=cursor(params))

    async def list_resource_templates(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return await remote.list_resource_templates(cursor=cursor(params))

    async def read_resource(ctx: ServerRequestContext[Any], params: ReadResourceRequestParams) -> ReadResourceResult:
        return await remote.read_resource(str(params.uri))

    async def list_prompts(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListPromptsResult:
        return await remote.list_prompts(cursor=cursor(params))

    async def get_prompt(ctx: ServerRequestContext[Any], params: GetPromptRequestParams) -> GetPromptResult:
        return await remote.get_prompt(params.name, params.arguments)

    return Server(
        "knowledge-base",
        version=__version__,
        instructions=remote.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


async def serve(endpoint: str, token: str | None) -> None:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=TIMEOUT_S))
        )
        # Fail now, with a clear message, rather than at the agent's first call: the SDK's client
        # reports any HTTP error status as the same "Server returned an error response".
        await preflight(http, endpoint)
        try:
            remote = await stack.enter_async_context(
                Client(streamable_http_client(endpoint, http_client=http), cache=None)
            )
        except Exception as exc:  # noqa: BLE001 - every failure to connect becomes one line on stderr
            raise BridgeError(describe(exc, endpoint)) from None
        server = bridge(remote)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="knowledge-mcp",
        description="Serve the knowledge base's MCP tools over stdio by calling the search service over HTTP.",
    )
    parser.add_argument(
        "--service", required=True, help="the search service's base URL, e.g. http://127.0.0.1:8000 (its /mcp is used)"
    )
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="name of the environment variable that holds the bearer token (never the token itself)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="knowledge-mcp: %(message)s")
    try:
        endpoint = endpoint_url(args.service)
        token = read_token(args.token_env)
        anyio.run(serve, endpoint, token)
    except BridgeError as exc:
        sys.stderr.write(f"knowledge-mcp: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
