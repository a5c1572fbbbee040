"""OpenAI embedder against a local OpenAI-compatible HTTP stub, through the real openai client."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kbsearch.embedders.openai import PROBE_TEXT, OpenAIEmbedder
from kbsearch.errors import ConfigurationError, EmbedderUnavailableError

DEFAULT_DIMS = 8


def expected_vector(text: str, dims: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255 for i in range(dims)]


@dataclass
class Stub:
    """What the fake endpoint does; tests set the fields and read `requests`."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # answered first, in order
    dims: int = DEFAULT_DIMS  # when the request does not ask for a size
    force_dims: int | None = None  # answer with this size whatever was asked
    drop_last: bool = False
    hang: bool = False  # never answer, until the test ends (a client timeout must fire)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, status: int, times: int = 1, **headers: str) -> None:
        self.failures.extend([(status, headers)] * times)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        stub = self.server.stub
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with stub.lock:
            stub.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            failure = stub.failures.pop(0) if stub.failures else None
        if stub.hang:
            stub.released.wait(timeout=300)
        if failure is not None:
            status, headers = failure
            self._send(status, {"error": {"message": f"stub says {status}", "type": "stub", "code": None}}, headers)
            return
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = stub.force_dims or body.get("dimensions") or stub.dims
        data = [
            {"object": "embedding", "index": i, "embedding": expected_vector(text, dims)}
            for i, text in enumerate(inputs)
        ]
        if stub.drop_last:
            data = data[:-1]
        data.reverse()  # the API does not promise order: the client must sort by index
        self._send(
            200,
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}},
        )

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: Stub

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected in one test


@pytest.fixture
def stub(monkeypatch) -> Iterator[tuple[Stub, str]]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server = _Server(("127.0.0.1", 0), Handler)
    server.stub = Stub()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server.stub, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.stub.released.set()
        server.shutdown()
        server.server_close()
        thread.join()


