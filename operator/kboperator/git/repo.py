"""Cached bare clones, shared by sources of the same URL, ref and credentials (see git.sharing):
fetch one ref, list and read blobs, diff commits.

The clone is a GitPython repository (git.command.CacheRepo) whose git processes run with a clean
environment (see git.auth and git.command). Nothing is ever checked out: files are read from the
object database, so a symlink in the repository is never followed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from git import BadName, Commit, Git, GitError, UnsafeProtocolError
from git.compat import safe_decode

from kboperator.errors import (
    InvalidSpecError,
    RepositoryAuthError,
    RepositoryReadError,
    RepositoryUnavailableError,
    SyncError,
)
from kboperator.git.auth import GitCall, HostKeys, base_env, git_call
from kboperator.git.command import CacheRepo, CleanGit, GitFailed
from kboperator.git.objects import Change, TreeEntry, parse_diff, parse_ls_tree
from kboperator.git.sharing import CloneNames, Coalescer
from kboperator.models import RepoSpec
from kboperator.repourl import CheckedRepo, RepoLocation, check_local_folder

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
# What reading the object database can raise: git failed or died (GitError, OSError), or
# answered `missing` or something unparsable (ValueError).
_READ_ERRORS = (GitError, OSError, ValueError)


class RepoCache:
    """Bare clones under `root`, one per (URL, ref, credentials), fetched incrementally.

    Fetches of one clone run one at a time; a source skips its fetch when the clone already
    holds the head it saw with ls-remote (`expected`), or when a fetch started after it asked
    (git.sharing.Coalescer). `fetches` counts what really reached the remote.
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
        partial: bool = False,
    ) -> None:
        self.root = Path(root)
        self.partial = partial
        self.timeout_s = timeout_s
        self.local_root = local_root
        self.host_keys = host_keys
        self._names = CloneNames(self.root)
        self.fetches: Coalescer[str] = Coalescer()
        self.remote_checks: Coalescer[str | None] = Coalescer()

    def key(self, repo: RepoSpec) -> str:
        """The clone's folder name: a keyed hash, so URLs and tokens never become path components."""
        return self._names.name(repo)

    def open(
        self,
        source_id: str,
        repo: CheckedRepo,
        *,
        shallow: bool = False,
        wanted: Callable[[str], bool] | None = None,
        since: str | None = None,
        expected: str | None = None,
    ) -> Checkout:
        """Fetch the checked repository's ref and return a Checkout of its head. Blocking.

        `expected`: the head `remote_head` just saw; a clone already holding it is not fetched.
        `shallow`: a new clone takes the head commit alone (`--depth=1`), for a caller that
        needs no history (a full reconcile); later fetches bring only what is new on top of it.
        A partial cache (`partial`) fetches commits and trees only (`--filter=blob:none`), then
        exactly the blobs of the paths `wanted` selects at head and at `since` (the commit an
        incremental sync diffs from): a monorepo whose documents are a small folder moves only them.
        """
        asked = time.monotonic()
        location, ref = self._admit(repo), repo.ref
        key = self.key(repo.spec)
        folder = self.root / key
        with self.fetches.lock(key):
            fresh = not (folder / "HEAD").is_file()
            if fresh:
                self.fetches.forget(key)
                shutil.rmtree(folder, ignore_errors=True)  # a half-made clone from a crash
                folder.mkdir(parents=True, exist_ok=True)
            self._names.add_user(key, source_id)
            clone = CacheRepo(folder, timeout_s=self.timeout_s)
            try:
                if fresh:
                    try:
                        clone.git.init(bare=True, quiet=True)
                    except GitFailed as exc:
                        raise RepositoryReadError(f"creating the cached clone failed: {exc.detail}") from None
                pinned = self.root / f"{key}.known_hosts"
                credentials = repo.spec.credentials
                with git_call(location, credentials, pinned_known_hosts=pinned, host_keys=self.host_keys) as call:
                    head_sha = None if fresh else self._held(clone, key, asked, expected)
                    if head_sha is None:
                        depth = 1 if fresh and shallow else None
                        head_sha = self.fetches.run(key, lambda: self._fetch_head(clone, location, ref, call, depth))
                    else:
                        log.debug("%s %s: the shared clone already holds %s", location.display_url, ref, head_sha[:12])
                    if self.partial and wanted is not None:
                        self._fetch_blobs(clone, location, call, [head_sha, *([since] if since else [])], wanted)
                is_tag = b"\ttag '" in (folder / "FETCH_HEAD").read_bytes()
            except BaseException:
                clone.close()
                raise
        self._release_others(source_id, keep=key)
        self._drop_legacy(source_id, repo.spec.url)
        return Checkout(clone, location, ref, head_sha, is_tag=is_tag, partial=self.partial)

    def remote_head(self, source_id: str, repo: CheckedRepo) -> str | None:
        """The commit `repo.ref` names on the remote, asked with `git ls-remote`: no objects move.

        Sources sharing a clone share the question too (see Coalescer). None when the answer does
        not say (an ambiguous or unknown ref): the caller fetches, and the fetch reports what is
        wrong. Blocking. Raises like `open` when the remote refuses.
        """
        asked = time.monotonic()
        location = self._admit(repo)
        key = self.key(repo.spec)
        with self.remote_checks.lock(key):
            seen = self.remote_checks.recent(key, asked)
            if seen is not None:
                return seen
            return self.remote_checks.run(key, lambda: self._ls_remote(key, location, repo.ref, repo.spec))

    def _admit(self, repo: CheckedRepo) -> RepoLocation:
        """The one check at this boundary, of the prepared object (no second parse): a local
        repository must be inside `local_root` and never inside the cache, which holds every
        other source's clone. `repo.location.path` is already resolved (symlinks, `..`)."""
        location = repo.location
        if location.kind == "local":
            check_local_folder(Path(location.path), repo.spec.url, local_root=self.local_root, forbidden=[self.root])
        return location

    def forget(self, source_id: str, url: str) -> None:
        """Let go of a source's clones (when the source is deleted); a clone nobody uses is removed."""
        self._release_others(source_id, keep=None)
        self._drop_legacy(source_id, url)

    def _drop_legacy(self, source_id: str, url: str) -> None:
        """Remove the source's clone of the per-source layout of earlier versions, if any."""
        legacy = hashlib.sha256(f"{source_id}\0{url}".encode()).hexdigest()[:32]
        if not (self.root / legacy).exists() and not (self.root / f"{legacy}.known_hosts").exists():
            return
        with self.fetches.lock(legacy):
            shutil.rmtree(self.root / legacy, ignore_errors=True)
            (self.root / f"{legacy}.known_hosts").unlink(missing_ok=True)

    def _release_others(self, source_id: str, keep: str | None) -> None:
        for key in self._names.used_by(source_id):
            if key == keep:
                continue
            with self.fetches.lock(key):
                if self._names.remove_user(key, source_id):
                    self.fetches.forget(key)
                    self.remote_checks.forget(key)
                    shutil.rmtree(self.root / key, ignore_errors=True)
                    shutil.rmtree(self.root / f"{key}.users", ignore_errors=True)
                    (self.root / f"{key}.known_hosts").unlink(missing_ok=True)

    def _held(self, clone: CacheRepo, key: str, asked: float, expected: str | None) -> str | None:
        """The head to use without fetching: a fetch that started after this request asked, or
        the clone's own head when it is `expected`; None when a fetch is needed."""
        shared = self.fetches.recent(key, asked)
        if shared is not None:
            return shared
        if expected is None or not (Path(clone.git_dir) / "FETCH_HEAD").is_file():
            return None
        try:
            held = _fetched_commit(clone, "")
        except SyncError:
            return None
        if held != expected:
            return None
        self.fetches.shared += 1
        return held

    def _fetch_head(self, clone: CacheRepo, location: RepoLocation, ref: str, call: GitCall, depth: int | None) -> str:
        said = self._fetch(clone, location, ref, call, depth=depth)
        return _fetched_commit(clone, ref, said)

    def _ls_remote(self, key: str, location: RepoLocation, ref: str, repo: RepoSpec) -> str | None:
        self.root.mkdir(parents=True, exist_ok=True)
        runner = CleanGit(self.root, base_env(), timeout_s=self.timeout_s)  # no repository needed
        pinned = self.root / f"{key}.known_hosts"
        try:
            Git.check_unsafe_protocols(location.fetch_url)
        except UnsafeProtocolError as exc:
            raise InvalidSpecError(f"git refused the address of {location.display_url}: {exc}") from None
        with git_call(location, repo.credentials, pinned_known_hosts=pinned, host_keys=self.host_keys) as call:
            try:
                with runner.custom_environment(**call.env):
                    out = runner(c=call.config).ls_remote("--", location.fetch_url, ref, f"{ref}^{{}}")
            except GitFailed as exc:
                raise _classify(call.scrub(exc.detail), location, ref) from None
        return resolve_advertised(ref, str(out))

    def _fetch(self, clone: CacheRepo, location: RepoLocation, ref: str, call: GitCall, depth: int | None) -> str:
        """Fetch `ref` into refs/kb/fetched; returns what git said on stderr (its warnings)."""
        # GitPython's own guard against `ext::`-style transports, behind repourl's allow-list.
        try:
            Git.check_unsafe_protocols(location.fetch_url)
        except UnsafeProtocolError as exc:
            raise InvalidSpecError(f"git refused the address of {location.display_url}: {exc}") from None
        # The git CLI through GitPython's command object, not Remote.fetch: that needs the URL
        # saved as a named remote in the clone's config and parses `fetch -v` output into
        # FetchInfo, for nothing here: exactly one ref is fetched into a private ref (`+`
        # accepts force-pushes, no tags ride along), and read back by _fetched_commit. The
        # per-call `-c` options and environment carry the credentials (see git.auth).
        # `--update-shallow`: a shallow repository (a CI checkout made with depth 1) may be
        # fetched from; without it git refuses to write the ref and still exits 0.
        try:
            with clone.git.custom_environment(**call.env):
                _, _, stderr = clone.git(c=call.config).fetch(
                    "--no-tags", "--no-recurse-submodules", "--update-shallow", "--quiet",
                    *([f"--depth={depth}"] if depth else []), *(["--filter=blob:none"] if self.partial else []), "--",
                    location.fetch_url, f"+{ref}:{_FETCHED}", with_extended_output=True,
                )  # fmt: skip
        except GitFailed as exc:
            raise _classify(call.scrub(exc.detail), location, ref) from None
        return call.scrub(str(stderr))

    def _fetch_blobs(
        self, clone: CacheRepo, location: RepoLocation, call: GitCall, commits: list[str], wanted: Callable[[str], bool]
    ) -> None:
        """Fetch the missing blobs of the wanted paths at `commits`, in one request."""
        present = [c for c in commits if _SHA.match(c) and _has_commit(clone, c)]  # not one lost to a force-push
        if not present:
            return
        missing: set[str] = set()
        try:
            if len(present) == 2 and _is_ancestor(clone, present[1], present[0]):
                # An incremental sync reads the changed paths only, at both ends: no tree walk. Those
                # few blobs are asked for whether the clone has them or not (it cannot tell without
                # the walk); the server sends them again at worst.
                changes = parse_diff(clone.git.diff_tree(
                    "-r", "-z", "--raw", "--no-abbrev", "--no-renames", present[1], present[0],
                    stdout_as_string=False, strip_newline_in_stdout=False,
                ))  # fmt: skip
                sides = [e for c in changes for e in (c.old, c.new) if e is not None and e.kind == "file"]
                missing = {e.sha for e in sides if wanted(e.path)}
            else:
                # One walk over every tree (shared subtrees once); `--missing=print` fetches nothing.
                listed = clone.git.rev_list("--objects", "--missing=print", "--no-walk", *present)
                absent = {line[1:].strip() for line in str(listed).splitlines() if line.startswith("?")}
                for commit in present if absent else []:
                    tree = clone.git.ls_tree("-r", "-z", "--full-tree", commit, stdout_as_string=False)
                    missing |= {
                        e.sha for e in parse_ls_tree(tree) if e.sha in absent and e.kind == "file" and wanted(e.path)
                    }
        except GitFailed as exc:
            raise RepositoryReadError(f"reading the cached clone failed: {exc.detail}") from None
        if not missing:
            return
        with tempfile.TemporaryFile() as wants:
            wants.write("".join(f"{sha}\n" for sha in sorted(missing)).encode())
            wants.seek(0)
            try:
                with clone.git.custom_environment(**call.env):
                    # As git's own lazy fetch does: ask for exactly these objects, no negotiation.
                    clone.git(c=[*call.config, "fetch.negotiationAlgorithm=noop"]).fetch(
                        "--no-tags", "--no-write-fetch-head", "--filter=blob:none", "--stdin", "--quiet", "--",
                        location.fetch_url, istream=wants,
                    )  # fmt: skip
            except GitFailed as exc:
                raise _classify(call.scrub(exc.detail), location, "blobs") from None
        log.info("fetched %d blobs of %s for the wanted paths", len(missing), location.display_url)


