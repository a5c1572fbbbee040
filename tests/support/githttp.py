"""git's own smart-HTTP server (`git http-backend`, a CGI program) behind a threaded wsgiref
server on 127.0.0.1, for tests and benchmarks that must see how git talks to a remote.

Every request is recorded with the git command it carried: `ls-refs` (what `git ls-remote`
asks, and the first step of a fetch) or `fetch` (a fetch that negotiates and may transfer
objects), so a test counts what really went over the wire.
"""

from __future__ import annotations

import os
import socketserver
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

__all__ = ["GitHttpServer", "Request"]


@dataclass(frozen=True)
class Request:
    """One request: `repo` the served folder's name, `command` ls-refs/fetch (v2), or the v0 service."""

    method: str
    repo: str
    command: str


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the base class's name
        pass


class _Threaded(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class GitHttpServer:
    """Serves every bare repository under `root` at `http://127.0.0.1:<port>/<name>`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = make_server("127.0.0.1", 0, self._app, server_class=_Threaded, handler_class=_Quiet)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> GitHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def count(self, command: str, repo: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.command == command and (repo is None or r.repo == repo))

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def _app(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        path = environ.get("PATH_INFO", "")
        query = environ.get("QUERY_STRING", "")
        command = "info/refs" if path.endswith("/info/refs") else "other"
        if environ["REQUEST_METHOD"] == "POST" and path.endswith("/git-upload-pack"):
            command = "fetch"  # protocol v0: a POST is always a fetch
            for verb in ("ls-refs", "fetch"):
                if f"command={verb}\n".encode() in body[:64]:
                    command = verb
        with self._lock:
            self.requests.append(Request(environ["REQUEST_METHOD"], path.strip("/").split("/")[0], command))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", ""),
            "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),  # git gzips bodies over 1 KiB
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = "200 OK", []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        start_response(status, headers)
        return [payload]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A GitHttpServer over `tmp_path/served`, where tests publish their bare repositories."""
    (tmp_path / "served").mkdir()
    with GitHttpServer(tmp_path / "served") as server:
        yield server
