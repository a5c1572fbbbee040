"""The search service as a real process: the one launcher the tests use.

`ServiceProcess` runs `python -m tests.support.service_process`, which is kbsearch's own entry
point (settings from the environment, JSON logging, uvicorn) with only the embedder swapped for
the test hashing one, so tests need no model; with `real_model=True` it runs `python -m kbsearch`
itself, MiniLM and all. It starts the process, waits for it, follows its log, stops or kills it.
`served` is the same as a context manager yielding the base URL; `run_to_exit` runs the real
entry point to its end, for configurations it must refuse.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    import kbsearch.app
    from kbsearch import __main__ as entry
    from tests.support.hashing import HashingEmbedder
    from tests.support.service import hashing_embedder_for

    real_create_app = kbsearch.app.create_app
    # A test may configure another hashing model (an embedder change, for rebuild tests).
    model = os.environ.get("KB_TEST_HASHING_MODEL", "hashing-v1")
    dimensions = int(os.environ.get("KB_TEST_HASHING_DIMENSIONS", "64"))

    def create_app(settings=None, **overrides):
        embedder = HashingEmbedder(dimensions, model)
        return real_create_app(settings, embedder=embedder, embedder_for=hashing_embedder_for, **overrides)

    kbsearch.app.create_app = create_app  # entry.main imports it at call time
    if traced := os.environ.get("KB_TEST_TRACEMALLOC_FILE"):
        _report_python_heap(Path(traced))
    return entry.main()


def _report_python_heap(path: Path) -> None:
    """Write the Python heap's traced bytes to `path` twice a second (bench.sync_memory --tracemalloc):
    what the interpreter holds, apart from the store's and the libraries' native memory."""
    import threading
    import tracemalloc

    tracemalloc.start(1)

    def report() -> None:
        while True:
            current, _ = tracemalloc.get_traced_memory()
            path.write_text(str(current))
            time.sleep(0.5)

    threading.Thread(target=report, name="tracemalloc-report", daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(repo: Path = REPO, **settings: str) -> dict[str, str]:
    """This environment without any SEARCHSVC_* of its own, offline, able to import both trees, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCHSVC_")}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(repo / "searchsvc"), str(repo)]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return env | settings


def run_to_exit(timeout: float = 60, **settings: str) -> subprocess.CompletedProcess[str]:
    """`python -m kbsearch` to its end: for configurations it must refuse."""
    return subprocess.run(
        [sys.executable, "-m", "kbsearch"],
        env=service_env(**settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# Loading MiniLM on a loaded 2-core machine takes a while; the hashing embedder does not.
REAL_MODEL_START_S = 180


class ServiceProcess:
    """One run of the service; `prefix` wraps the command (for example nsenter into a mount namespace).

    `repo`: the tree whose code runs (another release's, tests/support/previous_release.py).
    """

    def __init__(
        self,
        log_path: Path,
        env: dict[str, str],
        *,
        prefix: list[str] | None = None,
        real_model: bool = False,
        repo: Path = REPO,
        metrics: bool = False,
    ) -> None:
        self.port = free_port()
        # `metrics`: its metrics listener on a port of its own too (SEARCHSVC_METRICS_PORT), at `metrics_url`.
        self.metrics_port = free_port() if metrics else None
        if self.metrics_port is not None:
            env = {"SEARCHSVC_METRICS_PORT": str(self.metrics_port), **env}
        self.log_path = log_path
        self._repo = repo
        self._env = service_env(repo, SEARCHSVC_HOST="127.0.0.1", SEARCHSVC_PORT=str(self.port), **env)
        self._prefix = prefix or []
        self._module = "kbsearch" if real_model else "tests.support.service_process"
        self._log_read = 0  # how far wait_for_log has read
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port is not None else ""
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def start(self) -> ServiceProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - outlives this call; stop() closes it
        self.proc = subprocess.Popen(
            [*self._prefix, sys.executable, "-m", self._module],
            env=self._env,
            cwd=self._repo,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_listening(self, deadline_s: float = 120) -> None:
        """Until /healthz answers; fails at once if the process exits first."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                if self.client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"service did not listen within {deadline_s}s:\n{self.log_text()}")

    def wait_ready(self, deadline_s: float = 120) -> None:
        self.wait_listening(deadline_s)
        self.poll_readyz(200, deadline_s)

    def poll_readyz(self, status: int, deadline_s: float = 60, *, state: str | None = None) -> httpx.Response:
        """Poll /readyz until it answers `status` (and, given, body `status` == `state`); return that answer."""
        end = time.monotonic() + deadline_s
        while True:
            response = self.client.get("/readyz")
            matches = response.status_code == status and (state is None or response.json().get("status") == state)
            if matches or time.monotonic() > end:
                assert matches, response.text
                return response
            time.sleep(0.1)

    def wait_exit(self, timeout_s: float = 120) -> int:
        return self.proc.wait(timeout=timeout_s)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> bool:
        """SIGTERM and wait; whether the shutdown was clean (the store closed and flushed)."""
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        clean = "Application shutdown complete." in self.log_text()  # uvicorn then re-raises SIGTERM
        self._close()
        return clean

    def _close(self) -> None:
        if not self._log.closed:
            self._log.close()
        self.client.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, message: str, timeout_s: float = 30) -> dict[str, Any]:
        """The next JSON log entry with this message, after the last one this returned."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_read)
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]
            for line in complete.splitlines(keepends=True):
                self._log_read += len(line)
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("message") == message:
                    return entry
            time.sleep(0.05)
        raise AssertionError(f"no {message!r} in the log:\n{self.log_text()[-4000:]}")

    def log_entries(self) -> list[dict]:
        """The JSON log lines (other lines, such as a fault report, are skipped)."""
        entries = []
        for line in self.log_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries


@contextmanager
def ready_service(log_path: Path, env: dict[str, str]) -> Iterator[ServiceProcess]:
    """A ServiceProcess (the hashing embedder) started and ready; stopped on exit, however the block ends."""
    process = ServiceProcess(log_path, env).start()
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@contextmanager
def served(data_dir: Path, **settings: str) -> Iterator[str]:
    """The base URL of a running `python -m kbsearch` (the real model), stopped and reaped on exit."""
    process = ServiceProcess(
        data_dir.parent / f"kbsearch-{data_dir.name}.log",
        {"SEARCHSVC_DATA_DIR": str(data_dir), **settings},
        real_model=True,
    ).start()
    try:
        process.wait_ready(REAL_MODEL_START_S)
        yield process.url
    finally:
        process.stop()


if __name__ == "__main__":
    sys.exit(main())
