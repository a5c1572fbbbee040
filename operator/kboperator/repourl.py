"""Validation of repository URLs and refs before anything reaches git.

Accepted URL forms:
- `https://host[:port]/org/repo[.git]` (and `http://`, which never carries credentials);
- `ssh://[user@]host[:port]/org/repo[.git]` and scp-like `user@host:org/repo[.git]`;
- `file:///abs/path` and plain local paths, only when local repositories are allowed, and then
  only inside the configured root (after resolving symlinks and `..`) and never inside the
  clone cache, which holds every other source's repository.
Everything else (`git://`, `ext::`, `fd::` and other transports) is refused, and so is any
URL, ref, SSH user or host starting with '-', which git or ssh could read as an option.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kboperator.errors import InvalidSpecError
from kboperator.models import RepoSpec

# `scheme://...`; git's transport-helper syntax `helper::address` is matched apart.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HELPER = re.compile(r"^[A-Za-z0-9+.-]+::")
# scp-like `[user@]host:path`: a ':' before any '/' (git's own rule).
_SCP = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^@/:\[\]]+|\[[^\]]+\]):(?P<path>.*)$")
_HOST = re.compile(r"^[A-Za-z0-9.-]+$|^\[[0-9A-Fa-f:.]+\]$")
# Characters `git check-ref-format` refuses anywhere in a ref.
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


@dataclass(frozen=True)
class RepoLocation:
    """A validated repository address. `fetch_url` is what git gets; it never holds secrets."""

    kind: str  # "https" | "http" | "ssh" | "local"
    fetch_url: str
    host: str | None  # lower-cased, without port; None for local
    path: str  # "org/repo" without ".git" for remote ones; the absolute folder for local
    display_url: str  # credential-free, for the `repository` metadata and messages


@dataclass(frozen=True)
class CheckedRepo:
    """A repository parsed and checked once per sync turn: its spec (URL, ref, credentials), its
    location and its checked ref. The git layer takes this and parses nothing again."""

    spec: RepoSpec
    location: RepoLocation
    ref: str


def check_repo(
    repo: RepoSpec, *, allow_local: bool, local_root: Path | None = None, forbidden: Sequence[Path] = ()
) -> CheckedRepo:
    """Parse the URL and check the ref of `repo` (see parse_repo_url); InvalidSpecError says what is wrong."""
    location = parse_repo_url(repo.url, allow_local=allow_local, local_root=local_root, forbidden=forbidden)
    return CheckedRepo(repo, location, validate_ref(repo.ref))


def parse_repo_url(
    url: str, *, allow_local: bool, local_root: Path | None = None, forbidden: Sequence[Path] = ()
) -> RepoLocation:
    """Classify and validate a repository URL; raise InvalidSpecError when it cannot be used.

    A local repository must be inside `local_root` (when given: the operator always gives one)
    and outside every folder in `forbidden` (the clone cache).
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidSpecError("the repository URL is empty")
    if url != url.strip() or any(ord(c) < 0x20 or c == "\x7f" for c in url):
        raise InvalidSpecError("the repository URL contains whitespace or control characters")
    if url.startswith("-"):
        raise InvalidSpecError("the repository URL must not start with '-' (it would be read as a git option)")
    if _HELPER.match(url):
        raise InvalidSpecError("git transport helpers ('<helper>::<address>') are not allowed")
    scheme = _SCHEME.match(url)
    if scheme:
        name = scheme.group(1).lower()
        if name in ("https", "http", "ssh"):
            return _parse_network(url, name)
        if name == "file":
            return _local(unquote(urlsplit(url).path), allow_local, local_root, forbidden)
        raise InvalidSpecError(f"unsupported URL scheme {name!r}: use https, ssh, or a local path")
    scp = _SCP.match(url)
    if scp and not url.startswith(("/", "./", "../", "~")):
        return _scp(url, scp)
    return _local(url, allow_local, local_root, forbidden)


