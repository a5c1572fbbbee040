"""Versioned copies a repository shows by its own folders: `content/v1.16-docs/` beside `content/docs/`.

The search service reads a version from one path alone when a folder's whole name is a version
(`2.21/`, `v1.4/`, `version-3.1/`, `release-1.2/`). A version beside a name (`v1.16-docs`,
`docs-2.21`, `guide_v3.1`) is only a version when the repository shows it: a sibling folder with
the same name and no version (`docs`, the current copy) or with another version (`docs-2.20`).
Alone, `python-3.11/` is a guide about Python 3.11. The service writes one document at a time and
cannot see the siblings; the sync sees the whole tree, so it decides here and sends the version as
the document's `version` metadata. Given it, the service keys the page by the folder's name without
the version (`content/docs/usage/x.md`), which the current copy has already: the copies are one page,
and the copy without a version is the newest.

Bound: building a layout is linear in the total length of the paths given; looking a path up is
linear in its length.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

__all__ = ["VersionLayout", "affixed_version"]

# A version in a folder name: dotted (1.16, v3.1.2) or a `v` and a number (v2). A bare number beside a
# name (`2021-blog`, `k8s-1-docs`) is a year or a part, and digits glued to a name (`python3`) are the name.
_VERSION = r"v?\d{1,4}(?:\.\d{1,4}){1,3}|v\d{1,4}"
# The name: words of letters and digits, each starting with a letter, joined by - or _.
_NAME = r"[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z][A-Za-z0-9]*)*"
_AFFIXED = re.compile(
    rf"^(?:(?P<before>{_VERSION})[-_](?P<after_name>{_NAME})|(?P<name>{_NAME})[-_](?P<after>{_VERSION}))$"
)
# The service's own forms (`version-3.1`, `release-1.2`): it reads those itself, from the path alone.
_SERVICE_PREFIXES = frozenset({"version", "release"})
MAX_FOLDER_CHARS = 255


def affixed_version(folder: str) -> tuple[str, str] | None:
    """(name, version) of a folder named after another with a version before or after it, else None.

    `v1.16-docs` -> ("docs", "1.16"); `docs_v2` -> ("docs", "2"); `python3-docs`, `2021-blog` -> None.
    """
    if len(folder) > MAX_FOLDER_CHARS:
        return None
    match = _AFFIXED.match(folder)
    if match is None:
        return None
    name = match.group("name") or match.group("after_name")
    if name.casefold() in _SERVICE_PREFIXES:
        return None
    version = match.group("before") or match.group("after")
    return name, version[1:] if version[0] in "vV" else version


class VersionLayout:
    """The folders of a set of paths that are versioned copies, by their siblings.

    A folder `X` under a parent is a version when `affixed_version(X)` names (name, version) and the
    same parent holds another folder of that name: the name itself (the current copy) or the name
    with another version. Only folders that hold a path given count.
    """

    def __init__(self, paths: Iterable[str]) -> None:
        families: dict[tuple[str, str], set[str]] = defaultdict(set)  # (parent, name) -> its folders
        seen: set[str] = set()
        for path in paths:
            folders = path.split("/")[:-1]
            for depth in range(len(folders)):
                folder_path = "/".join(folders[: depth + 1])
                if folder_path in seen:
                    continue
                seen.add(folder_path)
                parent, folder = "/".join(folders[:depth]), folders[depth]
                affixed = affixed_version(folder)
                families[(parent, affixed[0] if affixed else folder)].add(folder)
        # parent -> {versioned folder: version}
        self._versions: dict[str, dict[str, str]] = defaultdict(dict)
        for (parent, _), members in families.items():
            if len(members) < 2:
                continue
            for folder in members:
                affixed = affixed_version(folder)
                if affixed is not None:
                    self._versions[parent][folder] = affixed[1]

    def version_of(self, path: str) -> str | None:
        """The version of the first folder of `path` that is a versioned copy; None when none is."""
        folders = path.split("/")[:-1]
        for depth, folder in enumerate(folders):
            version = self._versions.get("/".join(folders[:depth]), {}).get(folder)
            if version is not None:
                return version
        return None

    def __bool__(self) -> bool:
        return bool(self._versions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VersionLayout) and self._versions == other._versions

    __hash__ = None  # type: ignore[assignment]
