"""Running the built images with podman the way the chart runs them (tests/images only)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess

import pytest

TAG = os.environ.get("KB_IMAGE_TAG", "0.1.0")
SEARCH_IMAGE = f"localhost/kb-search:{TAG}"
OPERATOR_IMAGE = f"localhost/kb-operator:{TAG}"
HOW = "run `make images` (as root; it installs buildah, podman, runc and mmdebstrap), or `make test-images`"


def images_present() -> bool:
    if shutil.which("podman") is None:
        return False
    return all(_podman_ok("image", "exists", image) for image in (SEARCH_IMAGE, OPERATOR_IMAGE))


def require_images() -> None:
    """Fail under `make test-images` (KB_TEST_IMAGES=1), skip elsewhere, when an image is missing."""
    if images_present():
        return
    message = f"the images {SEARCH_IMAGE} and {OPERATOR_IMAGE} are missing: {HOW}"
    if os.environ.get("KB_TEST_IMAGES") == "1" or os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def run_flags() -> list[str]:
    """The chart's securityContext, in podman's words, plus this host's needs (runc, ulimits)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 1_048_576 if nofile == resource.RLIM_INFINITY else nofile
    return [
        "--runtime=runc",  # crun refuses this kind of host's cgroup layout
        f"--ulimit=nofile={nofile}:{nofile}",  # podman's default may exceed the host's hard limit
        "--ulimit=nproc=4096:4096",
        "--user=10001:10001",  # runAsUser / runAsGroup
        "--read-only",  # readOnlyRootFilesystem
        "--tmpfs=/tmp:rw,size=256m",  # the chart's tmp emptyDir
        "--cap-drop=ALL",  # capabilities.drop: [ALL]
        "--security-opt=no-new-privileges",  # allowPrivilegeEscalation: false
        # No --security-opt seccomp=...: podman's default profile, as seccompProfile RuntimeDefault.
    ]


def podman(
    *args: str, timeout: float = 120, check: bool = True, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """podman ARGS; secrets go in env_extra (passed on by `--env NAME`), never on the command line."""
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check, env=env)


def _podman_ok(*args: str) -> bool:
    return podman(*args, check=False).returncode == 0