class Checkout:
    """Read-only access to one fetched head. Close it to stop its git readers."""

    def __init__(
        self, clone: CacheRepo, location: RepoLocation, ref: str, head: str, *, is_tag: bool, partial: bool = False
    ) -> None:
        self.clone = clone
        # A partial clone lacks the blobs of unwanted paths: nothing here may ask git for their
        # size or content (git would try to fetch each one, without credentials).
        self.partial = partial
        self.folder = Path(clone.git_dir)
        self.location = location
        self.ref = ref
        self.head = head
        self.is_tag = is_tag
        self._lock = threading.Lock()  # GitPython's cat-file readers answer one request at a time

    def close(self) -> None:
        with self._lock:
            self.clone.close()

    def list_files(self, commit: str | None = None) -> list[TreeEntry]:
        """Every blob, symlink and submodule in the commit's tree, with sizes."""
        # `ls-tree`, not GitPython's Tree.traverse(): GitPython refuses a whole tree when one
        # entry is named like git metadata on Windows or macOS (`git~1`, `.GIT.`) or has an odd
        # mode, so one hostile file would stop the source; ls-tree lists it, and the document
        # reader skips it. It also returns every size in the same pass.
        sizes = () if self.partial else ("-l",)  # a partial clone: the reader checks each size as it reads
        return parse_ls_tree(self._git("ls_tree", "-r", *sizes, "-z", "--full-tree", self._commit(commit)))

    def diff(self, old: str, new: str | None = None) -> list[Change]:
        """Changes from `old` to `new` (default head), renames detected, blob sizes filled."""
        # `diff-tree --raw -z` parsed by git.objects, not Commit.diff(): GitPython decodes that
        # output as strict UTF-8 and returns an empty diff when one path is not UTF-8, which
        # an incremental sync would take for "nothing changed".
        # A partial clone: no rename detection (it compares the contents of unwanted files too);
        # a rename is then a deletion and an addition, which leaves the index the same.
        renames = "--no-renames" if self.partial else "-M"
        out = self._git("diff_tree", "-r", "-z", "--raw", "--no-abbrev", renames, "--no-commit-id",
                        self._commit(old), self._commit(new))  # fmt: skip
        changes = parse_diff(out)
        if self.partial:
            return changes
        sides = [entry for c in changes for entry in (c.old, c.new) if entry is not None and entry.kind == "file"]
        sizes = self.blob_sizes(entry.sha for entry in sides)
        return [c.with_sizes(sizes) for c in changes]

    def blob_sizes(self, shas: Iterable[str]) -> dict[str, int]:
        unique = sorted({self._object(sha) for sha in shas})
        with self._lock:
            try:  # GitPython's long-lived `cat-file --batch-check`
                return {sha: self.clone.odb.info(bytes.fromhex(sha)).size for sha in unique}
            except _READ_ERRORS as exc:
                raise RepositoryReadError(f"reading blob sizes from the cached clone failed: {exc}") from None

    def read_blob(self, sha: str) -> bytes:
        sha = self._object(sha)
        with self._lock:
            try:  # GitPython's long-lived `cat-file --batch`: one process for every blob of a sync
                _, kind, _, data = self.clone.git.get_object_data(sha)
            except _READ_ERRORS as exc:
                raise RepositoryReadError(f"reading blob {sha} from the cached clone failed: {exc}") from None
        if safe_decode(kind) != "blob":  # typed str, returned as bytes
            raise RepositoryReadError(f"reading blob {sha} from the cached clone failed: it is a {safe_decode(kind)}")
        return data

    def file_at(self, path: str) -> TreeEntry | None:
        """One regular file at head, with its size; None when there is none (a partial clone must
        have fetched its blob)."""
        out = self._git("ls_tree", "-z", "--full-tree", self.head, "--", path)
        entry = next((e for e in parse_ls_tree(out) if e.path == path and e.kind == "file"), None)
        if entry is None:
            return None
        return TreeEntry(entry.path, entry.sha, entry.mode, self.blob_sizes([entry.sha])[entry.sha])

    def has_commit(self, sha: str) -> bool:
        """True when the commit is in the clone (a force-push may have made it vanish)."""
        if not _SHA.match(sha or ""):
            return False
        with self._lock:
            try:
                return bool(self.clone.odb.info(bytes.fromhex(sha)).type == b"commit")
            except _READ_ERRORS:
                return False

    def is_ancestor(self, old: str, new: str | None = None) -> bool:
        """True when `old` is in `new`'s history: a diff from it is an honest account of changes."""
        if not self.has_commit(old):
            return False
        try:
            ancestor, descendant = (Commit(self.clone, bytes.fromhex(sha)) for sha in (old, self._commit(new)))
            return self.clone.is_ancestor(ancestor, descendant)
        except GitError:
            return False

    def _commit(self, commit: str | None) -> str:
        return self.head if commit is None else self._object(commit)

    def _object(self, sha: str) -> str:
        if not _SHA.match(sha):
            raise ValueError(f"not an object id: {sha!r}")
        return sha

    def _git(self, command: str, *args: str) -> bytes:
        # These read our own clone: a failure means a damaged cache (or disk), not a bad spec,
        # and must reach status as a sync error rather than an unexpected exception.
        run = getattr(self.clone.git, command)  # GitPython's `repo.git.ls_tree(...)` style
        try:
            out: bytes = run(*args, stdout_as_string=False, strip_newline_in_stdout=False)
        except GitFailed as exc:
            name = command.replace("_", "-")
            raise RepositoryReadError(f"reading the cached clone failed: git {name}: {exc.detail}") from None
        return out


