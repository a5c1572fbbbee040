"""The end-to-end world: git repositories in tmp, the real search service, and the operator."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import kopf
import pytest

from kbsearch.app import create_app
from kbsearch.settings import Settings
from tests.support.hashing import HashingEmbedder
from tests.support.kube import KubeApi, KubeEmulator, eventually, running_operator
from tests.support.service import make_store, serve

NAMESPACE = "kb"
PACER = "pacer"
SERVICE_URL = "http://localhost"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class GitRepo:
    """A real git repository in a temporary folder, edited like a user would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self._git("init", "--quiet", "--initial-branch=main")

    def write(self, relpath: str, content: str | bytes) -> None:
        target = self.path / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)

    def remove(self, relpath: str) -> None:
        self._git("rm", "--quiet", "--", relpath)

    def move(self, old: str, new: str) -> None:
        (self.path / new).parent.mkdir(parents=True, exist_ok=True)
        self._git("mv", "--", old, new)

    def commit(self, message: str) -> str:
        self._git("add", "--all")
        self._git("commit", "--quiet", "--allow-empty", "-m", message)
        return self._git("rev-parse", "HEAD").strip()

    def revert(self) -> str:
        """Undo the last commit with a new one: the tree goes back to what it was."""
        self._git("revert", "--no-edit", "HEAD")
        return self._git("rev-parse", "HEAD").strip()

    def expected(self, *relpaths: str) -> dict[str, str]:
        """{path: checksum} the service must hold for these files of the working tree."""
        return {p: "sha256:" + hashlib.sha256((self.path / p).read_bytes()).hexdigest() for p in relpaths}

    def _git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env={**os.environ, **_GIT_ENV},
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout


class Faults:
    """The real service behind a switch: 503 for everything, or for PUTs of chosen paths."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.down = False
        self.failing_paths: set[str] = set()
        self.refused = 0

    def heal(self) -> None:
        self.down = False
        self.failing_paths.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.down:
            await self._refuse(send)
            return
        if scope["method"] == "PUT" and self.failing_paths:
            body = await _read_body(receive)
            path = json.loads(body or b"{}").get("metadata", {}).get("path")
            if path in self.failing_paths:
                await self._refuse(send)
                return
            receive = _replay(body)
        await self.app(scope, receive, send)

    async def _refuse(self, send: Send) -> None:
        self.refused += 1
        payload = json.dumps({"error": {"code": "UNAVAILABLE", "message": "switched off by the test"}}).encode()
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


#: How the chart installs the operator: watching listed namespaces (its Roles), or all (a ClusterRole).
NAMESPACED, CLUSTERWIDE = "namespaced", "clusterwide"


class World:
    """Everything an end-to-end test touches."""

    def __init__(
        self, tmp: Path, kube: KubeEmulator, service: httpx.AsyncClient, faults: Faults, mode: str = NAMESPACED
    ) -> None:
        self.tmp = tmp
        self.kube = kube
        self.mode = mode
        self.api = KubeApi(kube, NAMESPACE)
        self.service = service
        self.faults = faults
        self.memo = kopf.Memo()
        self._operator: AsyncExitStack | None = None

    async def start_operator(self) -> None:
        """A fresh operator process, as after a pod restart: nothing kept in memory."""
        self.memo = kopf.Memo(search_transport=httpx.ASGITransport(app=self.faults))
        self._operator = AsyncExitStack()
        # What __main__ passes to kopf for each of the chart's install modes.
        namespaces = [NAMESPACE] if self.mode == NAMESPACED else None
        await self._operator.enter_async_context(running_operator(self.memo, namespaces=namespaces))

    async def stop_operator(self) -> None:
        if self._operator is not None:
            await self._operator.aclose()
            self._operator = None

    def repo(self, name: str) -> GitRepo:
        return GitRepo(self.tmp / "repos" / name)

    async def listing(self, name: str) -> dict[str, str]:
        """{path: checksum} of what the service holds for a source, across all pages."""
        documents: dict[str, str] = {}
        cursor = None
        while True:
            params = {"sourceIdentifier": f"{NAMESPACE}/{name}", "limit": "1000"}
            if cursor:
                params["cursor"] = cursor
            response = await self.service.get("/api/v1/documents", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            for item in page["documents"]:
                documents[item["metadata"]["path"]] = item["checksum"]
            cursor = page.get("nextCursor")
            if not cursor:
                return documents

    async def operator_kept_working(self, retries: int = 2) -> None:
        """Positive proof that the operator's timers kept running: a pacer source retried `retries` more times.

        The pacer fetches from a port nobody listens on, so it fails at once and is retried with
        the same backoff and schedule machinery as every other source (its failures do not count
        as successful syncs). A test that asserts that something did *not* happen waits for this
        first, so a slow operator cannot make it pass.
        """
        if self.api.get(PACER) is None:
            spec = {"repository": {"url": "https://127.0.0.1:9/pacer.git"}, "schedule": "@every 1s"}
            await self.api.create(PACER, spec)
        start = self.api.status(PACER).get("consecutiveFailures", 0)
        await eventually(
            lambda: self.api.status(PACER).get("consecutiveFailures", 0) >= start + retries,
            what=f"{retries} more retries of the pacer source",
        )

    def api_problems(self) -> list[str]:
        """What a real API server would have refused or dropped of the operator's writes."""
        return list(dict.fromkeys(self.kube.schema_problems))

    def syncs(self, result: str) -> float:
        """The operator's kb_operator_syncs_total for one result."""
        value = self.memo["context"].metrics.registry.get_sample_value("kb_operator_syncs_total", {"result": result})
        return value or 0.0


