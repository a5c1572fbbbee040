"""The console's static files (the vendored htmx, the stylesheet), with caching headers."""

from __future__ import annotations

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from kbsearch.console.rendering import STATIC

# Pages link each file with `?v=<content hash>`, so a versioned URL never changes meaning.
VERSIONED = "public, max-age=31536000, immutable"
UNVERSIONED = "public, max-age=300"


class CachedStatic(StaticFiles):
    def __init__(self) -> None:
        super().__init__(directory=STATIC)

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if response.status_code in (200, 304):
            versioned = b"v=" in scope.get("query_string", b"")
            response.headers["Cache-Control"] = VERSIONED if versioned else UNVERSIONED
        return response
