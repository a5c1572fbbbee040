"""Signing in to the console over HTTP as a browser does: the CSRF cookie and field, then the token."""

from __future__ import annotations

import re

import httpx

_CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_in(page: str) -> str:
    """The CSRF token a console form carries (the same value as the CSRF cookie)."""
    match = _CSRF_INPUT.search(page)
    assert match, page
    return match.group(1)


def sign_in(client: httpx.Client, token: str, next_path: str = "/ui/") -> httpx.Response:
    """Post the sign-in form with `token`; the client keeps the session cookie the service sets."""
    csrf = csrf_in(client.get("/ui/login").text)
    return client.post("/ui/login", data={"token": token, "csrf_token": csrf, "next": next_path})