@pytest.fixture
async def world(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kube: KubeEmulator,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[World]:
    """The operator running against the emulator and the real service, tuned for fast retries.

    Namespaced unless the test asks for `clusterwide` (parametrize "world" indirectly). The
    teardown fails the test on any write of the operator that the CRD's schema refused or pruned.
    (The chart's RBAC is checked by the real API server in tests/kube/.)
    """
    mode = getattr(request, "param", NAMESPACED)
    for key, value in {
        "SEARCH_URL": SERVICE_URL,
        "NAMESPACES": NAMESPACE if mode == NAMESPACED else "",
        "ALLOW_LOCAL_REPOSITORIES": "true",
        "CACHE_DIR": str(tmp_path / "cache"),
        "METRICS_PORT": "0",
        "STARTUP_JITTER_SECONDS": "0",
        "MAX_CONCURRENT_SYNCS": "2",
        "RETRY_BACKOFF_SECONDS": "0.2",
        "RETRY_BACKOFF_MAX_SECONDS": "1",
        "HTTP_MAX_ATTEMPTS": "2",
        "HTTP_BACKOFF_SECONDS": "0.01",
        "FULL_RECONCILE_INTERVAL": "3600",
        "MIN_SYNC_INTERVAL_SECONDS": "0.5",  # the tests use `@every 1s`
        "LOCAL_REPOSITORIES_ROOT": str(tmp_path / "repos"),  # where World.repo makes them
    }.items():
        monkeypatch.setenv(f"KBOPERATOR_{key}", value)
    data = tmp_path / "service"
    # One app stands in for every search service the sources name (the default and teams' own), so
    # it answers to any Host; the Host allow-list itself is tested in tests/searchsvc.
    settings = Settings(data_dir=data, allowed_hosts="*")
    app = create_app(settings, store=make_store("edge", data), embedder=HashingEmbedder())
    faults = Faults(app)
    async with serve(app) as client:
        world = World(tmp_path, kube, client, faults, mode)
        await world.start_operator()
        try:
            yield world
        finally:
            await world.stop_operator()
        assert world.api_problems() == [], "\n".join(world.api_problems())