def _parse_network(url: str, scheme: str) -> RepoLocation:
    parts = urlsplit(url)
    if parts.password is not None:
        raise InvalidSpecError("the repository URL contains a password; put credentials in the Secret instead")
    if scheme != "ssh" and parts.username is not None:
        raise InvalidSpecError("the repository URL contains a user name; put credentials in the Secret instead")
    if parts.query or parts.fragment:
        raise InvalidSpecError("the repository URL must not have a query or fragment")
    host = _host(parts.hostname or "", url)
    try:
        port = parts.port
    except ValueError:
        raise InvalidSpecError("the repository URL has an invalid port") from None
    path = _repo_path(parts.path)
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    if scheme == "ssh":
        _user(parts.username)
        user = f"{parts.username}@" if parts.username else ""
        fetch = f"ssh://{user}{netloc}/{parts.path.lstrip('/')}"
    else:
        fetch = f"{scheme}://{netloc}/{parts.path.lstrip('/')}"
    return RepoLocation(scheme, fetch, host, path, fetch)


def _scp(url: str, match: re.Match[str]) -> RepoLocation:
    host = _host(match.group("host").strip("[]"), url)
    _user(match.group("user"))
    path = _repo_path(match.group("path"))
    return RepoLocation("ssh", url, host, path, url)


def _user(user: str | None) -> None:
    # git percent-decodes an ssh:// URL's user and host, so '%2D' is a '-' too. Refused here as an
    # invalid spec: git would refuse it as well, but as a fetch failure, which is retried forever.
    if user is not None and (not user or unquote(user).startswith("-")):
        raise InvalidSpecError("the SSH user name must not be empty or start with '-' (ssh would read it as an option)")


def _host(host: str, url: str) -> str:
    if not host or unquote(host).startswith("-") or not _HOST.match(host if ":" not in host else f"[{host}]"):
        raise InvalidSpecError(f"the repository URL {url!r} has an invalid host")
    return host.lower()


def _repo_path(raw: str) -> str:
    path = raw.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise InvalidSpecError("the repository URL has no usable repository path")
    return path


def _local(raw: str, allow_local: bool, local_root: Path | None, forbidden: Sequence[Path]) -> RepoLocation:
    if not allow_local:
        raise InvalidSpecError("local repositories are not allowed by this operator's configuration")
    # resolve() follows every symlink and removes `..`: the checks below see the real folder,
    # and git gets that real folder, not the path as written.
    folder = Path(os.path.expanduser(raw)).resolve()
    check_local_folder(folder, raw, local_root=local_root, forbidden=forbidden)
    if not folder.is_dir():
        raise InvalidSpecError(f"the local repository {str(folder)!r} is not a folder")
    return RepoLocation("local", str(folder), None, str(folder), folder.as_uri())


def check_local_folder(folder: Path, url: str, *, local_root: Path | None, forbidden: Sequence[Path]) -> None:
    """A resolved local repository folder must be inside `local_root` (when given) and outside
    every folder in `forbidden` (the clone cache); `url` is the address as written, for the message."""
    if local_root is not None and not folder.is_relative_to(local_root.resolve()):
        raise InvalidSpecError(f"the local repository {url!r} is outside the allowed folder {str(local_root)!r}")
    if any(folder.is_relative_to(place.resolve()) for place in forbidden):
        raise InvalidSpecError(f"the local repository {url!r} is inside the operator's clone cache")


def validate_ref(ref: str) -> str:
    """Check a branch or tag name like `git check-ref-format --allow-onelevel` (and refuse '-')."""
    if not isinstance(ref, str) or not ref:
        raise InvalidSpecError("the ref is empty")
    if ref.startswith("-"):
        raise InvalidSpecError("the ref must not start with '-' (it would be read as a git option)")
    problem = None
    if len(ref) > 255:
        problem = "it is longer than 255 characters"
    elif _BAD_REF_CHARS.search(ref):
        problem = "it contains a space, a control character or one of ~ ^ : ? * [ \\"
    elif ".." in ref or "@{" in ref or ref == "@":
        problem = "it contains '..' or '@{', or is '@'"
    elif ref.endswith((".", "/")) or ref.startswith("/") or "//" in ref:
        problem = "it starts or ends with '/', ends with '.', or contains '//'"
    elif any(part.startswith(".") or part.endswith(".lock") for part in ref.split("/")):
        problem = "a component starts with '.' or ends with '.lock'"
    if problem:
        raise InvalidSpecError(f"invalid ref {ref!r}: {problem}")
    return ref
