"""The control-plane fixture itself: it fails clearly, and never leaves processes behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.controlplane import ControlPlane, tools_dir

REPO = Path(__file__).resolve().parents[2]
STARTER = """
import sys
from pathlib import Path
from tests.support.controlplane import ControlPlane, tools_dir
plane = ControlPlane(Path(sys.argv[1]), tools_dir()).start()
print(plane.etcd.proc.pid, plane.apiserver.proc.pid, plane.controller_manager.proc.pid, flush=True)
sys.stdin.read()  # until killed
"""


def test_a_killed_test_session_leaves_no_process_behind(tmp_path: Path) -> None:
    session = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "plane")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert session.stdout is not None
    pids = [int(pid) for pid in session.stdout.readline().split()]
    assert len(pids) == 3 and all(alive(pid) for pid in pids)
    session.send_signal(signal.SIGKILL)  # as when CI or a user kills pytest: no teardown runs
    session.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"left behind: {[p for p in pids if alive(p)]}"
        time.sleep(0.1)


def test_a_missing_binary_fails_naming_the_make_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_KUBE_TOOLS", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"no etcd, kube-apiserver, .* run `make kube-tools`"):
        tools_dir()


def test_a_taken_port_fails_before_anything_starts(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "plane", tools_dir())
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", plane.api_port))
        squatter.listen()
        with pytest.raises(RuntimeError, match=rf"loopback ports already taken: \[{plane.api_port}\]"):
            plane.start()
    assert not (tmp_path / "plane" / "etcd").exists()


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, dead but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
