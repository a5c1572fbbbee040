"""A cached bare clone per source: fetch one ref, list and read blobs, diff commits.

Every git command runs as a subprocess with a clean environment (see gitauth). GitPython's
runner always inherits os.environ and cannot drop variables such as a CI hook's GIT_DIR or
GIT_TRACE_CURL, so this module drives the git CLI directly. Nothing is ever checked out: files
are read from the object database, so a symlink in the repository is never followed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from kboperator.errors import (
    InvalidSpecError,
    RepositoryAuthError,
    RepositoryReadError,
    RepositoryUnavailableError,
    SyncError,
)
from kboperator.gitauth import GitCall, HostKeys, base_env, git_call
from kboperator.gitobjects import BlobReader, Change, TreeEntry, parse_diff, parse_ls_tree
from kboperator.models import RepoSpec
from kboperator.repourl import RepoLocation, parse_repo_url, validate_ref

log = logging.getLogger(__name__)

_FETCHED = "refs/kb/fetched"
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_AUTH_HINTS = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "permission denied",
    "access denied",
    "returned error: 401",
    "returned error: 403",
    "host key verification failed",
    "invalid username or password",
    "repository not found",
    "does not appear to be a git repository",
)


class RepoCache:
    """Bare clones under `root`, one per (source id, URL), fetched incrementally.

    `local_root`: the one folder local repositories may be in (None: anywhere, for the CLI);
    the cache itself is always refused, since it holds every other source's clone.
    `host_keys`: how SSH host keys are checked.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        timeout_s: float = 600.0,
        local_root: Path | None = None,
        host_keys: HostKeys = HostKeys(),
    ) -> None:
        self.root = Path(root)
        self.timeout_s = timeout_s
        self.local_root = local_root
        self.host_keys = host_keys
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def key(self, source_id: str, url: str) -> str:
        """The cache folder name: a hash, so ids and URLs never become path components."""
        return hashlib.sha256(f"{source_id}\0{url}".encode()).hexdigest()[:32]

    def open(self, source_id: str, repo: RepoSpec, *, allow_local: bool) -> Checkout:
        """Validate the spec, fetch the ref and return a Checkout of its head. Blocking."""
        location = parse_repo_url(
            repo.url, allow_local=allow_local, local_root=self.local_root, forbidden=[self.root]
        )
        ref = validate_ref(repo.ref)
        key = self.key(source_id, repo.url)
        folder = self.root / key
        with self._lock(key):
            if not (folder / "HEAD").is_file():
                shutil.rmtree(folder, ignore_errors=True)  # a half-made clone from a crash
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    run_git(["init", "--bare", "--quiet", "--", str(folder)], env=base_env(), timeout=60)
                except GitFailed as exc:
                    raise RepositoryReadError(f"creating the cached clone failed: {exc}") from None
            pinned = self.root / f"{key}.known_hosts"
            with git_call(location, repo.credentials, pinned_known_hosts=pinned, host_keys=self.host_keys) as call:
                self._fetch(folder, location, ref, call)
            head_sha = _fetched_commit(folder, ref)
            is_tag = b"\ttag '" in (folder / "FETCH_HEAD").read_bytes()
        return Checkout(folder, location, ref, head_sha, is_tag=is_tag, timeout_s=self.timeout_s)

    def forget(self, source_id: str, url: str) -> None:
        """Remove a source's clone, for when the source is deleted."""
        key = self.key(source_id, url)
        with self._lock(key):
            shutil.rmtree(self.root / key, ignore_errors=True)
            (self.root / f"{key}.known_hosts").unlink(missing_ok=True)

    def _fetch(self, folder: Path, location: RepoLocation, ref: str, call: GitCall) -> None:
        # '+' accepts force-pushes; only this one ref is fetched, and no tags ride along.
        args = [
            *(arg for option in call.config for arg in ("-c", option)),
            "fetch", "--no-tags", "--no-recurse-submodules", "--quiet", "--",
            location.fetch_url, f"+{ref}:{_FETCHED}",
        ]  # fmt: skip
        try:
            run_git(args, cwd=folder, env=call.env, timeout=self.timeout_s, scrub=call.scrub)
        except GitFailed as exc:
            raise _classify(exc, location, ref) from None

    def _lock(self, key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())