def _is_ancestor(clone: CacheRepo, old: str, new: str) -> bool:
    try:
        clone.git.merge_base("--is-ancestor", old, new)
    except GitFailed:
        return False
    return True


def _has_commit(clone: CacheRepo, sha: str) -> bool:
    try:
        clone.git.cat_file("-e", f"{sha}^{{commit}}")
    except GitFailed:
        return False
    return True


def resolve_advertised(ref: str, ls_remote: str) -> str | None:
    """The commit `ref` names among `git ls-remote` lines, by git's own rules for a short name.

    The first of `<ref>`, `refs/<ref>`, `refs/tags/<ref>`, `refs/heads/<ref>`,
    `refs/remotes/<ref>`, `refs/remotes/<ref>/HEAD` that is advertised wins (git-rev-parse(1));
    an annotated tag is read through its peeled `^{}` line.
    """
    advertised: dict[str, str] = {}
    for line in ls_remote.splitlines():
        sha, _, name = line.partition("\t")
        if _SHA.match(sha) and name:
            advertised[name] = sha
    candidates = [ref] if ref.startswith("refs/") or ref == "HEAD" else []
    candidates += [
        f"refs/{ref}",
        f"refs/tags/{ref}",
        f"refs/heads/{ref}",
        f"refs/remotes/{ref}",
        f"refs/remotes/{ref}/HEAD",
    ]
    for name in candidates:
        if name in advertised:
            return advertised.get(f"{name}^{{}}", advertised[name])
    return None


