"""Push events of each git host, read into one shape: which repository, which ref, which paths.

Payload shapes (as documented by each host):
- GitHub, Gitea, Forgejo: `ref`, `repository.{clone_url, ssh_url, html_url}`,
  `commits[].{added, removed, modified}`; GitHub lists at most 20 commits, Gitea says how many
  there were in `total_commits`.
- GitLab (`object_kind: push`): `ref`, `project.{git_http_url, git_ssh_url, web_url}`,
  `commits[].{added, removed, modified}` (at most 20) and `total_commits_count`.
- Bitbucket Server (`eventKey: repo:refs_changed`): `repository.links.{clone, self}[].href`,
  `changes[].refId`; it names no paths.
- Generic: `{"repository": URL, "ref": "refs/heads/main", "paths": [...]}`; `repository` and
  `paths` are optional.
When a payload cannot list every changed path (none given, or commits left out), `paths` is
None: the push may touch anything, and it is matched as if it did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kboperator.errors import InvalidSpecError
from kboperator.hooks.signatures import BITBUCKET_SERVER, GENERIC, GITLAB
from kboperator.repourl import RepoLocation, parse_repo_url

__all__ = ["Push", "PushError", "parse_push", "same_ref", "same_repository"]


class PushError(ValueError):
    """The body is not a push event this receiver understands."""


@dataclass(frozen=True)
class Push:
    """One push: the repository's addresses, the refs it moved, and its changed paths (None: unknown)."""

    urls: frozenset[str]
    refs: frozenset[str]
    paths: frozenset[str] | None


def _strings(values: Iterable[Any]) -> list[str]:
    return [value for value in values if isinstance(value, str) and value]


def _commit_paths(commits: Any, total: Any) -> frozenset[str] | None:
    if not isinstance(commits, list) or not commits:
        return None
    if isinstance(total, int) and total > len(commits):
        return None  # the host left commits out
    if len(commits) >= 20 and not isinstance(total, int):
        return None  # GitHub stops at 20 without saying how many there were
    paths: set[str] = set()
    for commit in commits:
        if not isinstance(commit, Mapping):
            return None
        for key in ("added", "removed", "modified"):
            listed = commit.get(key)
            if not isinstance(listed, list):
                return None
            paths.update(_strings(listed))
    return frozenset(paths)


def parse_push(host: str, event: str, payload: Any) -> Push | None:
    """The push in `payload` (already JSON-decoded); None for another event (a ping, a tag's note...)."""
    if not isinstance(payload, Mapping):
        raise PushError("the body is not a JSON object")
    if host == GITLAB:
        if payload.get("object_kind") not in ("push", "tag_push"):
            return None
        project = payload.get("project") or {}
        repository = payload.get("repository") or {}
        urls = _strings([project.get(k) for k in ("git_http_url", "git_ssh_url", "web_url")])
        urls += _strings([repository.get(k) for k in ("git_http_url", "git_ssh_url", "homepage")])
        refs = _strings([payload.get("ref")])
        paths = _commit_paths(payload.get("commits"), payload.get("total_commits_count"))
    elif host == BITBUCKET_SERVER:
        if payload.get("eventKey", event) != "repo:refs_changed":
            return None
        links = (payload.get("repository") or {}).get("links") or {}
        urls = _strings(link.get("href") for kind in ("clone", "self") for link in links.get(kind) or [])
        refs = _strings(change.get("refId") for change in payload.get("changes") or [] if isinstance(change, Mapping))
        paths = None
    elif host == GENERIC:
        urls = _strings([payload.get("repository")])
        refs = _strings([payload.get("ref")])
        listed = payload.get("paths")
        paths = frozenset(_strings(listed)) if isinstance(listed, list) else None
    else:  # GitHub, Gitea, Forgejo
        if event and event != "push":
            return None
        repository = payload.get("repository") or {}
        urls = _strings([repository.get(k) for k in ("clone_url", "ssh_url", "html_url", "git_url")])
        refs = _strings([payload.get("ref")])
        paths = _commit_paths(payload.get("commits"), payload.get("total_commits"))
        if payload.get("deleted") is True:
            paths = None  # a deleted branch: let the sync report it
    if not refs:
        raise PushError("the push names no ref")
    return Push(frozenset(urls), frozenset(refs), paths)


def _identity(location: RepoLocation) -> tuple[str, str]:
    return (location.host or "", location.path.lower().removesuffix(".git").strip("/"))


def same_repository(push: Push, location: RepoLocation) -> bool:
    """Whether one of the push's addresses is the source's repository (host and path; any protocol).

    A push that names no repository (a generic delivery) matches: its signature already names the source.
    """
    if not push.urls:
        return True
    wanted = _identity(location)
    for url in push.urls:
        try:
            if _identity(parse_repo_url(url, allow_local=False)) == wanted:
                return True
        except InvalidSpecError:
            continue
        if url.startswith(("http://", "https://")):  # a web page address: the same host and path
            rest = url.split("://", 1)[1]
            host, _, path = rest.partition("/")
            if (host.split(":")[0].lower(), path.lower().removesuffix(".git").strip("/")) == wanted:
                return True
    return False


def same_ref(push: Push, ref: str) -> bool:
    """Whether the push moved the source's ref (a short name or a full `refs/...` name)."""
    names = {ref} if ref.startswith("refs/") else {f"refs/heads/{ref}", f"refs/tags/{ref}", ref}
    return bool(names & push.refs)