class Sleeps(list):
    """Records backoff delays instead of sleeping them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def make(stub):
    made: list[OpenAIEmbedder] = []

    def factory(**kwargs: Any) -> OpenAIEmbedder:
        kwargs.setdefault("base_url", stub[1])
        kwargs.setdefault("api_key", "sk-test")
        kwargs.setdefault("model", "stub-embed")
        kwargs.setdefault("sleep", Sleeps())
        kwargs.setdefault("jitter", lambda: 1.0)  # factor 1.0: delays are exactly the backoff
        embedder = OpenAIEmbedder(**kwargs)
        made.append(embedder)
        return embedder

    yield factory
    for embedder in made:
        embedder.close()


def inputs(stub: Stub) -> list[list[str]]:
    return [r["body"]["input"] for r in stub.requests]


# --- batching and the request --------------------------------------------------------------


def test_batches_requests_and_keeps_order(stub, make):
    fake, _ = stub
    embedder = make(batch_size=3, dimensions=DEFAULT_DIMS)
    texts = [f"text {i}" for i in range(10)]
    vectors = embedder.embed_documents(texts)
    assert inputs(fake) == [texts[0:3], texts[3:6], texts[6:9], texts[9:10]]
    assert all(len(batch) <= 3 for batch in inputs(fake))
    assert vectors == [expected_vector(t, DEFAULT_DIMS) for t in texts]  # sorted back by index


def test_request_carries_model_key_format_and_dimensions(stub, make):
    fake, _ = stub
    embedder = make(dimensions=16)
    assert embedder.dimensions == 16
    vector = embedder.embed_query("hello")
    request = fake.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "stub-embed"
    assert request["body"]["encoding_format"] == "float"
    assert request["body"]["dimensions"] == 16
    assert len(vector) == 16


def test_load_learns_the_size_from_a_probe_and_sends_no_dimensions(stub, make):
    fake, _ = stub
    embedder = make()
    with pytest.raises(RuntimeError):
        _ = embedder.dimensions
    embedder.load()
    embedder.load()  # once only
    assert embedder.dimensions == DEFAULT_DIMS
    assert inputs(fake) == [[PROBE_TEXT]]
    assert "dimensions" not in fake.requests[0]["body"]
    embedder.embed_documents(["a", "b"])
    assert len(fake.requests) == 2


def test_embedding_without_load_learns_the_size_first(stub, make):
    fake, _ = stub
    embedder = make()
    assert len(embedder.embed_documents(["a"])[0]) == DEFAULT_DIMS
    assert inputs(fake) == [[PROBE_TEXT], ["a"]]


def test_empty_input_makes_no_request(stub, make):
    fake, _ = stub
    assert make(dimensions=4).embed_documents([]) == []
    assert fake.requests == []


# --- retries -------------------------------------------------------------------------------


def test_retries_429_with_exponential_backoff(stub, make):
    fake, _ = stub
    fake.fail(429, times=3)
    sleeps = Sleeps()
    embedder = make(dimensions=4, max_retries=5, backoff_base=0.25, backoff_max=100, sleep=sleeps)
    assert embedder.embed_documents(["x"]) == [expected_vector("x", 4)]
    assert len(fake.requests) == 4
    assert sleeps == [0.25, 0.5, 1.0]


def test_backoff_has_jitter_and_a_cap(stub, make):
    fake, _ = stub
    fake.fail(503, times=6)
    sleeps = Sleeps()
    embedder = make(dimensions=4, max_retries=6, backoff_base=1.0, backoff_max=8.0, sleep=sleeps, jitter=lambda: 0.0)
    embedder.embed_documents(["x"])
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # (base * 2**n, capped at 8) * jitter factor 0.5


def test_retry_after_header_is_honoured_within_the_cap(stub, make):
    fake, _ = stub
    fake.fail(429, **{"Retry-After": "3"})
    fake.fail(429, **{"retry-after-ms": "1500"})
    fake.fail(429, **{"Retry-After": "600"})
    sleeps = Sleeps()
    embedder = make(dimensions=4, max_retries=3, backoff_base=0.01, backoff_max=10.0, sleep=sleeps)
    embedder.embed_documents(["x"])
    assert sleeps == [3.0, 1.5, 10.0]


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
def test_retries_server_errors(stub, make, status):
    fake, _ = stub
    fake.fail(status, times=2)
    embedder = make(dimensions=4, max_retries=2)
    assert embedder.embed_documents(["x"]) == [expected_vector("x", 4)]
    assert len(fake.requests) == 3


def test_exhausted_retries_raise_unavailable(stub, make):
    fake, _ = stub
    fake.fail(503, times=10)
    sleeps = Sleeps()
    embedder = make(dimensions=4, max_retries=2, sleep=sleeps)
    with pytest.raises(EmbedderUnavailableError) as caught:
        embedder.embed_documents(["x"])
    assert len(fake.requests) == 3 and len(sleeps) == 2
    assert caught.value.status_code == 503 and caught.value.retryable
    assert caught.value.details["attempts"] == 3


def test_exhausted_retries_at_load_are_unavailable_not_configuration(stub, make):
    fake, _ = stub
    fake.fail(429, times=10)
    with pytest.raises(EmbedderUnavailableError):
        make(max_retries=1).load()


def test_connection_errors_are_retried_then_unavailable(make):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    sleeps = Sleeps()
    embedder = make(base_url=f"http://127.0.0.1:{port}/v1", dimensions=4, max_retries=2, sleep=sleeps)
    with pytest.raises(EmbedderUnavailableError) as caught:
        embedder.embed_documents(["x"])
    assert len(sleeps) == 2
    assert caught.value.details["reason"] == "APIConnectionError"


def test_timeouts_are_retried_then_unavailable(stub, make):
    fake, _ = stub
    fake.hang = True  # no answer ever comes, however slow the machine: the timeout fires every time
    embedder = make(dimensions=4, max_retries=1, timeout=0.05)
    with pytest.raises(EmbedderUnavailableError, match="2 times") as caught:
        embedder.embed_documents(["x"])
    assert caught.value.details["reason"] == "APITimeoutError"


# --- refusals and checks -------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_at_load_is_a_configuration_error(stub, make, status):
    fake, _ = stub
    fake.fail(status, times=5)
    with pytest.raises(ConfigurationError, match="SEARCHSVC_OPENAI_API_KEY"):
        make(max_retries=3).load()
    assert len(fake.requests) == 1  # never retried


def test_auth_failure_after_start_up_is_unavailable_without_retries(stub, make):
    fake, _ = stub
    embedder = make(dimensions=4, max_retries=3)
    embedder.load()
    fake.fail(401, times=5)
    with pytest.raises(EmbedderUnavailableError) as caught:
        embedder.embed_documents(["x"])
    assert caught.value.details["status"] == 401
    assert len(fake.requests) == 2


def test_unknown_model_at_load_is_a_configuration_error(stub, make):
    fake, _ = stub
    fake.fail(404)
    with pytest.raises(ConfigurationError, match="SEARCHSVC_OPENAI_MODEL"):
        make().load()


def test_configured_dimensions_mismatch_at_load_is_a_configuration_error(stub, make):
    fake, _ = stub
    fake.force_dims = 4  # a server that ignores `dimensions`
    with pytest.raises(ConfigurationError, match="4-dimensional vector, expected 8"):
        make(dimensions=8).load()


def test_dimension_mismatch_after_start_up_never_returns_vectors(stub, make):
    fake, _ = stub
    embedder = make()
    embedder.load()
    fake.force_dims = DEFAULT_DIMS * 2  # the model changed behind the endpoint
    with pytest.raises(EmbedderUnavailableError, match="expected 8") as caught:
        embedder.embed_documents(["a", "b"])
    assert caught.value.details == {"reason": "dimension_mismatch", "expected": DEFAULT_DIMS, "got": DEFAULT_DIMS * 2}


def test_missing_vectors_are_an_error(stub, make):
    fake, _ = stub
    fake.drop_last = True
    with pytest.raises(EmbedderUnavailableError, match="1 vectors for 2 texts"):
        make(dimensions=4).embed_documents(["a", "b"])


def test_a_key_is_required_for_the_openai_api(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError):
        OpenAIEmbedder(api_key=None, base_url=None)


def test_a_keyless_compatible_server_works(stub, make, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake, _ = stub
    make(api_key=None, dimensions=4).embed_query("x")
    assert fake.requests[0]["auth"] is not None


# --- lifetime ------------------------------------------------------------------------------


def test_the_service_closes_the_embedders_http_client_at_shutdown(make, stub, tmp_path) -> None:
    from fastapi.testclient import TestClient

    from kbsearch.app import create_app
    from kbsearch.settings import Settings
    from tests.support.service import make_store

    embedder = make()
    app = create_app(Settings(data_dir=tmp_path), store=make_store("edge", tmp_path), embedder=embedder)
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        assert not embedder._client.is_closed()
    assert embedder._client.is_closed(), "the OpenAI client's connection pool outlives the app"
