"""Versioned documentation: which version of which page a document is, and which version is newest.

Docs repositories keep a copy of every page per version: `content/docs/2.21/…` (Hugo),
`versioned_docs/version-3.1/…` (Docusaurus), `docs/v1.4/…`, `1.4/…` or `release-1.2/…` (mkdocs-mike
and others), or a folder named after the current copy's with a version before or after it:
`content/v1.16-docs/…` beside `content/docs/…` (cert-manager's site), `docs-2.21/…` beside `docs/…`.

A write is one document, so the version is read from that document alone:

- its `version` metadata, when the writer set one. The operator and `knowledge-sync` see the whole
  tree and set it for a folder that names a version beside a name (`v1.16-docs`, `docs-2.21`) when a
  sibling folder shows the layout: the same name without the version (`docs`, the current copy) or
  with another one (kboperator/sync/versions.py). Alone, `python-3.11/` is a guide, not a version,
  and a path cannot tell the two apart. A `versionPattern` names any other layout; a REST writer sets
  `version` itself;
- else the first folder of its path whose whole name is a version (`2.21`, `v1.4`, `version-3.1`,
  `release-1.2`, `2.x`): that needs no sibling to be sure.

Its page key is the path with that folder replaced by `*`, so every version of a page shares it.
Where the layout names the current copy, the versions take that copy's path instead: Docusaurus's
`versioned_docs/version-3.1/x.md` is keyed `docs/x.md`, and `content/v1.16-docs/x.md` (with its
version given) `content/docs/x.md`. The current copy, which has no version, is then the same page
and the newest version of it (search shows the newest that matched, services/search/ranking.py).
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
MAX_VERSION_CHARS = 64


class DocumentVersion(NamedTuple):
    version: str | None
    page: str  # the path with its version folder replaced by `*`: the same for every version of a page


def detect_version(uri: str, metadata: Mapping[str, object]) -> DocumentVersion:
    """The version and version-free page key of a document, from its metadata `version` and `path`."""
    path = metadata.get("path")
    path = path if isinstance(path, str) and path else _uri_path(uri)
    explicit = metadata.get("version")
    folders = path.split("/")
    if isinstance(explicit, str | int | float) and not isinstance(explicit, bool) and str(explicit).strip():
        version = str(explicit).strip()[:MAX_VERSION_CHARS]
        # The folder that names it: `2.21`, `v2.21`, `docs-2.21`, but not `12.21` or `2.21.1`.
        names_it = re.compile(rf"(?<![A-Za-z0-9.])v?{re.escape(version)}(?![A-Za-z0-9.])", re.IGNORECASE)
        for i, folder in enumerate(folders[:-1]):
            named = names_it.search(folder)
            if named is None:
                continue
            current = _without_version(folder, named)
            if current is None or _VERSION_FOLDER.match(folder):
                return DocumentVersion(version, _page_key(folders, i))
            # `v1.16-docs` is a version of the current copy in `docs`: the page is that copy's path.
            return DocumentVersion(version, "/".join([*folders[:i], current, *folders[i + 1 :]]))
        return DocumentVersion(version, path)
    for i, folder in enumerate(folders[:-1]):
        match = _VERSION_FOLDER.match(folder)
        if match is not None:
            version = match.group("prefixed") or match.group("dotted") or match.group("series")
            return DocumentVersion(version, _page_key(folders, i))
    return DocumentVersion(None, path)


def _without_version(folder: str, named: re.Match[str]) -> str | None:
    """The folder's name without the version and its separator (`v1.16-docs` -> `docs`); None if nothing is left."""
    before, after = folder[: named.start()].rstrip("-_"), folder[named.end() :].lstrip("-_")
    separator = folder[len(before)] if before and after else ""
    return before + separator + after or None


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
