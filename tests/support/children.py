"""A child Python that imports kbsearch and these tests, however kbsearch is installed (kill tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kbsearch
from tests.support.paths import REPO_ROOT


def child_env() -> dict[str, str]:
    """This environment, with kbsearch's folder and the repository on PYTHONPATH."""
    paths = [str(Path(kbsearch.__file__).resolve().parents[1]), str(REPO_ROOT)]
    return os.environ | {"PYTHONPATH": os.pathsep.join(paths)}


def run_python(code: str, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """`python -c code args...` from the repository's root; its output captured, never shown."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=child_env(), cwd=REPO_ROOT, capture_output=True, timeout=timeout
    )
