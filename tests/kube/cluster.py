"""The chart installed on the real control plane, and the operator run as a local process with
the token of the chart's own ServiceAccount, so the API server judges its calls by the chart's RBAC."""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from tests.chart.helmchart import CHART, helm_binary
from tests.support.controlplane import ControlPlane, _die_with_parent, free_port
from tests.support.service_process import ServiceProcess

REPO = Path(__file__).resolve().parents[2]
#: The audience the search service accepts ServiceAccount tokens for.
AUDIENCE = "kb-search"
T = TypeVar("T")


def eventually(check: Callable[[], T | None], *, what: str, timeout_s: float = 90) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` (no timing is asserted)."""
    end = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@dataclass(frozen=True)
class Release:
    """One `helm install` of the chart: its name, namespace and install mode."""

    name: str
    namespace: str
    watch: tuple[str, ...]  # empty: cluster-wide

    @property
    def fullname(self) -> str:
        return f"{self.name}-knowledge-base"

    @property
    def operator_account(self) -> str:
        return f"{self.fullname}-operator"

    @property
    def search_account(self) -> str:
        return f"{self.fullname}-search"


def helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [helm_binary(), f"--kubeconfig={plane.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stderr}"
    return done


def install(plane: ControlPlane, release: Release, *sets: str) -> Release:
    """`helm install` as a user would (the watched namespaces must exist first: they hold Roles)."""
    for namespace in (release.namespace, *release.watch):
        if plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            plane.kubectl("create", "namespace", namespace)
    args = ["install", release.name, str(CHART), "--namespace", release.namespace]
    for index, namespace in enumerate(release.watch):
        args += ["--set", f"operator.watchNamespaces[{index}]={namespace}"]
    for value in sets:
        args += ["--set", value]
    helm(plane, *args)
    return release


class SearchService:
    """The real search service as a process, its write token, and (in Kubernetes auth mode) the
    kubeconfig of the chart's search ServiceAccount for its TokenReviews and SubjectAccessReviews."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.api_token = secrets.token_urlsafe(24)
        self.process = ServiceProcess(
            root / "service.log",
            {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_API_TOKEN": self.api_token, **(env or {})},
        ).start()
        self.process.wait_ready()
        self.url = f"http://127.0.0.1:{self.process.port}"

    def listing(self, source_id: str, token: str | None = None) -> dict[str, str]:
        """{path: checksum} the service holds for a source, across all pages."""
        documents: dict[str, str] = {}
        cursor = None
        while True:
            params = {"sourceIdentifier": source_id, "limit": "1000", **({"cursor": cursor} if cursor else {})}
            response = self.get("/api/v1/documents", token, params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            documents.update({d["metadata"]["path"]: d["checksum"] for d in page["documents"]})
            cursor = page.get("nextCursor")
            if not cursor:
                return documents

    def get(self, path: str, token: str | None = None, **kwargs: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.api_token}"}
        return self.process.client.get(path, headers=headers, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.process.stop()


class Operator:
    """`python -m kboperator`, authenticated with a TokenRequest token of the chart's operator
    ServiceAccount: every call it makes is judged by the chart's real RBAC."""

    def __init__(self, plane: ControlPlane, release: Release, search: SearchService, root: Path, **env: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.log = root / f"operator-{time.monotonic_ns()}.log"
        kubeconfig = plane.token_kubeconfig(
            root / "operator.kubeconfig", plane.token(release.operator_account, release.namespace)
        )
        settings = {
            "SEARCH_URL": search.url,
            "SEARCH_TOKEN": search.api_token,
            "NAMESPACES": ",".join(release.watch),
            "ALLOW_LOCAL_REPOSITORIES": "true",
            "LOCAL_REPOSITORIES_ROOT": str(root.parent / "repos"),
            "CACHE_DIR": str(root / "cache"),
            "METRICS_PORT": "0",
            "HEALTH_PORT": str(free_port()),
            "STARTUP_JITTER_SECONDS": "0",
            "MIN_SYNC_INTERVAL_SECONDS": "0.5",
            "RETRY_BACKOFF_SECONDS": "0.5",
            "RETRY_BACKOFF_MAX_SECONDS": "2",
            "HTTP_MAX_ATTEMPTS": "2",
            "HTTP_BACKOFF_SECONDS": "0.1",
            **env,
        }
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KBOPERATOR_")},
            "KUBECONFIG": str(kubeconfig),
            "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO)]),
            **{f"KBOPERATOR_{k}": v for k, v in settings.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None
        #: Windows in which the API server restarted: it refuses requests with 403 until its RBAC
        #: authorizer has loaded the roles (its /readyz waits for that), so those are not RBAC's word.
        self.restarts: list[tuple[str, str]] = []

    def start(self) -> Operator:
        parent = os.getpid()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kboperator"],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(parent),
            )
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def forbidden(self) -> list[str]:
        """Lines where RBAC refused the operator. A 403 for an Event in a namespace being deleted
        (NamespaceTerminating) is the namespace lifecycle, not RBAC: kopf retries it and gives up."""
        return [
            line
            for line in self.text().splitlines()
            if "403" in line
            and "orbidden" in line
            and "NamespaceTerminating" not in line
            and not any(start <= _logged_at(line) <= end for start, end in self.restarts)
        ]


@contextlib.contextmanager
def operators(plane: ControlPlane, search: SearchService, root: Path) -> Iterator[Callable[..., Operator]]:
    """Start operators for a release (`start(release, **settings)`); each is stopped at the end, and
    none may have been refused by RBAC."""
    started: list[Operator] = []

    def start(release: Release, **env: str) -> Operator:
        operator = Operator(plane, release, search, root, **env).start()
        started.append(operator)
        return operator

    try:
        yield start
    finally:
        for operator in started:
            operator.stop()
    refused = [line for operator in started for line in operator.forbidden()]
    assert refused == [], "the API server refused the operator:\n" + "\n".join(refused)


def log_time(offset_s: float = 0) -> str:
    """Now (plus an offset) as the operator's log stamps it, for comparing with its lines."""
    when = datetime.datetime.now() + datetime.timedelta(seconds=offset_s)
    return when.strftime("%Y-%m-%d %H:%M:%S,%f")[:23]


def _logged_at(line: str) -> str:
    """The `[YYYY-MM-DD HH:MM:SS,mmm]` stamp kopf's full log format starts a line with."""
    return line[1:24] if line.startswith("[") else ""
