"""Run the real search service, `python -m kbsearch`, as a child process on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import kbsearch

START_TIMEOUT_S = 180  # loading MiniLM on a loaded 2-core machine


def service_env(**settings: str) -> dict[str, str]:
    """This environment without any SEARCHSVC_* of its own, offline, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCHSVC_")}
    env |= {
        "PYTHONPATH": str(Path(kbsearch.__file__).resolve().parents[1]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return env | settings


def run_service(timeout: float = 60, **settings: str) -> subprocess.CompletedProcess[str]:
    """`python -m kbsearch` to its end: for configurations it must refuse."""
    return subprocess.run(
        [sys.executable, "-m", "kbsearch"],
        env=service_env(**settings),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def served(data_dir: Path, **settings: str) -> Iterator[str]:
    """The base URL of a running `python -m kbsearch`, stopped (and reaped) on exit."""
    port = free_port()
    env = service_env(
        SEARCHSVC_HOST="127.0.0.1", SEARCHSVC_PORT=str(port), SEARCHSVC_DATA_DIR=str(data_dir), **settings
    )
    log = open(data_dir.parent / f"kbsearch-{port}.log", "w+")  # noqa: SIM115 - closed after the child is reaped
    child = subprocess.Popen([sys.executable, "-m", "kbsearch"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if child.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"kbsearch exited with {child.returncode}:\n{log.read()[-4000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kbsearch did not become ready within {START_TIMEOUT_S} s")
            time.sleep(0.2)  # polling for readiness, not synchronising on a guess
        yield url
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()
