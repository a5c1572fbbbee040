"""What a tool call runs with (the caller and the app's context), and how its failures reach the agent.

The /mcp endpoint (kbsearch.mcp.http) authenticates the HTTP request with the service's
Authenticator (kbsearch.services.access.auth) and leaves the Caller in the request's state; the SDK hands
that same request to every tool through its Context, and `tool_context` reads the app's context
from it (kbsearch.deps). A failure becomes a tool error (`isError: true`) whose message
names the problem: the service's stable code and message, or the argument that was refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from kbsearch.context import AppContext
from kbsearch.deps import context
from kbsearch.errors import ServiceError
from kbsearch.presenters import validation_message
from kbsearch.services.access.scope import Caller


@dataclass(frozen=True, slots=True)
class ToolContext:
    """A tool call's caller, and the app's context whose services it calls."""

    caller: Caller
    app: AppContext


def caller_of(request: object) -> Caller | None:
    """The Caller the endpoint resolved for this HTTP request; None outside one."""
    if not isinstance(request, Request):
        return None
    caller = getattr(request.state, "caller", None)
    return caller if isinstance(caller, Caller) else None


def tool_context(ctx: Context[Any]) -> ToolContext:
    request = ctx.request_context.request
    caller = caller_of(request)
    if caller is None or not isinstance(request, Request):  # only /mcp serves these tools, and it always sets one
        raise ToolError("UNAUTHENTICATED: this tool runs only behind the service's /mcp endpoint")
    with tool_errors():
        app = context(request)  # NOT_READY while the store or embedder is loading
    return ToolContext(caller=caller, app=app)


def not_found(uri: str) -> ToolError:
    # Another team's document looks exactly like a missing one.
    return ToolError(f"NOT_FOUND: no document {uri!r} (or it is not visible to you)")


@contextmanager
def tool_errors(argument_names: Mapping[str, str] | None = None) -> Iterator[None]:
    """Turn service errors and refused arguments into a tool error that names the problem.

    `argument_names` maps a field of the REST schema the tool validates with (say
    `filter.uriPrefix`) to the tool's own argument (`uri_prefix`).
    """
    try:
        yield
    except ServiceError as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from None
    except ValidationError as exc:
        raise ToolError(invalid_arguments(exc, argument_names or {})) from None


def invalid_arguments(exc: ValidationError, argument_names: Mapping[str, str]) -> str:
    return "INVALID_ARGUMENT: " + validation_message(exc, argument_names, style="all")


def tool_result(text: str, structured: BaseModel | None = None) -> CallToolResult:
    """Compact text for the model, and the full records as structuredContent (validated by the SDK)."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured.model_dump(mode="json", by_alias=True) if structured is not None else None,
    )
