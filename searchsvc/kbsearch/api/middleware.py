"""ASGI middleware: request ids, the request body's size and time limits, access logs and HTTP metrics."""

from __future__ import annotations

import logging
import re
import time
import uuid

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kbsearch.errors import RequestTimeoutError, RequestTooLargeError
from kbsearch.logging import request_id
from kbsearch.metrics import Metrics
from kbsearch.presenters import error_response

log = logging.getLogger("kbsearch.access")
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class RequestContextMiddleware:
    """Outermost layer: everything inside it logs with the request id."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, max_body_bytes: int, body_timeout_s: float) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        incoming = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        body = _BodyReader(receive, self.max_body_bytes, self.body_timeout_s, expected=_has_body(headers))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", []).append((b"x-request-id", rid.encode()))
                if not body.complete:
                    # The rest of the body may never come: do not keep the connection for it.
                    message["headers"].append((b"connection", b"close"))
            await send(message)

        try:
            declared = headers.get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                response = error_response(
                    413,
                    "REQUEST_TOO_LARGE",
                    f"request body is {int(declared)} bytes; the limit is {self.max_body_bytes} bytes",
                )
                await response(scope, receive, send_with_id)
                return
            await self.app(scope, body.receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.http_requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.http_seconds.labels(scope["method"], route).observe(elapsed)
            caller = (scope.get("state") or {}).get("caller")  # set by api/auth.py: a name, never a token
            log.info(
                "request",
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "durationMs": round(elapsed * 1000, 2),
                    "caller": getattr(caller, "name", None),
                },
            )
            request_id.reset(token)


def _has_body(headers: dict[bytes, bytes]) -> bool:
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"0").strip() not in (b"0", b"")


class _BodyReader:
    """The app's `receive`, with the body's size limit and a deadline for the whole body.

    The deadline starts at the first read and is not renewed by each chunk, so a client that
    drips a byte at a time is bounded too. Waiting for a disconnect after the body is not.
    """

    def __init__(self, receive: Receive, max_bytes: int, timeout_s: float, *, expected: bool) -> None:
        self._receive = receive
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._seen = 0
        self._deadline: float | None = None
        self.complete = not expected

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        if self._deadline is None:
            self._deadline = anyio.current_time() + self._timeout_s
        try:
            with anyio.fail_after(max(self._deadline - anyio.current_time(), 0)):
                message = await self._receive()
        except TimeoutError:
            raise RequestTimeoutError(
                f"the request body did not arrive within {self._timeout_s:g} seconds",
                details={"timeoutSeconds": self._timeout_s},
            ) from None
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._max_bytes:
                raise RequestTooLargeError(
                    f"request body exceeds the limit of {self._max_bytes} bytes",
                    details={"limit": self._max_bytes},
                )
            self.complete = not message.get("more_body", False)
        else:
            self.complete = True  # the client is gone
        return message
