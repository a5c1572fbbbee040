"""A document's ranking weight: what its source says of its path, else what its path says it is.

A page's score is multiplied by its weight (services/search/ranking.py). The weight is, in order:

1. the document's `rankWeight` metadata, a number in (0, 4]: a KnowledgeSource's `pathWeights`
   (or `knowledge-sync --path-weight`) sets it by path, as docs search services rank by start URL;
2. else, with SEARCHSVC_DEFAULT_PATH_WEIGHTS on (the default), the weight of the role its path
   says it has: an announcement blog or news post, a proposal or design document, a changelog or
   release notes, a generated CLI reference page, a guide for the project's own contributors. These
   repeat what the reference pages document, in other words or with less context (or answer
   another reader), and so often rank above the page a user wants;
3. else 1.

A weight below 1 is lifted back to 1 when the question names what the page is: a word its role
answers to ("blog", "announcement", "proposal", "changelog", "release"; a version number for
release notes; "cli", "command", "flag", or every word of the file's name, for CLI reference:
"argocd app sync" for `argocd_app_sync.md`). Only the role's words count: a topic word shared by
a proposal's file name and the question ("sync timeout") would lift every design document.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_ROLES", "PathRole", "PathWeights"]

WEIGHT_KEY = "rankWeight"
MAX_WEIGHT = 4.0
_VERSION_NUMBER = re.compile(r"\bv?\d+\.\d+(?:\.\d+)?\b")
_NAME_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True, slots=True)
class PathRole:
    """A role a page's path reveals: by a folder on the path or by the file's name (without extension)."""

    name: str
    weight: float
    folders: frozenset[str]
    files: frozenset[str] = frozenset()
    asks: frozenset[str] = frozenset()  # words of a question that asks for this role
    versions: bool = False  # a version number in the question asks for it too
    file_names: bool = False  # a question holding every word of the file's name asks for it too

    def holds(self, folders: list[str], file: str) -> bool:
        return bool(self.folders.intersection(folders)) or file in self.files


# The defaults for common documentation layouts (listed in docs/user/api.md#search-results).
DEFAULT_ROLES = (
    PathRole(
        "blog",
        0.7,
        frozenset({"blog", "blogs", "news", "posts", "announcements"}),
        asks=frozenset({"blog", "post", "announc", "news"}),
    ),
    PathRole(
        "design",
        0.7,
        frozenset(
            {
                "proposals",
                "proposal",
                "design",
                "designs",
                "design-docs",
                "enhancements",
                "rfcs",
                "rfc",
                "adr",
                "adrs",
                "keps",
            }
        ),
        asks=frozenset({"propos", "design", "enhanc", "rfc", "adr", "kep", "motiv"}),
    ),
    PathRole(
        "changelog",
        0.8,
        frozenset({"changelog", "changelogs", "release-notes", "releasenotes", "releases"}),
        files=frozenset({"changelog", "changes", "history", "release-notes", "releasenotes", "news"}),
        asks=frozenset({"changelog", "releas"}),
        versions=True,
    ),
    PathRole(
        "cli-reference",
        0.8,
        frozenset({"commands", "cli"}),
        asks=frozenset({"cli", "command", "flag"}),
        file_names=True,
    ),
    # Docs for the project's own contributors (building, releasing, submitting a change), not its users.
    PathRole(
        "contributing",
        0.8,
        frozenset({"developer-guide", "developer-docs", "contributing", "contributors", "contribute", "hacking"}),
        files=frozenset({"contributing", "hacking"}),
        asks=frozenset({"contribut", "develop", "maintain"}),
    ),
)


class PathWeights:
    """The weight of each hit's document for one question (see the module docstring)."""

    def __init__(self, stems: Callable[[str], list[str]], *, defaults: bool = True) -> None:
        self.stems = stems  # the keyword lane's tokenizer: the same stems as the question's
        self.defaults = defaults  # SEARCHSVC_DEFAULT_PATH_WEIGHTS: weigh by role when no rankWeight is given
        self.roles = DEFAULT_ROLES

    def _words(self, text: str) -> list[str]:
        return self.stems(" ".join(_NAME_WORD.findall(text)))

    def for_query(self, query: str) -> Callable[[Mapping[str, object], str], float]:
        """weight(metadata, path) for this query."""
        asked = set(self.stems(query))
        names_version = bool(_VERSION_NUMBER.search(query))

        def weight(metadata: Mapping[str, object], path: str) -> float:
            *folders, name = path.casefold().split("/")
            file = name.rsplit(".", 1)[0]
            given = _given(metadata.get(WEIGHT_KEY))
            role = next((r for r in self.roles if r.holds(folders, file)), None)
            if given is not None:
                chosen = given
            elif role is not None and self.defaults:
                chosen = role.weight
            else:
                return 1.0
            if chosen >= 1.0:
                return chosen
            if role is not None and (
                asked & role.asks
                or (role.versions and names_version)
                or (role.file_names and asked.issuperset(self._words(file) or [""]))
            ):
                return 1.0  # the question names what the page is
            return chosen

        return weight


def _given(value: object) -> float | None:
    """A usable rankWeight: a number (or numeric text) in (0, MAX_WEIGHT]; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and 0.0 < number <= MAX_WEIGHT else None
