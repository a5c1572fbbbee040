"""The real search service in a thread and the kb-sync command line, for the CLI tests."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from kboperator.cli import main
from kbsearch.app import create_app
from kbsearch.settings import Settings
from tests.operator.world import Faults
from tests.support.git import WorkRepo
from tests.support.hashing import HashingEmbedder
from tests.support.service import make_store

SOURCE = "ci/docs"
TOKEN = "cli-service-token"


class Server:
    """The real app in a uvicorn thread; `url` is its base URL, `faults` a switch in front of it."""

    def __init__(self, data_dir: Path, port: int = 0, **settings: object) -> None:
        app = create_app(
            Settings(data_dir=data_dir, **settings), store=make_store("edge", data_dir), embedder=HashingEmbedder()
        )
        self.faults = Faults(app)
        # Bound here and handed to uvicorn: no other process can take the port in between. A
        # given port is the one a previous Server used (a "reset" service at the same URL).
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port))
        self.port = port = self.socket.getsockname()[1]
        config = uvicorn.Config(self.faults, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 120  # normally well under a second
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)
        self.socket.close()

    def listing(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        response = httpx.get(
            f"{self.url}/api/v1/documents", params={"sourceIdentifier": SOURCE, "limit": 1000}, headers=headers
        )
        assert response.status_code == 200, response.text
        return {doc["uri"]: doc["checksum"] for doc in response.json()["documents"]}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def base_args(server: Server, repo: WorkRepo, tmp_path: Path) -> list[str]:
    return [
        "--repo",
        str(repo.path),
        "--source-id",
        SOURCE,
        "--service",
        server.url,
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
