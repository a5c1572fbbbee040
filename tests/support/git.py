"""Real git repositories in temporary folders, built with the git CLI, for the operator tests."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    """Run git in `cwd` and return stdout; raise with stderr on failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | _ENV
    result = subprocess.run(["git", *args], cwd=cwd, env=env, input=input, capture_output=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.decode()}")
    return result.stdout.decode("utf-8", "surrogateescape").strip()


class WorkRepo:
    """A working repository: write files, commit, branch, rewrite history."""

    def __init__(self, path: Path, branch: str = "main") -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "--quiet", f"--initial-branch={branch}")

    def write(self, relpath: str, content: str | bytes) -> None:
        target = self.path / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        if isinstance(content, str):
            content = content.encode()
        target.write_bytes(content)

    def symlink(self, relpath: str, points_to: str) -> None:
        target = self.path / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        os.symlink(points_to, target)

    def remove(self, relpath: str) -> None:
        git(self.path, "rm", "--quiet", "-r", "--", relpath)

    def move(self, old: str, new: str) -> None:
        (self.path / new).parent.mkdir(parents=True, exist_ok=True)
        git(self.path, "mv", "--", old, new)

    def commit(self, message: str = "change") -> str:
        git(self.path, "add", "--all")
        git(self.path, "commit", "--quiet", "--allow-empty", "-m", message)
        return self.head()

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def tag(self, name: str, annotated: bool = False) -> None:
        if annotated:
            git(self.path, "tag", "-a", "-m", name, name)
        else:
            git(self.path, "tag", name)

    def reset_hard(self, commit: str) -> None:
        """Rewrite the branch to an older commit: history after it is force-pushed away."""
        git(self.path, "reset", "--quiet", "--hard", commit)

    def orphan(self, branch: str) -> None:
        """Start a new history with no parent (then commit): the old commits become unreachable."""
        git(self.path, "checkout", "--quiet", "--orphan", branch)
        git(self.path, "rm", "--quiet", "-r", "--cached", "--ignore-unmatch", ".")

    def gc_prune(self) -> None:
        """Expire reflogs and prune, so unreachable commits are really gone."""
        git(self.path, "reflog", "expire", "--expire=now", "--all")
        git(self.path, "gc", "--quiet", "--prune=now")

    def files(self) -> dict[str, bytes]:
        """Tracked regular files at HEAD and their bytes (symlinks and submodules excluded)."""
        out = git(self.path, "ls-tree", "-r", "-z", "HEAD")
        files = {}
        for record in out.split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, _, sha = meta.split()
            if mode in ("100644", "100755"):
                files[path] = subprocess.run(
                    ["git", "cat-file", "blob", sha], cwd=self.path, capture_output=True, check=True
                ).stdout
        return files


# --- an authenticated smart-HTTP git server (git http-backend behind HTTP Basic auth) ---------

import base64  # noqa: E402
import contextlib  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402


@contextlib.contextmanager
def serve_git_http(project_root: Path, username: str, token: str, seen: list[str] | None = None) -> Iterator[str]:
    """Serve the bare repositories under `project_root` at the yielded base URL; 401 without this token.

    `seen`, when given, collects the Authorization header of every request ("" when absent).
    """
    expected = "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            self._cgi()

        def do_POST(self) -> None:
            self._cgi()

        def _cgi(self) -> None:
            auth = self.headers.get("Authorization")
            if seen is not None:
                seen.append(auth or "")
            if auth != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": str(project_root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": username,
                "REMOTE_ADDR": "127.0.0.1",
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            }
            result = subprocess.run(["git", "http-backend"], env=env, input=body, capture_output=True, check=False)
            head, _, payload = result.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    with _serving(Handler) as base:
        yield base


@contextlib.contextmanager
def serve_redirect(target: str) -> Iterator[str]:
    """A server that answers every request with a 302 to the same path on `target` (another host)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET

    with _serving(Handler) as base:
        yield base


@contextlib.contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def ssh_config(command: str) -> dict[str, str]:
    """What the real ssh makes of a GIT_SSH_COMMAND: `ssh -G` prints the options it would use."""
    done = subprocess.run(
        [*shlex.split(command), "-G", "git.example.com"], capture_output=True, text=True, check=True, timeout=30
    )
    return {key: value for key, _, value in (line.partition(" ") for line in done.stdout.splitlines())}
