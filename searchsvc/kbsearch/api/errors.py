"""One place maps every failure to an honest status and a stable JSON error body."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from kbsearch.api.resource_metadata import challenge_headers
from kbsearch.errors import ServiceError, UnauthenticatedError
from kbsearch.presenters import error_response, field_problems, validation_message

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "REQUEST_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(exc, UnauthenticatedError):
        # Where a client learns how to authenticate (RFC 9728), so an MCP client does not guess at OAuth.
        headers |= challenge_headers(request, invalid="authorization" in request.headers)
    if exc.retryable:  # 429, 503 and a lost write race: the same request may succeed later
        headers["Retry-After"] = str(exc.details.get("retryAfterSeconds", 1))
    if exc.status_code >= 500:
        log.warning("request failed", extra={"code": exc.code, "reason": exc.message})
    return error_response(exc.status_code, exc.code, exc.message, exc.details, headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = field_problems(exc)  # never the offending input: it may be a megabyte of document
    first = errors[0] if errors else {"field": "body", "message": "invalid request", "type": ""}
    if first["type"] in ("json_invalid", "json_type") or first["type"].startswith("json"):
        return error_response(
            422, "INVALID_JSON", f"request body is not valid JSON: {first['message']}", {"errors": errors}
        )
    return error_response(422, "VALIDATION_ERROR", validation_message(exc), {"errors": errors})


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if isinstance(exc.__cause__, ServiceError):  # raised while FastAPI read the body (size limit)
        return await _service_error(request, exc.__cause__)
    if exc.status_code == 400 and "parsing the body" in str(exc.detail):
        # FastAPI's answer to a body that is not UTF-8: the same problem as malformed JSON.
        return error_response(422, "INVALID_JSON", "request body is not valid UTF-8 JSON")
    code = _HTTP_CODES.get(exc.status_code, "HTTP_ERROR")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ").lower()
    if exc.status_code == 404:
        message = f"no such endpoint: {request.method} {request.url.path}"
    return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "INTERNAL_ERROR", "the service hit an unexpected error; it has been logged")


_Handler = Callable[[Request, Exception], Awaitable[Response]]


def install_error_handlers(app: FastAPI) -> None:
    # Starlette types every handler as taking any Exception; each here only sees the type it is registered for.
    app.add_exception_handler(ServiceError, cast(_Handler, _service_error))
    app.add_exception_handler(RequestValidationError, cast(_Handler, _validation_error))
    app.add_exception_handler(StarletteHTTPException, cast(_Handler, _http_error))
    app.add_exception_handler(Exception, _unexpected)
