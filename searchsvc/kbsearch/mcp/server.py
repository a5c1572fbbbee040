"""The MCP server: which tools exist, how they are annotated, and who sees which.

Adding a tool is one ToolSpec in TOOLS: an async function whose docstring describes it, whose
return annotation `Annotated[CallToolResult, Model]` gives its outputSchema, and which returns
`tool_result(text, model)` (kbsearch.mcp.context). It reaches the caller and the services the
lifespan built through `tool_context(ctx)` (`.caller`, and `.app`, the AppContext).
A spec with `writes=True` is listed only to callers that may write; its service refuses the
others anyway. The resources and the prompt are kbsearch.mcp.resources', the citation viewer (an MCP
App) kbsearch.mcp.apps', the cache hints kbsearch.mcp.caching's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources import Resource
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    ListToolsResult,
    ToolAnnotations,
)
from pydantic import ValidationError

from kbsearch import __version__
from kbsearch.mcp import apps, caching, compat, resources, spans, tools
from kbsearch.mcp.context import caller_of, invalid_arguments
from kbsearch.settings import CompatSettings

INSTRUCTIONS = (
    "A knowledge base of documents (mostly markdown from git repositories), searchable by meaning and keywords. "
    "For a question about a named product or version, call resolve_sources first (once), then "
    "search_knowledge with its sources and version; read around a hit with get_chunk_context or the whole "
    "document with fetch_document; list_sources says what there is and list_documents a source's pages; "
    "ask_knowledge answers a question with checked citations. "
    "Cite documents by their URI."
)

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
# An answer from a language model may differ from one call to the next: read-only, not idempotent.
ANSWER = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
# Ingest replaces what is stored under the URI (destructive), but the same content twice changes nothing.
REPLACE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
# manageKnowledge reads or writes depending on its operation; hints must cover the worst case.
MIXED = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    fn: Callable[..., Awaitable[CallToolResult]]
    title: str
    annotations: ToolAnnotations
    writes: bool = False
    name: str | None = None  # default: the function's name
    meta: dict[str, Any] | None = None  # the tool's `_meta` (an MCP App's page, kbsearch.mcp.apps)

    @property
    def tool_name(self) -> str:
        return self.name or self.fn.__name__


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(tools.search_knowledge, "Search the knowledge base", READ),
    ToolSpec(tools.fetch_document, "Read a document", READ),
    ToolSpec(tools.get_chunk_context, "Read around a search hit", READ),
    ToolSpec(tools.list_sources, "List sources", READ),
    ToolSpec(tools.list_documents, "List a source's documents", READ),
    ToolSpec(tools.resolve_sources, "Find the sources for a task", READ),
    ToolSpec(tools.ask_knowledge, "Ask the knowledge base", ANSWER, meta=apps.VIEWER_META),
    ToolSpec(tools.ingest_document, "Store a document", REPLACE, writes=True),
    ToolSpec(tools.delete_document, "Delete a document", DELETE, writes=True),
)
# Listed to writers only: it ingests and deletes (its search is search_knowledge's for readers).
DOTAI_TOOLS = (
    ToolSpec(compat.manage_knowledge, "Manage knowledge (dot-ai)", MIXED, writes=True, name="manageKnowledge"),
)
OPENAI_TOOLS = (
    ToolSpec(compat.search, "Search (OpenAI connector)", READ),
    ToolSpec(compat.fetch, "Fetch a document (OpenAI connector)", READ),
)


def tool_specs(compat: CompatSettings) -> list[ToolSpec]:
    specs = list(TOOLS)
    if compat.mcp_compat_dotai:
        specs.extend(DOTAI_TOOLS)
    if compat.mcp_compat_openai:
        specs.extend(OPENAI_TOOLS)
    return specs


class KnowledgeServer(MCPServer):
    """MCPServer whose tool errors are the service's own words: `CODE: message`.

    The SDK checks arguments against the input schema (limits included) before a tool runs, and
    reports a failure as pydantic's own multi-line text; the agent gets `INVALID_ARGUMENT: name:
    problem` instead. The SDK's `Error executing tool <name>: ` prefix is dropped from every tool
    error, so the stable code comes first, as in a REST error body. A refused prompt argument reads
    the same way, and a resource that depends on the caller (kbsearch.mcp.resources) is read with
    the request's context.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.caller_resources: dict[str, resources.CallerResource] = {}

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(invalid_arguments(exc.__cause__, {})) from exc.__cause__
            message = str(exc)
            prefix = f"Error executing tool {name}: "
            if type(exc) is ToolError and message.startswith(prefix):  # not UnexpectedToolError: keep it as is
                raise ToolError(message.removeprefix(prefix)) from exc.__cause__
            raise

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        """A refused prompt argument reads `INVALID_ARGUMENT: name: problem` (-32602), as a tool's does."""
        try:
            return await super().get_prompt(name, arguments, context)
        except ValueError as exc:
            cause: BaseException | None = exc
            while cause is not None and not isinstance(cause, ValidationError):
                cause = cause.__cause__
            if cause is None:
                raise
            raise MCPError(code=INVALID_PARAMS, message=invalid_arguments(cause, {})) from cause

    def add_resource(self, resource: Resource) -> None:
        if isinstance(resource, resources.CallerResource):
            self.caller_resources[str(resource.uri)] = resource
        super().add_resource(resource)

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """A resource whose content depends on the caller is read with the request's context."""
        resource = self.caller_resources.get(str(uri))
        if resource is not None and context is not None:
            return [ReadResourceContents(content=await resource.read_for(context), mime_type=resource.mime_type)]
        return await super().read_resource(uri, context)


def build_server(compat: CompatSettings) -> MCPServer:
    """The tools the settings switch on; transport and authentication are kbsearch.mcp.http's job."""
    with _logging_left_alone():
        # No subscriptions/listen: the tool, resource and prompt lists never change while the service runs.
        server: MCPServer = KnowledgeServer(
            name="knowledge-base",
            title="Knowledge base",
            version=__version__,
            instructions=INSTRUCTIONS,
            subscriptions=False,
            cache_hints=caching.CACHE_HINTS,
            extensions=[apps.citation_viewer()],
        )
    resources.register(server)
    specs = tool_specs(compat)
    for spec in specs:
        server.add_tool(spec.fn, name=spec.tool_name, title=spec.title, annotations=spec.annotations, meta=spec.meta)
    server.middleware.append(HideWriteTools([s.tool_name for s in specs if s.writes]))
    server.middleware.append(caching.sources_keep_briefly)
    server.middleware.append(spans.name_the_resource)
    return server


@contextmanager
def _logging_left_alone() -> Iterator[None]:
    """MCPServer() calls logging.basicConfig (a rich handler at INFO on the root logger); the service
    configures its own logging (kbsearch.logging), so whatever the root logger had is put back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


class HideWriteTools:
    """tools/list leaves out the write tools for a caller that may not write.

    tools/list answers are private to the caller (kbsearch.mcp.caching), so a shared cache never
    hands one caller's list to another.
    """

    def __init__(self, write_tools: Sequence[str]) -> None:
        self.write_tools = frozenset(write_tools)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list":
            return result
        caller = caller_of(ctx.request)
        if caller is not None and caller.may_write:
            return result
        if isinstance(result, ListToolsResult):
            return result.model_copy(update={"tools": [t for t in result.tools if t.name not in self.write_tools]})
        if isinstance(result, dict):
            return {**result, "tools": [t for t in result.get("tools", []) if t.get("name") not in self.write_tools]}
        return result
