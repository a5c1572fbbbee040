"""An OpenAI-compatible embeddings endpoint serving a model that knows nothing: a broken embedder setting.

Every text gets a unit vector drawn at random, seeded by the text's hash, so the same text always
gets the same vector but related texts are as far apart as unrelated ones. The service reaches it
through its real OpenAI embedder (SEARCHSVC_EMBEDDER=openai, SEARCHSVC_OPENAI_BASE_URL=`url`): what a
deployment pointed at the wrong model, or at a model with shuffled weights, looks like.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np

MODEL = "random-embedding"
DIMENSIONS = 96


def random_vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimensions)
    return (vector / np.linalg.norm(vector)).tolist()  # type: ignore[no-any-return]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dimensions = body.get("dimensions") or DIMENSIONS
        data = [
            {"object": "embedding", "index": i, "embedding": random_vector(t, dimensions)} for i, t in enumerate(texts)
        ]
        raw = json.dumps(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


class RandomEmbeddings:
    """The endpoint in a thread: `with RandomEmbeddings() as endpoint: endpoint.settings()`."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> RandomEmbeddings:
        self._thread.start()
        return self

    def __exit__(self, *exc: object | type[BaseException] | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def settings(self) -> dict[str, str]:
        """The service's environment for this endpoint (the key is a placeholder the endpoint ignores)."""
        return {
            "SEARCHSVC_EMBEDDER": "openai",
            "SEARCHSVC_OPENAI_BASE_URL": self.url,
            "SEARCHSVC_OPENAI_API_KEY": "sk-random-model",
            "SEARCHSVC_OPENAI_MODEL": MODEL,
            "SEARCHSVC_OPENAI_MAX_RETRIES": "1",
            "NO_PROXY": "127.0.0.1,localhost",
        }
