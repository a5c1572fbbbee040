"""Versioned documentation: which version of which page a document is, and which version is newest.

Docs repositories keep a copy of every page per version: `content/docs/2.21/…` (Hugo),
`versioned_docs/version-3.1/…` (Docusaurus), `docs/v1.4/…` or `1.4/…` (mkdocs-mike and others),
or a folder named after the current one with a version before or after it: `content/v1.16-docs/…`
beside `content/docs/…` (cert-manager's site), `docs-2.21/…` beside `docs/…`.
A document's version comes from its `version` metadata when the writer set one (an operator
source's `versionPattern` names its own layout), else from the first folder of its path that looks like a
version. Its page is the path with that folder replaced by `*`, so every version of one page
shares a page key; where the layout names the current copy (Docusaurus's `docs/` beside its
`versioned_docs/`, `docs/` beside `v1.16-docs/`), the versions take that copy's path as their key,
and the copy without a version is the newest. Each document is located from its own path, so a write
needs nothing of the repository's other files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

__all__ = ["DocumentVersion", "detect_version", "newest_first_key", "version_key"]

# A folder that names a version: 2.21, 1.4.0, v1.4, v2, version-3.1, release-1.2, 2.x.
_VERSION_FOLDER = re.compile(
    r"^(?:(?:v|version-|release-)(?P<prefixed>\d{1,4}(?:\.\d{1,4}){0,3})|(?P<dotted>\d{1,4}(?:\.\d{1,4}){1,3})"
    r"|(?P<series>\d{1,4})(?=\.x$))(?:\.x)?$",
    re.IGNORECASE,
)
# A folder named after the current copy's folder with a version before or after it: v1.16-docs,
# 1.16-docs, docs-2.21, docs_v2.21. Dotted only: `python3-docs`, `2021-blog`, `k8s-1-docs` are names.
_AFFIXED_VERSION_FOLDER = re.compile(
    r"^(?:v?(?P<before>\d{1,4}(?:\.\d{1,4}){1,3})[-_](?P<current_after>[a-z][a-z0-9]*)"
    r"|(?P<current_before>[a-z][a-z0-9]*)[-_]v?(?P<after>\d{1,4}(?:\.\d{1,4}){1,3}))$",
    re.IGNORECASE,
)
MAX_VERSION_CHARS = 64


class DocumentVersion(NamedTuple):
    version: str | None
    page: str  # the path with its version folder replaced by `*`: the same for every version of a page


def detect_version(uri: str, metadata: Mapping[str, object]) -> DocumentVersion:
    """The version and version-free page key of a document, from its metadata `version` and `path`."""
    path = metadata.get("path")
    path = path if isinstance(path, str) and path else _uri_path(uri)
    explicit = metadata.get("version")
    if isinstance(explicit, str | int | float) and not isinstance(explicit, bool) and str(explicit).strip():
        version = str(explicit).strip()[:MAX_VERSION_CHARS]
        # The folder that names it: `2.21`, `v2.21`, `docs-2.21`, but not `12.21` or `2.21.1`.
        names_it = re.compile(rf"(?<![A-Za-z0-9.])v?{re.escape(version)}(?![A-Za-z0-9.])", re.IGNORECASE)
        folders = path.split("/")
        for i, folder in enumerate(folders[:-1]):
            if names_it.search(folder):
                return DocumentVersion(version, _page_key(folders, i))
        return DocumentVersion(version, path)
    folders = path.split("/")
    for i, folder in enumerate(folders[:-1]):
        match = _VERSION_FOLDER.match(folder)
        if match is not None:
            version = match.group("prefixed") or match.group("dotted") or match.group("series")
            return DocumentVersion(version, _page_key(folders, i))
        affixed = _AFFIXED_VERSION_FOLDER.match(folder)
        if affixed is not None:
            current = affixed.group("current_after") or affixed.group("current_before")
            page = "/".join([*folders[:i], current, *folders[i + 1 :]])
            return DocumentVersion(affixed.group("before") or affixed.group("after"), page)
    return DocumentVersion(None, path)


def _page_key(folders: list[str], version_at: int) -> str:
    """The path with its version folder replaced by `*`; Docusaurus's versions map to `docs/`."""
    if version_at > 0 and folders[version_at - 1] == "versioned_docs":
        # versioned_docs/version-3.1/x.md is a version of the current docs/x.md.
        return "/".join([*folders[: version_at - 1], "docs", *folders[version_at + 1 :]])
    return "/".join([*folders[:version_at], "*", *folders[version_at + 1 :]])


def version_key(version: str | None) -> tuple[int, tuple[int, ...], str]:
    """Sort key, larger is newer: numbers compare as numbers (2.21 > 2.9); no version is the current copy."""
    if version is None:
        return (2, (), "")
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:6])
    return (1, numbers, version) if numbers else (0, (), version)


def newest_first_key(version: str | None) -> tuple[int, tuple[int, ...], str]:
    key = version_key(version)
    return (-key[0], tuple(-n for n in key[1]), key[2])


def _uri_path(uri: str) -> str:
    parts = urlsplit(uri)
    path = unquote(parts.path) if parts.scheme else uri
    return path.lstrip("/")
