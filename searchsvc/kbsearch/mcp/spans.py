"""What the service adds to the MCP SDK's own server spans (kbsearch.tracing installs the provider).

The SDK opens one span per request (`tools/call search_knowledge`, `resources/read`), parented from
the request's `params._meta.traceparent`, with `mcp.method.name` and `gen_ai.tool.name`; the
service's spans (retrieval, embedding, engine) nest below it. A resource read names its URI
(`mcp.resource.uri`, an identifier as a retrieval span's document ids are, never the text).
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from kbsearch import tracing

RESOURCE_URI = "mcp.resource.uri"  # the MCP semantic conventions' attribute
MAX_URI_CHARS = 2048  # an attribute is bounded: a longer URI is cut


async def name_the_resource(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: a resources/read span carries the URI it read."""
    if ctx.method == "resources/read" and ctx.params:
        uri = ctx.params.get("uri")
        if isinstance(uri, str):
            tracing.annotate({RESOURCE_URI: uri[:MAX_URI_CHARS]})
    return await call_next(ctx)
