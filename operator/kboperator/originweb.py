"""A local clone's web page, from its `origin` remote: the links' base when none is given.

`knowledge-sync --repo ./handbook` would otherwise give documents `file://` URIs holding this
machine's paths, which nobody else can open. The remote's https address or its ssh one
(`ssh://git@host[:port]/org/repo.git`, scp-like `git@host:org/repo.git`) names the host and the
repository; the page is `https://host/org/repo` (the ssh port is not the web port; a remote's
user name or token never reaches the page). The links then take the host's own shape
(sync.docuri: GitHub's `blob/<ref>`, GitLab's `-/blob/<ref>`, Bitbucket's `src/<ref>`, Gitea and
Forgejo's `src/branch/<ref>`).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from kboperator.errors import InvalidSpecError
from kboperator.git.auth import base_env
from kboperator.git.command import CleanGit, GitFailed
from kboperator.repourl import parse_repo_url
from kboperator.sync.docuri import check_web_url, web_base

# SSH endpoints some hosts serve on port 443 under another name; their pages are on the main name.
_SSH_ALIASES = {
    "ssh.github.com": "github.com",
    "altssh.gitlab.com": "gitlab.com",
    "altssh.bitbucket.org": "bitbucket.org",
}
_GIT_TIMEOUT_S = 10.0


def web_url_of_remote(remote: str) -> str | None:
    """The repository's web page for a remote URL; None for a local path or an address we cannot read."""
    remote = remote.strip()
    parts = urlsplit(remote)
    if parts.scheme.lower() in ("http", "https") and "@" in parts.netloc:
        # A user name or token in the remote (Bitbucket's clone URLs carry the user): dropped, never shown.
        remote = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    try:
        location = parse_repo_url(remote, allow_local=False)
    except InvalidSpecError:
        return None
    if location.kind == "ssh" and location.host in _SSH_ALIASES:
        return check_web_url(f"https://{_SSH_ALIASES[location.host]}/{location.path}")
    try:
        return check_web_url(web_base(location))
    except ValueError:
        return None


def origin_url(clone: Path) -> str | None:
    """`remote.origin.url` of the clone at `clone`, None without one."""
    return _git(clone, "config", "--get", "remote.origin.url")


def current_branch(clone: Path) -> str | None:
    """The branch the clone's HEAD is on, None when it is detached."""
    return _git(clone, "symbolic-ref", "--quiet", "--short", "HEAD")


def _git(clone: Path, *args: str) -> str | None:
    try:
        out = CleanGit(clone, base_env(), timeout_s=_GIT_TIMEOUT_S).execute(["git", *args])
    except (GitFailed, OSError):  # not a repository, no such key, no git: the links stay file://
        return None
    value = str(out).strip()
    return value or None
