"""The console's session: a random session id in an HttpOnly cookie, the token behind it kept here.

The cookie never holds the API token: it names a session in this process's memory (ConsoleSessions),
which holds the token the browser signed in with. Each page load checks that token like a bearer
token, so revoking the token ends its sessions on the next load; signing out deletes the session,
so a copied cookie is worth nothing after it. Sessions last SESSION_SECONDS at most and live in
memory: a restart signs every browser out, and with several replicas the console needs sticky
sessions (or one replica).

Only /ui/ routes read these cookies; REST keeps to the Authorization header. Over https the
cookies are `__Host-` cookies (Secure, Path=/, no Domain: no sibling subdomain can plant or shadow
them); over plain http (`make run`) they keep their plain names and Path=/ui. CSRF is a
double-submit token: a random value in its own cookie that every state-changing form (or htmx
header) must repeat. A request the browser marks with any `Sec-Fetch-Site` but `same-origin`
(`same-site` included: a sibling subdomain could have planted a cookie pair) is refused outright.
The Secure flag follows the request's scheme, which uvicorn takes from X-Forwarded-Proto only for
the addresses in SEARCHSVC_TRUSTED_PROXIES.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from urllib.parse import quote

from fastapi import Request
from starlette.responses import Response

from kbsearch.deps import authenticator as app_authenticator
from kbsearch.deps import client_address, context, face_state, known_sources
from kbsearch.errors import UnauthenticatedError
from kbsearch.services.access.auth import refuse_url_token
from kbsearch.services.access.scope import Caller

SESSION_COOKIE = "kb_console_session"
CSRF_COOKIE = "kb_console_csrf"
HOST_PREFIX = "__Host-"  # https only: Secure, Path=/ and no Domain, enforced by the browser
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 8 * 3600  # a working day; the token itself may be revoked sooner
MAX_SESSIONS = 10_000  # the oldest session is signed out past this


class ConsoleSessions:
    """Console sessions in memory: session id -> (token, expiry). Bounded; the oldest goes first."""

    def __init__(self, lifetime_s: float = SESSION_SECONDS, size: int = MAX_SESSIONS) -> None:
        self.lifetime_s, self.size = lifetime_s, size
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, token: str) -> str:
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            self._entries[session_id] = (token, time.monotonic() + self.lifetime_s)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return session_id

    def token(self, session_id: str | None) -> str | None:
        if not session_id:
            return None
        with self._lock:
            found = self._entries.get(session_id)
            if found is None:
                return None
            if time.monotonic() >= found[1]:
                del self._entries[session_id]
                return None
            return found[0]

    def end(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._entries.pop(session_id, None)


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


def cookie_name(request: Request, name: str) -> str:
    return HOST_PREFIX + name if is_secure(request) else name


def _cookie_path(request: Request) -> str:
    return "/" if is_secure(request) else COOKIE_PATH  # a __Host- cookie must have Path=/


def _sessions(request: Request) -> ConsoleSessions:
    return face_state(request, ConsoleSessions)


def current_path(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


async def console_caller(request: Request) -> Caller:
    """The reader behind this browser: the session cookie's token, checked like a bearer token."""
    context(request)  # 503 while starting, before any token is judged
    refuse_url_token(request.query_params, "sign in through the form")
    session_id = request.cookies.get(cookie_name(request, SESSION_COOKIE))
    token = _sessions(request).token(session_id)
    try:
        header = f"Bearer {token}" if token else None
        caller = await app_authenticator(request).caller_of(
            header, known_sources(request), write=False, client=client_address(request)
        )
    except UnauthenticatedError:
        _sessions(request).end(session_id)  # a revoked token's session is over
        raise LoginRequired(current_path(request), expired=session_id is not None) from None
    request.state.caller = caller  # the access log names it
    return caller


def signed_in(request: Request) -> bool:
    return _sessions(request).token(request.cookies.get(cookie_name(request, SESSION_COOKIE))) is not None


def csrf_token(request: Request) -> str:
    """This browser's CSRF token: its cookie's, or a new one that `remember_csrf` will set."""
    existing = request.cookies.get(cookie_name(request, CSRF_COOKIE))
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
            cookie_name(request, CSRF_COOKIE),
            new,
            path=_cookie_path(request),
            httponly=True,
            samesite="strict",
            secure=is_secure(request),
        )


def check_csrf(request: Request, submitted: str | None) -> None:
    """Refuse unless the form field (or X-CSRF-Token header) repeats this browser's CSRF cookie."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":  # same-site too: a sibling host may plant cookies
        raise CsrfRejected(f"a {site} request")
    expected = request.cookies.get(cookie_name(request, CSRF_COOKIE))
    presented = submitted or request.headers.get(CSRF_HEADER)
    if not expected or not presented or not secrets.compare_digest(expected.encode(), presented.encode()):
        raise CsrfRejected("the CSRF token is missing or does not match")


def start_session(request: Request, response: Response, token: str) -> None:
    """A new server-side session for `token`; the browser gets only its id."""
    response.set_cookie(
        cookie_name(request, SESSION_COOKIE),
        _sessions(request).start(token),
        max_age=SESSION_SECONDS,
        path=_cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=is_secure(request),
    )
    # A new session gets a new CSRF token: one planted before sign-in is worth nothing after it.
    response.set_cookie(
        cookie_name(request, CSRF_COOKIE),
        secrets.token_urlsafe(32),
        path=_cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=is_secure(request),
    )


def end_session(request: Request, response: Response) -> None:
    """Sign-out: the session is deleted here, so its cookie no longer signs anyone in."""
    name = cookie_name(request, SESSION_COOKIE)
    _sessions(request).end(request.cookies.get(name))
    secure = is_secure(request)
    response.delete_cookie(name, path=_cookie_path(request), httponly=True, samesite="strict", secure=secure)


def login_url(next_path: str, *, expired: bool = False) -> str:
    return f"/ui/login?next={quote(safe_next(next_path), safe='/')}" + ("&expired=1" if expired else "")


def safe_next(candidate: str | None) -> str:
    """Where to go after sign-in: a console path on this site, never another host."""
    if not candidate or not candidate.startswith("/ui") or candidate.startswith("//") or "\\" in candidate:
        return "/ui/"
    return candidate
