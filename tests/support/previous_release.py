"""The previous release, run for real: its code taken from the repository's history (`git archive`).

`de201e8` is the last release before background rebuilds, stored bodies, versioned pages and the
markdown-v2 chunker. An upgrade test writes a data directory with that release's own code (its
`tests.support.service_process`, so its own hashing embedder; or `python -m kbsearch` with the
real model) and starts today's code on it. Needs a clone with history (CI's clean clone has it).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from tests.support.service_process import REPO

PREVIOUS_RELEASE = "de201e8"
# What the release needs to run: the service and the test launcher with its hashing embedder.
PATHS = ("searchsvc", "tests/__init__.py", "tests/support")


def extract(into: Path, commit: str = PREVIOUS_RELEASE) -> Path:
    """The release's service code under `into` (a tree to run with `ServiceProcess(repo=into)`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    found = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, *PATHS],
        env=env,
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        raise AssertionError(
            f"release {commit} is not in this clone's history ({found.stderr.decode().strip()}); "
            "the upgrade tests need it: git fetch --unshallow"
        )
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into
