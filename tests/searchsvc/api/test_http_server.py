"""The served process over raw sockets: half-sent requests are closed, early 401s, JSON for low-level errors."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.service_process import served

TOKEN = "write-token-for-sockets"
TIMEOUT_S = "1"  # header and body deadlines of the served process
CLOSE_WITHIN_S = 60  # generous: the bound is TIMEOUT_S, this only keeps a broken server from hanging the test
N = 40  # connections of each kind


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("served") / "data"
    with served(
        data,
        SEARCHSVC_API_TOKEN=TOKEN,
        SEARCHSVC_ALLOWED_HOSTS="kb,127.0.0.1:*",  # reads are open: the raw requests below say `Host: kb`
        SEARCHSVC_REQUEST_HEADER_TIMEOUT_S=TIMEOUT_S,
        SEARCHSVC_REQUEST_BODY_TIMEOUT_S=TIMEOUT_S,
    ) as url:
        yield url


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=CLOSE_WITHIN_S)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends before it closes; socket.timeout if it never does."""
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        chunks.append(data)
    sock.close()
    return b"".join(chunks)


def error_of(response: bytes) -> tuple[int, dict[str, str], dict]:
    """Status, headers and JSON error body of a raw HTTP/1.1 response (content-length or close-delimited)."""
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    if headers.get("transfer-encoding") == "chunked":
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    return int(status_line.split()[1]), headers, json.loads(body)["error"]


def put_head(length: int, token: str | None = TOKEN) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"PUT /api/v1/documents HTTP/1.1\r\nHost: kb\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


HALF_SENT = {
    "nothing": b"",
    "half a request line": b"PUT /api/v1/docu",
    "headers without their end": b"PUT /api/v1/documents HTTP/1.1\r\nHost: kb\r\nContent-Length: 20\r\n",
}


def test_half_sent_requests_are_closed_and_the_server_keeps_serving(service):
    waiting = {kind: [] for kind in [*HALF_SENT, "half a body"]}
    for _ in range(N):
        for kind, data in HALF_SENT.items():
            sock = connect(service)
            sock.sendall(data)
            waiting[kind].append(sock)
        sock = connect(service)
        sock.sendall(put_head(1000) + b'{"uri": "slow.md", ')
        waiting["half a body"].append(sock)

    for kind in HALF_SENT:
        # Headers never completed: there is no request to answer, only a connection to close.
        assert [read_until_closed(sock) for sock in waiting[kind]] == [b""] * N, kind
    for sock in waiting["half a body"]:
        status, headers, error = error_of(read_until_closed(sock))
        assert (status, error["code"]) == (408, "REQUEST_TIMEOUT")
        assert headers["connection"] == "close"
    assert httpx.get(f"{service}/healthz", timeout=30).status_code == 200


def drip_until_closed(sock: socket.socket, data: bytes) -> bytes:
    """Send one byte at a time, pausing briefly, until the server answers or closes."""
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            break
        readable, _, _ = select.select([sock], [], [], 0.05)  # pacing only; the bound is the server's
        if readable:
            break
    return read_until_closed(sock)


def test_a_dripping_client_does_not_renew_the_deadlines(service):
    # 1 s deadlines against about 40 s of dripping: closed early, or the test fails on the last byte.
    head = b"GET /healthz HTTP/1.1\r\nHost: kb\r\n" + b"X-Pad: " + b"a" * 800 + b"\r\n\r\n"
    assert drip_until_closed(connect(service), head) == b""

    sock = connect(service)
    sock.sendall(put_head(800))
    status, _, error = error_of(drip_until_closed(sock, b'{"uri": "d.md", "content": "' + b"a" * 800))
    assert (status, error["code"]) == (408, "REQUEST_TIMEOUT")


def test_a_write_without_a_token_is_refused_before_its_body_is_sent(service):
    for token in (None, "wrong-token"):
        sock = connect(service)
        sock.sendall(put_head(8 * 1024 * 1024 - 1, token))  # just under the body limit; no body follows
        status, headers, error = error_of(read_until_closed(sock))
        assert (status, error["code"]) == (401, "UNAUTHENTICATED")
        assert headers["connection"] == "close"


MALFORMED = {
    "not HTTP": b"HELLO THERE\r\n\r\n",
    "bad content-length": b"PUT /api/v1/documents HTTP/1.1\r\nHost: kb\r\nContent-Length: lots\r\n\r\n",
    "header without a colon": b"GET /healthz HTTP/1.1\r\nHost: kb\r\nnonsense\r\n\r\n",
    "not UTF-8 or ASCII in the target": b"GET /\xff\xfe HTTP/1.1\r\nHost: kb\r\n\r\n",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_http_gets_the_json_error_body(service, case):
    sock = connect(service)
    sock.sendall(MALFORMED[case])
    status, headers, error = error_of(read_until_closed(sock))
    assert (status, error["code"]) == (400, "BAD_REQUEST")
    assert headers["content-type"] == "application/json"
