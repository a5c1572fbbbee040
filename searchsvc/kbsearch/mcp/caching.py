"""How long an MCP client may keep a list or read result (`ttlMs`/`cacheScope`, MCP 2026-07-28).

Every answer is `private`: it is made for the caller's token (tools/list hides the write tools from
a reader, kb://sources and the documents are read in the caller's scope), so a shared cache must
never hand it to another caller. The lists change only when the service restarts, so they keep
for minutes; kb://sources carries sync times and counts that move with every sync, so it keeps
for seconds; a document changes when its source syncs, so it keeps for a minute. Legacy-protocol
answers carry no such fields (the SDK leaves them out) and are left as they are.
"""

from __future__ import annotations

from typing import Any

from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from kbsearch.mcp.resources import SOURCES_URI

LISTS_TTL_MS = 300_000
SOURCES_TTL_MS = 15_000
DOCUMENT_TTL_MS = 60_000

# What MCPServer(cache_hints=...) fills in for every result of these methods.
CACHE_HINTS: dict[CacheableMethod, CacheHint] = {
    "server/discover": CacheHint(ttl_ms=LISTS_TTL_MS, scope="private"),
    "tools/list": CacheHint(ttl_ms=LISTS_TTL_MS, scope="private"),
    "prompts/list": CacheHint(ttl_ms=LISTS_TTL_MS, scope="private"),
    "resources/list": CacheHint(ttl_ms=LISTS_TTL_MS, scope="private"),
    "resources/templates/list": CacheHint(ttl_ms=LISTS_TTL_MS, scope="private"),
    "resources/read": CacheHint(ttl_ms=DOCUMENT_TTL_MS, scope="private"),
}


async def sources_keep_briefly(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: a read of kb://sources keeps SOURCES_TTL_MS, not a document's DOCUMENT_TTL_MS.

    The SDK has already shaped the result into its wire dict when a middleware sees it.
    """
    result = await call_next(ctx)
    if ctx.method == "resources/read" and isinstance(result, dict) and "ttlMs" in result:
        uri = ctx.params.get("uri") if ctx.params else None
        if uri == SOURCES_URI:
            return {**result, "ttlMs": SOURCES_TTL_MS}
    return result