class Checkout:
    """Read-only access to one fetched head. Close it (or use `with`) to stop the blob reader."""

    def __init__(
        self, folder: Path, location: RepoLocation, ref: str, head: str, *, is_tag: bool, timeout_s: float
    ) -> None:
        self.folder = folder
        self.location = location
        self.ref = ref
        self.head = head
        self.is_tag = is_tag
        self.timeout_s = timeout_s
        self._reader = BlobReader(folder, base_env())

    def __enter__(self) -> Checkout:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._reader.close()

    def list_files(self, commit: str | None = None) -> list[TreeEntry]:
        """Every blob, symlink and submodule in the commit's tree, with sizes."""
        out = self._git("ls-tree", "-r", "-l", "-z", "--full-tree", self._commit(commit))
        return parse_ls_tree(out)

    def diff(self, old: str, new: str | None = None) -> list[Change]:
        """Changes from `old` to `new` (default head), renames detected, blob sizes filled."""
        out = self._git("diff-tree", "-r", "-z", "--raw", "--no-abbrev", "-M", "--no-commit-id",
                        self._commit(old), self._commit(new))  # fmt: skip
        changes = parse_diff(out)
        sides = [entry for c in changes for entry in (c.old, c.new) if entry is not None and entry.kind == "file"]
        sizes = self.blob_sizes(entry.sha for entry in sides)
        return [c.with_sizes(sizes) for c in changes]

    def blob_sizes(self, shas: Iterable[str]) -> dict[str, int]:
        unique = sorted(set(shas))
        if not unique:
            return {}
        out = self._git("cat-file", "--batch-check=%(objectname) %(objectsize)",
                        input="".join(f"{sha}\n" for sha in unique).encode())  # fmt: skip
        sizes = {}
        for line in out.decode().splitlines():
            sha, _, size = line.partition(" ")
            if size.isdigit():
                sizes[sha] = int(size)
        return sizes

    def read_blob(self, sha: str) -> bytes:
        try:
            return self._reader.read(self._object(sha))
        except (KeyError, OSError) as exc:  # a missing object, or the reader process died
            raise RepositoryReadError(f"reading blob {sha} from the cached clone failed: {exc}") from None

    def has_commit(self, sha: str) -> bool:
        """True when the commit is in the clone (a force-push may have made it vanish)."""
        if not _SHA.match(sha or ""):
            return False
        try:
            run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=self.folder, timeout=self.timeout_s)
        except GitFailed:
            return False
        return True

    def is_ancestor(self, old: str, new: str | None = None) -> bool:
        """True when `old` is in `new`'s history: a diff from it is an honest account of changes."""
        if not self.has_commit(old):
            return False
        try:
            run_git(["merge-base", "--is-ancestor", old, self._commit(new)], cwd=self.folder, timeout=self.timeout_s)
        except GitFailed:
            return False
        return True

    def _commit(self, commit: str | None) -> str:
        return self.head if commit is None else self._object(commit)

    def _object(self, sha: str) -> str:
        if not _SHA.match(sha):
            raise ValueError(f"not an object id: {sha!r}")
        return sha

    def _git(self, *args: str, input: bytes | None = None) -> bytes:
        # These read our own clone: a failure means a damaged cache (or disk), not a bad spec,
        # and must reach status as a sync error rather than an unexpected exception.
        try:
            return run_git(list(args), cwd=self.folder, input=input, timeout=self.timeout_s)
        except GitFailed as exc:
            raise RepositoryReadError(f"reading the cached clone failed: {exc}") from None


def _fetched_commit(folder: Path, ref: str) -> str:
    try:
        head = run_git(["rev-parse", "--verify", "--quiet", f"{_FETCHED}^{{commit}}"], cwd=folder)
    except GitFailed as exc:
        if exc.returncode == 1:  # --verify: the ref names a tree or a blob (a tag can), not a commit
            raise InvalidSpecError(f"ref {ref!r} does not name a commit") from None
        raise RepositoryReadError(f"reading the cached clone failed: {exc}") from None
    head_sha = head.decode().strip()
    if not _SHA.match(head_sha):
        raise InvalidSpecError(f"ref {ref!r} does not name a commit")
    return head_sha


class GitFailed(Exception):
    """A git command failed (`returncode` None: timed out); `stderr` is already scrubbed of secrets."""

    def __init__(self, command: str, stderr: str, returncode: int | None = None) -> None:
        super().__init__(f"git {command} failed: {stderr}")
        self.command = command
        self.stderr = stderr
        self.returncode = returncode


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 600.0,
    scrub: Callable[[str], str] = lambda text: text,
) -> bytes:
    """Run git, return stdout; kill the whole process group on timeout (remote helpers too)."""
    process = subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        env=env if env is not None else base_env(),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    command = next((a for a in args if not a.startswith("-") and "=" not in a), "?")
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise GitFailed(command, f"timed out after {timeout:.0f}s") from None
    if process.returncode != 0:
        text = scrub(err.decode("utf-8", "replace")).strip()
        raise GitFailed(command, text[-600:] or f"exit status {process.returncode}", process.returncode)
    return out


def _classify(exc: GitFailed, location: RepoLocation, ref: str) -> SyncError:
    text = exc.stderr.lower()
    where = location.display_url
    if "couldn't find remote ref" in text:
        return InvalidSpecError(f"ref {ref!r} was not found in {where}")
    if "strange hostname" in text or "strange pathname" in text:  # git's own option-injection guard
        return InvalidSpecError(f"git refused the address of {where}: {exc.stderr}")
    not_a_repo = "not a git repository" in text or "does not appear to be a git repository" in text
    if location.kind == "local" and not_a_repo:
        return InvalidSpecError(f"{where} is not a git repository")
    if any(hint in text for hint in _AUTH_HINTS):
        return RepositoryAuthError(f"access to {where} was refused (or it does not exist): {exc.stderr}")
    return RepositoryUnavailableError(f"fetching {where} failed: {exc.stderr}")
