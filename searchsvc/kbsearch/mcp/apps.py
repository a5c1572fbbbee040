"""The citation viewer, an MCP App (the io.modelcontextprotocol/ui extension, in the SDK's mcp.server.apps).

ask_knowledge names `ui://knowledge-base/citations.html` in its `_meta.ui.resourceUri`; a chat host
that speaks MCP Apps renders that page in a sandboxed frame and hands it the tool's result, and the
page lists the answer's citations (number, title, source and headings, URI, quote). A host without
Apps ignores both and shows the tool's text, which carries the same citations. The page is static,
the same for every caller: what it shows comes from the caller's own ask_knowledge result.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from mcp.server.apps import Apps

CITATIONS_URI = "ui://knowledge-base/citations.html"
# The `_meta` of a tool whose result the viewer shows.
VIEWER_META: dict[str, Any] = {"ui": {"resourceUri": CITATIONS_URI}}


def citation_viewer() -> Apps:
    """The extension with the viewer's page; read from the package when the server is built."""
    apps = Apps()
    apps.add_html_resource(
        CITATIONS_URI,
        files("kbsearch.mcp").joinpath("citations.html").read_text(encoding="utf-8"),
        name="citations",
        title="Citations",
        description="Shows an ask_knowledge answer's citations (an MCP App for hosts that render ui:// pages).",
        prefers_border=True,
    )
    return apps