def _fetched_commit(clone: CacheRepo, ref: str, said: str = "") -> str:
    try:
        target = clone.rev_parse(_FETCHED)
        while target.type == "tag":  # an annotated tag: peel it to what it names
            target = target.object
        # The real type: a tag's header could claim `commit` for a tree.
        is_commit = clone.odb.info(target.binsha).type == b"commit"
    except BadName:
        git_said = f"; git said: {said.strip()[-600:]}" if said.strip() else ""
        raise RepositoryReadError(f"the fetch of {ref!r} left no {_FETCHED} in the cached clone{git_said}") from None
    except _READ_ERRORS as exc:
        raise RepositoryReadError(f"reading the cached clone failed: {exc}") from None
    if not is_commit:
        raise InvalidSpecError(f"ref {ref!r} does not name a commit")
    return target.hexsha


def _classify(stderr: str, location: RepoLocation, ref: str) -> SyncError:
    text = stderr.lower()
    where = location.display_url
    if "couldn't find remote ref" in text:
        return InvalidSpecError(f"ref {ref!r} was not found in {where} (git: {stderr})")
    if "strange hostname" in text or "strange pathname" in text:  # git's own option-injection guard
        return InvalidSpecError(f"git refused the address of {where}: {stderr}")
    not_a_repo = "not a git repository" in text or "does not appear to be a git repository" in text
    if location.kind == "local" and not_a_repo:
        return InvalidSpecError(f"{where} is not a git repository (git: {stderr})")
    if any(hint in text for hint in _AUTH_HINTS):
        return RepositoryAuthError(f"access to {where} was refused (or it does not exist): {stderr}")
    return RepositoryUnavailableError(f"fetching {where} failed: {stderr}")
