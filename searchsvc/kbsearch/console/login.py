"""Sign-in and sign-out: the token is posted once, checked like a bearer token, and kept in the session cookie."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from kbsearch.console.rendering import render
from kbsearch.console.session import CSRF_FIELD, check_csrf, end_session, safe_next, start_session
from kbsearch.deps import authenticator as app_authenticator
from kbsearch.deps import client_address, known_sources
from kbsearch.errors import UnauthenticatedError
from kbsearch.services.access.auth import MAX_TOKEN_CHARS

router = APIRouter(prefix="/ui", include_in_schema=False)


def _form(request: Request, *, next_path: str, error: str | None, status_code: int = 200) -> HTMLResponse:
    expired = request.query_params.get("expired") == "1" and error is None
    context = {"next": safe_next(next_path), "error": error, "expired": expired}
    return render(request, "login.html", context, status_code)


@router.get("/login")
async def login_form(request: Request, next: str = "/ui/") -> HTMLResponse:
    return _form(request, next_path=next, error=None)


@router.post("/login")
async def login(
    request: Request,
    token: Annotated[str, Form(max_length=MAX_TOKEN_CHARS)],
    csrf_token: Annotated[str, Form(alias=CSRF_FIELD, max_length=128)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/ui/",
) -> Response:
    check_csrf(request, csrf_token)
    token = token.strip()
    authenticator = app_authenticator(request)
    try:
        caller = await authenticator.caller_of(
            f"Bearer {token}", known_sources(request), write=False, client=client_address(request)
        )
    except UnauthenticatedError:
        return _form(request, next_path=next, error="That token was not accepted.", status_code=401)
    if not authenticator.reads_need_token and authenticator.tokens.table().lookup(token) is None:
        # An open service reads a token it does not know as no token at all; say so rather than pretend.
        return _form(request, next_path=next, error="This service does not know that token.", status_code=401)
    request.state.caller = caller
    response = RedirectResponse(safe_next(next), status_code=303)
    start_session(request, response, token)
    return response


@router.post("/logout")
async def logout(request: Request, csrf_token: Annotated[str, Form(alias=CSRF_FIELD, max_length=128)] = "") -> Response:
    check_csrf(request, csrf_token)
    response = RedirectResponse("/ui/login", status_code=303)
    end_session(request, response)
    return response
