"""ASGI middleware: request ids, the request body limit, access logs and HTTP metrics."""

from __future__ import annotations

import logging
import re
import time
import uuid

from kbsearch.api.errors import error_response
from kbsearch.errors import RequestTooLargeError
from kbsearch.logging import request_id
from kbsearch.metrics import Metrics

log = logging.getLogger("kbsearch.access")
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class RequestContextMiddleware:
    """Outermost layer: everything inside it logs with the request id."""

    def __init__(self, app, *, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        incoming = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", []).append((b"x-request-id", rid.encode()))
            await send(message)

        try:
            declared = headers.get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                response = error_response(
                    413, "REQUEST_TOO_LARGE",
                    f"request body is {int(declared)} bytes; the limit is {self.max_body_bytes} bytes",
                )
                await response(scope, receive, send_with_id)
                return
            await self.app(scope, self._limited(receive), send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.http_requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.http_seconds.labels(scope["method"], route).observe(elapsed)
            log.info(
                "request",
                extra={"method": scope["method"], "path": scope["path"], "status": status,
                       "durationMs": round(elapsed * 1000, 2)},
            )
            request_id.reset(token)

    def _limited(self, receive):
        seen = 0

        async def receive_limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise RequestTooLargeError(
                        f"request body exceeds the limit of {self.max_body_bytes} bytes",
                        details={"limit": self.max_body_bytes},
                    )
            return message

        return receive_limited
