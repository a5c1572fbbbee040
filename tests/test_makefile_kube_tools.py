"""`make kube-tools` (hack/build-kube-tools.sh) says in one line what is missing: Go, or the Go module proxy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "hack" / "build-kube-tools.sh"
TOOLS = ("bash", "dirname", "awk", "sed", "cat", "tail", "rm", "mkdir", "date")


def run(env: dict[str, str], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_no_go_on_path_names_what_to_install(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:  # the script's shell tools, and no go
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    done = run({"PATH": str(bin_dir), "HOME": str(tmp_path)}, tmp_path / "out")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "build-kube-tools: no 'go' on PATH: install Go 1.26 or newer (the test control plane is built from source)"
    )
    assert not (tmp_path / "out").exists()


def test_an_unreachable_module_proxy_is_named(tmp_path: Path) -> None:
    env = {**os.environ, "GOPROXY": "off", "GOMODCACHE": str(tmp_path / "modcache"), "GOFLAGS": ""}
    done = run(env, tmp_path / "out")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("build-kube-tools: cannot fetch the Go modules pinned in kube-tools/kubernetes/go.sum")
    assert last.endswith("the Go module proxy (off) must be reachable")
    assert not (tmp_path / "out" / ".built").exists()
