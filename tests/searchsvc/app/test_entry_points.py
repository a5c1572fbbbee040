"""Every console script as a real process: a real --help and --version, one clear line when it cannot start."""

from __future__ import annotations

import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support.service_process import REPO, ServiceProcess, free_port, service_env

VERSION = version("kb-knowledge-base")
# Each console script and the module it runs (pyproject.toml's [project.scripts], and the operator).
ENTRY_POINTS = {
    "knowledge-search": "kbsearch",
    "knowledge-sync": "kboperator.cli",
    "knowledge-mcp": "kbsearch.mcp.stdio",
    "python -m kboperator": "kboperator",
}


def run(module: str, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    environment = service_env() | {"PYTHONPATH": f"{REPO / 'searchsvc'}:{REPO / 'operator'}:{REPO}"} | env
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=environment, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_describes_and_exits_without_starting(name: str, tmp_path: Path) -> None:
    # A data directory and a port of its own: were the server to start, it would not exit at all.
    result = run(ENTRY_POINTS[name], "--help", SEARCHSVC_DATA_DIR=str(tmp_path / "data"), SEARCHSVC_PORT="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {name}"), result.stdout
    assert "--version" in result.stdout and "starting" not in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_version_is_the_installed_packages(name: str) -> None:
    result = run(ENTRY_POINTS[name], "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{name} {VERSION}"


def test_a_busy_port_is_named_before_ready(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("kbsearch", SEARCHSVC_DATA_DIR=str(tmp_path / "data"), SEARCHSVC_PORT=str(port), timeout=300)
    assert result.returncode == 2, result.stderr
    assert f"port {port} is already in use" in result.stderr and "SEARCHSVC_PORT" in result.stderr
    assert '"ready"' not in result.stderr and "Traceback" not in result.stderr


def test_a_held_data_directory_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServiceProcess(tmp_path / "first.log", {"SEARCHSVC_DATA_DIR": str(data)}).start()
    try:
        first.wait_ready()
        port = str(free_port())
        second = run("tests.support.service_process", SEARCHSVC_DATA_DIR=str(data), SEARCHSVC_PORT=port, timeout=300)
    finally:
        first.stop()
    assert second.returncode != 0
    assert "Another process holds the data directory" in second.stderr
    assert "Traceback" not in second.stderr, second.stderr
