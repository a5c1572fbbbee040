"""The HTTP server: uvicorn on its h11 protocol, with a deadline for headers and JSON for its own 400s.

uvicorn arms no timer on a new connection, and any byte disarms its keep-alive timer, so a client
that sends half a request line (or one header byte a minute) held a descriptor forever. The
app's middleware bounds the body (SEARCHSVC_REQUEST_BODY_TIMEOUT_S); this protocol bounds what
comes before it. Both hooks are uvicorn internals of H11Protocol (pinned to h11 for that reason);
tests/searchsvc/api/test_http_server.py checks them against a served process.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import socket

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from kbsearch.settings import HttpSettings

log = logging.getLogger(__name__)

_BAD_REQUEST = json.dumps(
    {"error": {"code": "BAD_REQUEST", "message": "the request is not valid HTTP/1.1", "details": {}}}
).encode()


class _LingeringTransport:
    """The connection's transport as uvicorn sees it; its close() lingers while a body is still coming.

    A request refused before its body was read (401, 429, 503 of the body budget) is answered with
    Connection: close. Closing a socket whose client is still sending makes the kernel send a reset,
    which destroys the answer before the client reads it. So, as nginx's lingering close: send the
    answer and FIN, drop whatever else arrives, and close when the client does or after `linger_s`.
    """

    def __init__(self, transport: asyncio.Transport, protocol: BoundedH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        if self._protocol.conn.their_state is not h11.SEND_BODY or not self._transport.can_write_eof():
            self._transport.close()
            return
        self.lingering = True
        self._transport.write_eof()  # after the answer already written
        self._transport.resume_reading()  # uvicorn paused it while the body waited for the app
        self._protocol.loop.call_later(self._protocol.linger_s, self._transport.close)


class BoundedH11Protocol(H11Protocol):
    """H11Protocol that closes a connection whose request headers are not complete in time,
    and lingers before closing one whose request body was refused unread."""

    header_timeout_s = 10.0
    linger_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self.transport = self._lingering = _LingeringTransport(transport, self)  # type: ignore[assignment]
        self._follow_state()

    def data_received(self, data: bytes) -> None:
        if self._lingering.lingering:
            return  # the rest of a refused body: dropped, never buffered
        super().data_received(data)
        self._follow_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_state()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _follow_state(self) -> None:
        # IDLE: no complete request line and headers yet. The deadline runs from the moment the
        # connection became idle and is not renewed by data, so dripping bytes does not extend it.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if self._header_deadline is None:
                self._header_deadline = self.loop.call_later(self.header_timeout_s, self._expire)
        else:
            self._disarm()

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _expire(self) -> None:
        self._header_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        # uvicorn's own answer to bytes h11 cannot parse is plain text; keep the service's error body.
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=_BAD_REQUEST),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def fix_mmap_threshold(threshold: int) -> bool:
    """Give glibc a fixed mmap threshold; whether it took it (False off glibc, or for 0).

    glibc raises its threshold to the size of each mapped block freed (up to 32 MiB), so after
    the first 8 MiB body is freed every later one comes from the heap, whose freed middle is never
    given back: RSS stayed at its burst's peak. A fixed threshold keeps large blocks mapped and
    returns them when freed (docs/operations/memory.md has the figures).
    """
    if not threshold:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def build_server(http: HttpSettings, app: ASGIApp) -> uvicorn.Server:
    """The uvicorn server `python -m kbsearch` runs, with the configured timeouts."""
    if not fix_mmap_threshold(http.malloc_mmap_threshold_bytes) and http.malloc_mmap_threshold_bytes:
        log.warning("mallopt is not available: memory freed after a burst may not return to the system")
    # A refused body's client had request_body_timeout_s to send it: it gets as long to finish before the close.
    bounds = {"header_timeout_s": http.request_header_timeout_s, "linger_s": http.request_body_timeout_s}
    protocol = type("BoundedH11Protocol", (BoundedH11Protocol,), bounds)
    config = uvicorn.Config(
        app,
        host=http.host,
        port=http.port,
        http=protocol,
        log_config=None,
        access_log=False,
        # The console marks its cookies Secure when the request's scheme is https, which a
        # TLS-terminating proxy reports in X-Forwarded-Proto; only these addresses are believed.
        proxy_headers=True,
        forwarded_allow_ips=http.trusted_proxies,
    )
    return KnowledgeServer(config)


class KnowledgeServer(uvicorn.Server):
    """uvicorn's server whose start-up ends with one line: where the console, MCP and the API are."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.servers:  # start-up failed: uvicorn has said why
            return
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        base = f"http://{_url_host(host)}:{port}"
        log.info(
            "serving: console %s/ui/ - MCP %s/mcp - API %s/api/v1 (reference %s/docs)",
            base,
            base,
            base,
            base,
            extra={"console": f"{base}/ui/", "mcp": f"{base}/mcp", "api": f"{base}/api/v1"},
        )


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):  # every interface: this machine answers on loopback too
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
