"""A real Qdrant server (one node or a cluster) for the server store's tests.

The binary is the pinned Qdrant 1.19.0 that `make qdrant` unpacks into .tools/qdrant (from
../shared/tools/qdrant; `KB_QDRANT` points elsewhere). Each node runs on free loopback ports with
its own storage under the test's folder, configured by environment variables only, in its own
process group that dies with the test process (tests/support/controlplane.py's _Child).

`qdrant_server` is one node for the whole session: tests share it and each drops what it made
(`wipe`). Under CI=true a missing binary fails the run; elsewhere the tests that need it are
skipped, saying how to get it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from tests.support.controlplane import _Child, free_port

__all__ = ["Balancer", "QdrantCluster", "QdrantNode", "qdrant_binary", "qdrant_server", "storage_root", "wipe"]

REPO = Path(__file__).resolve().parents[2]
# Qdrant fsyncs every collection and index change: on a busy disk a fresh collection with the
# store's eight indexes takes ~2 s, in memory ~0.2 s. The tests are about the engine's answers,
# not durability, so storage goes to tmpfs where there is one.
_TMPFS = Path("/dev/shm")


@contextlib.contextmanager
def storage_root(name: str) -> Iterator[Path]:
    """A fresh folder for nodes' storage, on tmpfs when the machine has one; removed afterwards."""
    parent = _TMPFS if _TMPFS.is_dir() and os.access(_TMPFS, os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix=f"kb-{name}-", dir=parent))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def qdrant_binary() -> Path:
    """The Qdrant server binary; missing, it fails the test under CI=true and skips it elsewhere."""
    binary = Path(os.environ.get("KB_QDRANT") or REPO / ".tools" / "qdrant")
    if os.access(binary, os.X_OK):
        return binary
    message = (
        f"no Qdrant server binary at {binary}: run `make qdrant` (unpacks the pinned Qdrant 1.19.0 from "
        "../shared/tools/qdrant, or from QDRANT_DIST=<folder>), or point KB_QDRANT at one"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _bindable(port: int) -> bool:
    """Free for a server: nothing listens on it. Connections of a killed node that linger in
    TIME_WAIT do not count (SO_REUSEADDR, as Qdrant's listeners), so a node restarts on its ports."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class QdrantNode:
    """One Qdrant process on free loopback ports, its storage under `root`."""

    def __init__(self, binary: Path, root: Path, *, cluster: bool = False) -> None:
        self.binary, self.root, self.cluster = binary, root, cluster
        root.mkdir(parents=True, exist_ok=True)
        self.http_port, self.grpc_port = free_port(), free_port()
        self.p2p_port = free_port() if cluster else None
        self.url = f"http://127.0.0.1:{self.http_port}"
        self._child: _Child | None = None

    @property
    def p2p_url(self) -> str:
        return f"http://127.0.0.1:{self.p2p_port}"

    def env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "QDRANT__SERVICE__HOST": "127.0.0.1",
            "QDRANT__SERVICE__HTTP_PORT": str(self.http_port),
            "QDRANT__SERVICE__GRPC_PORT": str(self.grpc_port),
            "QDRANT__STORAGE__STORAGE_PATH": str(self.root / "storage"),
            "QDRANT__STORAGE__SNAPSHOTS_PATH": str(self.root / "snapshots"),
            "QDRANT__STORAGE__TEMP_PATH": str(self.root / "tmp"),
            "QDRANT__TELEMETRY_DISABLED": "true",
            "QDRANT__LOG_LEVEL": "WARN",
        }
        if self.cluster:
            env |= {"QDRANT__CLUSTER__ENABLED": "true", "QDRANT__CLUSTER__P2P__PORT": str(self.p2p_port)}
        return env

    def start(self, *, bootstrap: QdrantNode | None = None, timeout_s: float = 60) -> QdrantNode:
        ports = [p for p in (self.http_port, self.grpc_port, self.p2p_port) if p is not None]
        if taken := [p for p in ports if not _bindable(p)]:
            raise RuntimeError(f"loopback ports already taken: {taken}")
        argv = [str(self.binary), "--disable-telemetry"]
        if self.cluster:
            argv += ["--uri", self.p2p_url]
            if bootstrap is not None:
                argv += ["--bootstrap", bootstrap.p2p_url]
        # The working directory holds nothing Qdrant needs: it only warns about ./config and ./static.
        self._child = _Child(f"qdrant :{self.http_port}", argv, self.root / "qdrant.log", self.env(), self.root)
        self._child.start()
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self._child is not None
            self._child.check_running()
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Qdrant at {self.url} not ready after {timeout_s} s:\n{self._child.tail()}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self._child is not None and self._child.alive()

    def kill(self) -> None:
        """SIGKILL: the node vanishes as a crashed or partitioned one would; start() brings it back
        on the same ports and storage, as a restarted pod."""
        if self._child is not None:
            self._child.kill()

    def client(self, **options: object) -> QdrantClient:
        return QdrantClient(url=self.url, check_compatibility=False, **options)  # type: ignore[arg-type]


class QdrantCluster:
    """`size` nodes in one Raft cluster on loopback: the first bootstraps it, the others join."""

    def __init__(self, binary: Path, root: Path, size: int) -> None:
        self.nodes = [QdrantNode(binary, root / f"node-{i}", cluster=True) for i in range(size)]

    def start(self, timeout_s: float = 120) -> QdrantCluster:
        first, *others = self.nodes
        first.start(timeout_s=timeout_s)
        for node in others:  # one at a time: each joins through the first node's consensus
            node.start(bootstrap=first, timeout_s=timeout_s)
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()


def wipe(client: QdrantClient) -> None:
    """Drop every alias and collection, so the next test finds an empty server."""
    for alias in client.get_aliases().aliases:
        client.delete_alias(alias.alias_name)
    for collection in client.get_collections().collections:
        client.delete_collection(collection.name)


@pytest.fixture(scope="session")
def qdrant_server() -> Iterator[QdrantNode]:
    """One real Qdrant node for the session; a test drops its collections with `wipe` when done."""
    binary = qdrant_binary()
    with storage_root("qdrant") as root:
        node = QdrantNode(binary, root)
        try:
            yield node.start()
        finally:
            node.kill()


class Balancer:
    """One address in front of several nodes, as a Kubernetes Service is: each new connection goes
    to the next node that is alive (its endpoints follow readiness); a dead node's connections
    close. Bytes are copied as they come, so HTTP keep-alive works through it."""

    def __init__(self, nodes: list[QdrantNode]) -> None:
        self.nodes = nodes
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._next = itertools.count()
        self._closed = threading.Event()
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Balancer:
        self._accepting.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._listener.close()

    def _backend(self) -> socket.socket | None:
        for _ in range(len(self.nodes)):
            node = self.nodes[next(self._next) % len(self.nodes)]
            if node.alive():
                with contextlib.suppress(OSError):
                    return socket.create_connection(("127.0.0.1", node.http_port), timeout=2)
        return None

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                front, _ = self._listener.accept()
            except OSError:
                return
            back = self._backend()
            if back is None:
                front.close()  # no live endpoint: refused, as a Service with none answers
                continue
            back.settimeout(None)
            for source, sink in ((front, back), (back, front)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    for end in (source, sink):  # one side gone: close both, as a proxy does
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()
