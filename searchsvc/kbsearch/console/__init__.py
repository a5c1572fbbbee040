"""The web console under /ui/: server-rendered pages over the same services and scopes as REST."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kbsearch.console import ask, login, pages, sources
from kbsearch.console.rendering import PAGE_HEADERS, ConsoleTemplates, render
from kbsearch.console.session import ConsoleSessions, CsrfRejected, LoginRequired, login_url
from kbsearch.console.static import CachedStatic
from kbsearch.deps import parts_of

PREFIX = "/ui"


def install_console(app: FastAPI) -> None:
    parts = parts_of(app)  # the console's own state, beside the app's other parts
    parts.add_face(ConsoleTemplates())
    parts.add_face(ConsoleSessions())
    app.include_router(login.router)
    app.include_router(pages.router)
    app.include_router(ask.router)
    app.include_router(sources.router)
    app.mount(f"{PREFIX}/static", CachedStatic(), name="console-static")
    app.add_exception_handler(LoginRequired, _to_login)  # type: ignore[arg-type]
    app.add_exception_handler(CsrfRejected, _csrf_rejected)  # type: ignore[arg-type]
    app.add_middleware(ConsoleHeaders)


async def _to_login(request: Request, exc: LoginRequired) -> Response:
    target = login_url(exc.next_path, expired=exc.expired)
    if request.headers.get("hx-request") == "true":
        # htmx would swap the login page into a fragment; tell it to navigate instead.
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


async def _csrf_rejected(request: Request, exc: CsrfRejected) -> Response:
    context = {"title": "Request refused", "message": f"Refused: {exc}. Reload the page and try again."}
    return render(request, "error.html", context, 403)


class ConsoleHeaders:
    """The CSP and its companions on every /ui response: pages, redirects, errors and static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in PAGE_HEADERS.items() if k != "Cache-Control"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in self.headers if k not in present]
                if b"cache-control" not in present:
                    extra.append((b"cache-control", b"no-store"))  # pages show scoped data
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)
