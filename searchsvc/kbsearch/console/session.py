"""The console's session: the token in an HttpOnly cookie, the Caller it stands for, and CSRF checks.

Only /ui/ routes read these cookies (their Path is /ui); REST keeps to the Authorization header.
The session cookie holds the same token REST accepts, so revoking a token ends its sessions on
the next page load. CSRF is a double-submit token: a random value in its own cookie that every
state-changing form (or htmx header) must repeat; a cross-site request can neither read the
cookie nor set the field. Requests the browser marks `Sec-Fetch-Site: cross-site` are refused
outright. The Secure flag follows the request's scheme, which uvicorn takes from
X-Forwarded-Proto only for the addresses in SEARCHSVC_TRUSTED_PROXIES.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from fastapi import Request
from starlette.responses import Response

from kbsearch.api.auth import QUERY_TOKEN_PARAMETER, Authenticator
from kbsearch.api.deps import ready_state
from kbsearch.errors import UnauthenticatedError
from kbsearch.services.access import Caller

SESSION_COOKIE = "kb_console_session"
CSRF_COOKIE = "kb_console_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 8 * 3600  # a working day; the token itself may be revoked sooner


class LoginRequired(Exception):
    """No usable session for a console read: the handler sends the browser to the login form."""

    def __init__(self, next_path: str, *, expired: bool) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.expired = expired


class CsrfRejected(Exception):
    """A state-changing console request without the matching CSRF token (or from another site)."""


def is_secure(request: Request) -> bool:
    return request.url.scheme == "https"


def current_path(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


async def console_caller(request: Request) -> Caller:
    """The reader behind this browser: the session cookie's token, checked like a bearer token."""
    ready_state(request)  # 503 while starting, before any token is judged
    if QUERY_TOKEN_PARAMETER in request.query_params:
        raise UnauthenticatedError("a token in the URL is refused; sign in through the form")
    token = request.cookies.get(SESSION_COOKIE)
    authenticator: Authenticator = request.app.state.authenticator
    try:
        caller = await authenticator.caller_of(f"Bearer {token}" if token else None, request, write=False)
    except UnauthenticatedError:
        raise LoginRequired(current_path(request), expired=token is not None) from None
    request.state.caller = caller  # the access log names it
    return caller


def signed_in(request: Request) -> bool:
    return bool(request.cookies.get(SESSION_COOKIE))


def csrf_token(request: Request) -> str:
    """This browser's CSRF token: its cookie's, or a new one that `remember_csrf` will set."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and len(existing) <= 128:
        return existing
    cached: str | None = getattr(request.state, "new_csrf", None)
    if cached is None:
        cached = request.state.new_csrf = secrets.token_urlsafe(32)
    return cached


def remember_csrf(request: Request, response: Response) -> None:
    new: str | None = getattr(request.state, "new_csrf", None)
    if new is not None:
        response.set_cookie(
            CSRF_COOKIE, new, path=COOKIE_PATH, httponly=True, samesite="strict", secure=is_secure(request)
        )


def check_csrf(request: Request, submitted: str | None) -> None:
    """Refuse unless the form field (or X-CSRF-Token header) repeats this browser's CSRF cookie."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise CsrfRejected("a cross-site request")
    expected = request.cookies.get(CSRF_COOKIE)
    presented = submitted or request.headers.get(CSRF_HEADER)
    if not expected or not presented or not secrets.compare_digest(expected.encode(), presented.encode()):
        raise CsrfRejected("the CSRF token is missing or does not match")


def start_session(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=SESSION_SECONDS,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=is_secure(request),
    )
    # A new session gets a new CSRF token: one planted before sign-in is worth nothing after it.
    response.set_cookie(
        CSRF_COOKIE,
        secrets.token_urlsafe(32),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=is_secure(request),
    )


def end_session(request: Request, response: Response) -> None:
    secure = is_secure(request)
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=secure)


def login_url(next_path: str, *, expired: bool = False) -> str:
    return f"/ui/login?next={quote(safe_next(next_path), safe='/')}" + ("&expired=1" if expired else "")


def safe_next(candidate: str | None) -> str:
    """Where to go after sign-in: a console path on this site, never another host."""
    if not candidate or not candidate.startswith("/ui") or candidate.startswith("//") or "\\" in candidate:
        return "/ui/"
    return candidate
