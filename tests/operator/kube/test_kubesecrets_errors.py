"""A failed Secret read says what went wrong and whether waiting helps, against real servers."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes.client
import pytest

from kboperator.errors import KubernetesAccessError, KubernetesUnavailableError, SecretError
from kboperator.kube.secrets import SecretReader
from kboperator.kube.statemachine import failure_reason


@pytest.fixture
def api_server() -> Iterator[tuple[str, list[int]]]:
    """A plain-HTTP server that answers every request with the status at the head of the list."""
    statuses: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            status = statuses[0]
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", statuses
    finally:
        server.shutdown()
        server.server_close()


def reader(host: str) -> SecretReader:
    configuration = kubernetes.client.Configuration()
    configuration.host = host
    return SecretReader(kubernetes.client.ApiClient(configuration))


def read_error(host: str) -> Exception:
    secrets = reader(host)
    try:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - each test asserts the type
            secrets._read("kb", "creds", "repository", ("token",))
    finally:
        secrets.close()
    return caught.value


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (404, SecretError, "does not exist"),
        (403, SecretError, "may not read"),
        (401, KubernetesAccessError, "refused the operator's credentials"),
        (400, KubernetesAccessError, "HTTP 400"),
        (429, KubernetesUnavailableError, "HTTP 429"),
        (500, KubernetesUnavailableError, "HTTP 500"),
        (503, KubernetesUnavailableError, "HTTP 503"),
    ],
)
def test_api_answers(api_server: tuple[str, list[int]], status: int, kind: type, words: str) -> None:
    address, statuses = api_server
    statuses.append(status)
    error = read_error(f"http://{address}")
    assert type(error) is kind and words in str(error)
    assert "Secret kb/creds" in str(error)


def test_tls_failure_is_a_broken_access_not_an_outage(
    api_server: tuple[str, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    address, statuses = api_server
    statuses.append(200)
    caplog.set_level(logging.ERROR, logger="kboperator.kube.secrets")
    error = read_error(f"https://{address}")  # TLS to a server that speaks plain HTTP
    assert type(error) is KubernetesAccessError
    assert "TLS" in str(error)
    assert failure_reason(error) == "KubernetesAccessFailed"
    assert [r.levelname for r in caplog.records] == ["ERROR"]  # reported once, loudly


def test_a_bad_server_address_is_a_configuration_error() -> None:
    error = read_error("http://:80")  # no host
    assert type(error) is KubernetesAccessError


def test_no_answer_at_all_is_transient() -> None:
    error = read_error("http://127.0.0.1:9")  # nothing listens on the discard port
    assert type(error) is KubernetesUnavailableError
    assert failure_reason(error) == "KubernetesUnavailable"
