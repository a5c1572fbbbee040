"""The built images, run the way the chart runs them (`make test-images`, docs/operations/install.md).

The search image under the chart's securityContext (uid 10001, read-only root, a tmpfs /tmp, a
data volume, no capabilities, the runtime's default seccomp profile): ready, a PUT, a search, a
restart that keeps the document. Then the operator image's `knowledge-sync` against it, on a small
git repository mounted in.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.images.support import OPERATOR_IMAGE, SEARCH_IMAGE, podman, require_images, run_flags

pytestmark = pytest.mark.slow

READY_TIMEOUT_S = 240  # model load on two busy cores, cold page cache


@dataclass
class Search:
    name: str
    url: str
    token: str  # SEARCHSVC_API_TOKEN: writes (and reads)
    read_token: str  # SEARCHSVC_READ_TOKEN: reads only

    def headers(self, *, write: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token if write else self.read_token}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_ready(search: Search) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{search.url}/readyz", timeout=5)
            if response.status_code == 200 and response.json()["status"] == "ready":
                return
            last = f"{response.status_code} {response.text[:200]}"
        except httpx.TransportError as exc:
            last = repr(exc)
        state = podman("inspect", "--format", "{{.State.Status}}", search.name, check=False).stdout.strip()
        if state not in ("running", "created", "configured"):
            logs = podman("logs", "--tail", "40", search.name, check=False)
            pytest.fail(f"the search container stopped ({state}): {logs.stdout}{logs.stderr}")
        time.sleep(1)
    logs = podman("logs", "--tail", "40", search.name, check=False)
    pytest.fail(f"/readyz not ready in {READY_TIMEOUT_S} s (last: {last}): {logs.stdout}{logs.stderr}")


@pytest.fixture(scope="module")
def search() -> Iterator[Search]:
    require_images()
    suffix = uuid.uuid4().hex[:8]
    name, volume = f"kb-test-search-{suffix}", f"kb-test-data-{suffix}"
    token, read_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    port = _free_port()
    podman("volume", "create", volume)
    try:
        podman(
            "run", "--detach", "--name", name, *run_flags(),
            f"--volume={volume}:/data",  # the chart's data PVC
            f"--publish=127.0.0.1:{port}:8000",
            "--env=SEARCHSVC_STORE=edge", "--env=SEARCHSVC_DATA_DIR=/data",
            "--env=SEARCHSVC_API_TOKEN", "--env=SEARCHSVC_READ_TOKEN",
            SEARCH_IMAGE,
            timeout=120,
            env_extra={"SEARCHSVC_API_TOKEN": token, "SEARCHSVC_READ_TOKEN": read_token},
        )  # fmt: skip
        found = Search(name=name, url=f"http://127.0.0.1:{port}", token=token, read_token=read_token)
        _wait_ready(found)
        yield found
    finally:
        podman("rm", "--force", "--time=5", name, check=False)
        podman("volume", "rm", "--force", volume, check=False)


def _search_uris(search: Search, query: str) -> list[str]:
    response = httpx.post(
        f"{search.url}/api/v1/search", json={"query": query, "limit": 5}, headers=search.headers(), timeout=60
    )
    assert response.status_code == 200, response.text
    return [hit["uri"] for hit in response.json()["results"]]


def test_the_search_image_runs_as_the_chart_says(search: Search) -> None:
    whoami = podman("exec", search.name, "id", "-u").stdout.strip()
    assert whoami == "10001"
    refused = podman("exec", search.name, "touch", "/etc/kb-probe", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    caps = podman("exec", search.name, "grep", "^CapEff", "/proc/self/status").stdout.split()
    assert caps[1] == "0000000000000000"
    seccomp = podman("exec", search.name, "grep", "^Seccomp:", "/proc/self/status").stdout.split()
    assert seccomp[1] == "2"  # filter mode: the default profile is on


def test_a_document_is_searchable_and_survives_a_restart(search: Search) -> None:
    uri = "https://docs.example.test/guide/rotate-keys.md"
    body = {"uri": uri, "content": "# Rotating signing keys\n\nRotate the cluster's signing keys every quarter."}
    unauthorised = httpx.put(f"{search.url}/api/v1/documents", json=body, timeout=60)
    assert unauthorised.status_code == 401
    reader = httpx.put(f"{search.url}/api/v1/documents", json=body, headers=search.headers(), timeout=60)
    assert reader.status_code == 403
    put = httpx.put(f"{search.url}/api/v1/documents", json=body, headers=search.headers(write=True), timeout=120)
    assert put.status_code == 200, put.text
    assert _search_uris(search, "how often are signing keys rotated")[:1] == [uri]

    podman("restart", "--time=20", search.name, timeout=120)
    _wait_ready(search)
    assert _search_uris(search, "how often are signing keys rotated")[:1] == [uri]


def test_knowledge_sync_has_a_real_help() -> None:
    require_images()
    done = podman("run", "--rm", *run_flags(), "--entrypoint=knowledge-sync", OPERATOR_IMAGE, "--help")
    assert done.returncode == 0
    assert "usage: knowledge-sync" in done.stdout and "--source-id" in done.stdout


def test_knowledge_sync_from_the_operator_image_fills_the_search_image(search: Search, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "backups.md").write_text("# Backups\n\nNightly backups of the ledger go to cold storage.\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.test"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "docs"], check=True)
    # The mount keeps the host's owner, and git refuses a repository another user owns: give it to
    # the image's user, as the operator's own clones are.
    chown = ["chown", "-R", "10001:10001", str(repo)]
    subprocess.run(chown if os.geteuid() == 0 else ["podman", "unshare", *chown], check=True)
    done = podman(
        "run", "--rm", *run_flags(),
        f"--network=container:{search.name}",  # the service on the pod's loopback, as a sidecar would see it
        f"--volume={repo}:/repo:ro",
        "--env=KB_TOKEN",
        "--entrypoint=knowledge-sync", OPERATOR_IMAGE,
        "--repo", "/repo", "--ref", "main", "--source-id", "team/docs", "--service", "http://127.0.0.1:8000",
        "--token-env", "KB_TOKEN", "--web-url", "https://git.example.test/team/docs", "--json",
        timeout=300, check=False, env_extra={"KB_TOKEN": search.token},
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert search.token not in done.stdout + done.stderr
    uris = _search_uris(search, "where do the nightly ledger backups go")
    assert uris and uris[0].endswith("docs/backups.md"), uris
