"""At the ASGI boundary: tokens are checked before a body is read, and a body that never comes is a 408."""

from __future__ import annotations

import asyncio
import json

import pytest

from kbsearch.app import create_app
from kbsearch.settings import Settings
from tests.support.hashing import HashingEmbedder
from tests.support.service import make_store

WRITE, READ = "write-token-123", "read-token-456"
BODY = json.dumps({"uri": "a.md", "content": "hello"}).encode()


@pytest.fixture
async def app(tmp_path):
    settings = Settings(data_dir=tmp_path, api_token=WRITE, read_token=READ, request_body_timeout_s=0.05)
    app = create_app(settings, store=make_store("edge", tmp_path), embedder=HashingEmbedder())
    async with app.router.lifespan_context(app):
        yield app


async def call(app, method: str, path: str, receive, token: str | None = None) -> tuple[int, dict, dict]:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "server": ("kb", 80),
        "client": ("test", 1),
    }
    sent = []

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, json.loads(body)


def counting_receive():
    calls = []

    async def receive():
        calls.append(1)
        return {"type": "http.request", "body": BODY, "more_body": False}

    return receive, calls


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        ("PUT", "/api/v1/documents", None, 401),
        ("PUT", "/api/v1/documents", "wrong", 401),
        ("PUT", "/api/v1/documents", READ, 403),
        ("POST", "/api/v1/search", None, 401),
    ],
)
async def test_a_refused_token_is_answered_without_reading_the_body(app, method, path, token, status):
    receive, calls = counting_receive()
    got, headers, body = await call(app, method, path, receive, token)
    assert (got, calls) == (status, [])
    assert body["error"]["code"] in ("UNAUTHENTICATED", "FORBIDDEN")
    assert headers["connection"] == "close"  # the unread body must not be taken for the next request


async def test_an_accepted_token_reads_the_body(app):
    receive, calls = counting_receive()
    status, headers, body = await call(app, "PUT", "/api/v1/documents", receive, WRITE)
    assert (status, body["status"], calls) == (200, "created", [1])
    assert "connection" not in headers


async def test_a_body_that_never_arrives_is_a_408_that_closes_the_connection(app):
    async def receive_nothing():
        await asyncio.Event().wait()  # the client sent its headers and then nothing

    async with asyncio.timeout(60):  # only keeps a missing deadline from hanging the suite
        status, headers, body = await call(app, "PUT", "/api/v1/documents", receive_nothing, WRITE)
    assert (status, body["error"]["code"]) == (408, "REQUEST_TIMEOUT")
    assert body["error"]["details"] == {"timeoutSeconds": 0.05}
    assert headers["connection"] == "close"
