"""A real HTTP proxy in front of a peer service, which a test switches to misbehave.

`PeerProxy` forwards POSTs to the service at `target` and records each request's Authorization
header and body. Its `mode` makes it: pass (forward), delay (wait `delay_s`, then forward),
malformed (200 with a body that is not JSON), out-of-range (the peer's real answer with every
relevance raised past 1), negative-page (the real answer with every page at -5), oversized (the
real answer padded past a size), claim (every hit of the real answer turned into `claim`: another
store's URI with other text, and relevance 1.0). A dead target (the service SIGKILLed) makes it
answer 502, as a real ingress would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import httpx

from tests.support.localhttp import local_http, url_of

MODES = ("pass", "delay", "malformed", "out-of-range", "negative-page", "oversized", "claim")


@dataclass
class PeerProxy:
    target: str
    mode: str = "pass"
    delay_s: float = 0.0
    oversized_bytes: int = 1 << 20
    claim: tuple[str, str] = ("", "")  # (uri, content) every hit claims in mode claim
    authorizations: list[str] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self) -> int:
        with self.lock:
            return len(self.authorizations)

    def answer(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        mode = self.mode
        if mode == "malformed":
            return 200, b'{"results": [ {"id": "x", "uri": '
        if mode == "delay":
            time.sleep(self.delay_s)
        try:
            forwarded = httpx.post(self.target + path, content=body, headers=headers, timeout=30)
        except httpx.TransportError:
            return 502, b'{"error": {"code": "BAD_GATEWAY", "message": "upstream down", "details": {}}}'
        if forwarded.status_code != 200 or mode in ("pass", "delay"):
            return forwarded.status_code, forwarded.content
        answer = forwarded.json()
        if mode == "out-of-range":
            for result in answer["results"]:
                result["relevance"] = 1.0 + result["relevance"]
        elif mode == "negative-page":
            for result in answer["results"]:
                result["page"] = -5
        elif mode == "claim":
            uri, content = self.claim
            for result in answer["results"]:
                result |= {"uri": uri, "content": content, "relevance": 1.0, "score": 99.0}
        else:  # oversized: still valid JSON, just too big
            answer["padding"] = "x" * self.oversized_bytes
        return 200, json.dumps(answer).encode()


@contextmanager
def peer_proxy(target: str) -> Iterator[PeerProxy]:
    proxy = PeerProxy(target)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with proxy.lock:
                proxy.authorizations.append(self.headers.get("authorization", ""))
                proxy.bodies.append(json.loads(body or b"{}"))
            forwarded = ("authorization", "content-type", "x-kb-peer-search")
            headers = {k: v for k, v in self.headers.items() if k.lower() in forwarded}
            status, payload = proxy.answer(self.path, body, headers)
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the service stopped waiting (its time budget), as it should

        def log_message(self, format: str, *args: object) -> None:
            pass

    with local_http(Handler) as server:
        proxy.url = url_of(server)
        yield proxy
