"""GitPython, held to the operator's rules: a bare clone opened at its exact folder, whose git
processes get exactly the environment git.auth builds.

Two places where GitPython reads the operator's own environment are replaced here:
- `Git.execute` starts every process from a copy of os.environ; `update_environment` can add
  or change variables but never drop one, so an inherited GIT_DIR, GIT_TRACE_CURL or
  GIT_CONFIG_PARAMETERS would reach git. `CleanGit.execute` starts the process itself, with
  `environment()` alone, in its own process group that a timeout kills whole (ssh and the
  remote helpers too, which GitPython's own timeout can only find with `pgrep` or `ps`).
- `Repo.__init__` reads GIT_DIR, GIT_COMMON_DIR, GIT_OBJECT_DIRECTORY and GIT_WORK_TREE from
  os.environ (in a git hook these point at another repository or a quarantine), so `CacheRepo`
  sets the few attributes it would set from the folder alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from git import Git, GitCmdObjectDB, GitCommandError, Repo
from git.compat import safe_decode

from kboperator.git.auth import base_env


class GitFailed(GitCommandError):
    """A git command failed (`status` None: it timed out); `detail` is its stderr, trimmed."""

    def __init__(self, command: Sequence[str], status: int | None, detail: str) -> None:
        super().__init__(list(command), status, detail)
        self.detail = detail


class CleanGit(Git):
    """GitPython's command object; every process it starts gets `environment()` and nothing else."""

    # The git on PATH, as always: not a GIT_PYTHON_GIT_EXECUTABLE inherited at import time.
    GIT_PYTHON_GIT_EXECUTABLE = "git"

    def __init__(self, working_dir: Path, environment: Mapping[str, str], *, timeout_s: float) -> None:
        super().__init__(working_dir)
        self.update_environment(**environment)
        self._timeout_s = timeout_s

    def execute(
        self,
        command: str | Sequence[Any],
        istream: Any = None,
        with_extended_output: bool = False,
        with_exceptions: bool = True,
        as_process: bool = False,
        output_stream: Any = None,
        stdout_as_string: bool = True,
        kill_after_timeout: float | None = None,
        with_stdout: bool = True,
        universal_newlines: bool = False,
        shell: bool | None = None,
        env: Mapping[str, str] | None = None,
        max_chunk_size: int = 0,
        strip_newline_in_stdout: bool = True,
        **subprocess_kwargs: Any,
    ) -> Any:
        # A refusal, not a placeholder: a shell string or a stream option would leave the scrubbed,
        # timed-out argv path this class exists for. GitPython's own calls never pass them.
        if output_stream is not None or universal_newlines or shell or subprocess_kwargs or isinstance(command, str):
            raise TypeError("CleanGit runs argument lists with byte output only")
        process = subprocess.Popen(
            [str(arg) for arg in command],
            cwd=self.working_dir,
            env={**self.environment(), **(env or {})},
            stdin=istream or subprocess.DEVNULL,
            stdout=subprocess.PIPE if with_stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        if as_process:  # a long-lived reader (cat-file --batch): no timeout, closed with the repo
            return self.AutoInterrupt(process, command)
        timeout = kill_after_timeout or self._timeout_s
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise GitFailed(command, None, f"timed out after {timeout:.0f}s") from None
        status, err_text = process.returncode, safe_decode(err or b"").strip()
        if status != 0 and with_exceptions:
            raise GitFailed(command, status, err_text[-600:] or f"exit status {status}")
        stdout: Any = out if out is not None else b""
        if strip_newline_in_stdout and stdout.endswith(b"\n"):
            stdout = stdout[:-1]
        if stdout_as_string:
            stdout = safe_decode(stdout)
        return (status, stdout, err_text) if with_extended_output else stdout


class CacheRepo(Repo):
    """One bare clone of the cache, at exactly `folder`; its git runs in base_env() unless told otherwise."""

    def __init__(self, folder: Path, *, timeout_s: float) -> None:  # not super().__init__(): see the module docstring
        self.git_dir = str(folder)
        self._common_dir = ""
        self._bare = True
        self._working_tree_dir = None
        self.working_dir = str(folder)
        self.git = CleanGit(folder, base_env(), timeout_s=timeout_s)
        self.odb = GitCmdObjectDB(str(folder / "objects"), self.git)
