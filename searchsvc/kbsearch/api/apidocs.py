"""/docs: Swagger UI served from the service itself, so that it works in an air-gapped cluster.

Swagger UI's files come from the fastapi-offline package (which vendors them); the page is ours,
its one setting script a static file, so its CSP allows no inline script or style and no other
origin. ReDoc is not served: its bundle needs inline styles and blob: workers.
"""

from __future__ import annotations

from importlib.metadata import version

from fastapi import FastAPI, Request
from markupsafe import Markup, escape
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from kbsearch import __version__

DOCS = "/docs"
ASSETS = f"{DOCS}/assets"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
_PAGE = Markup("""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" type="image/png" href="{assets}/favicon.png?v={v}">
<link rel="stylesheet" href="{assets}/swagger-ui.css?v={v}">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{openapi}"></div>
<script src="{assets}/swagger-ui-bundle.js?v={v}"></script>
<script src="{assets}/swagger-init.js?v={v}"></script>
</body>
</html>
""")


def install_api_docs(app: FastAPI) -> None:
    """Serve /docs and its assets; the app is built with docs_url=None and redoc_url=None."""
    # The vendored Swagger UI first, then our setting script beside this module.
    assets = StaticFiles(packages=[("fastapi_offline", "static"), ("kbsearch.api", "static")])
    app.mount(ASSETS, assets, name="api-docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} - Swagger UI"
    # Both packages' versions in the asset URLs: an upgrade of either is fetched anew.
    fastapi_offline_version = version("fastapi-offline")

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = escape(request.scope.get("root_path", ""))
        stamp = f"{fastapi_offline_version}-{__version__}"
        page = _PAGE.format(title=title, assets=root + ASSETS, openapi=root + openapi_url, v=stamp)
        return HTMLResponse(page, headers=HEADERS)
