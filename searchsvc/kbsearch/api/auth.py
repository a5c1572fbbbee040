"""Bearer-token checks: a write token, and an optional separate read token."""

from __future__ import annotations

import secrets

from fastapi import Request

from kbsearch.errors import ForbiddenError, UnauthenticatedError
from kbsearch.settings import Settings


def _presented_token(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise UnauthenticatedError("this endpoint needs a bearer token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("the Authorization header must be 'Bearer <token>'")
    return token.strip()


def _matches(presented: str, expected: str) -> bool:
    return secrets.compare_digest(presented.encode(), expected.encode())


def require_write(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.api_token is None:
        return
    presented = _presented_token(request)
    if _matches(presented, settings.api_token.get_secret_value()):
        return
    if settings.read_token is not None and _matches(presented, settings.read_token.get_secret_value()):
        raise ForbiddenError("the read token cannot write; use the API token")
    raise UnauthenticatedError("the bearer token is not valid")


def require_read(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.read_token is None:
        return
    presented = _presented_token(request)
    for token in (settings.read_token, settings.api_token):
        if token is not None and _matches(presented, token.get_secret_value()):
            return
    raise UnauthenticatedError("the bearer token is not valid")
