"""Who is calling and which sources it may see: the caller, its scope, and the scope's engine filter.

A scope is a list of patterns over sourceIdentifier: exact ids, and globs (`fnmatch` rules,
case-sensitive; `*` also matches `/`). `*` alone is every source, and the only scope that sees
documents without a sourceIdentifier. Globs are resolved to exact ids against the sources the
store knows (the SourceCatalog), so the engine filters on an exact list and `limit`, counts and
paging stay exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from kbsearch.aio.runtime import store_call
from kbsearch.errors import ForbiddenError
from kbsearch.store.base import VectorStore

EVERYTHING = "*"
# Another replica's new source reaches a glob caller here within this many seconds.
CATALOG_TTL_S = 1.0
_GLOB_CHARS = frozenset("*?[")


def is_glob(pattern: str) -> bool:
    return any(ch in _GLOB_CHARS for ch in pattern)


@dataclass(frozen=True, slots=True)
class SourceScope:
    patterns: tuple[str, ...] = ()

    @classmethod
    def everything(cls) -> SourceScope:
        return cls((EVERYTHING,))

    @property
    def unrestricted(self) -> bool:
        return EVERYTHING in self.patterns

    def allows(self, source_identifier: str | None) -> bool:
        if self.unrestricted:
            return True
        if source_identifier is None:
            return False
        return any(fnmatchcase(source_identifier, p) if is_glob(p) else source_identifier == p for p in self.patterns)

    async def resolve(self, catalog: SourceCatalog) -> list[str] | None:
        """The exact source ids this scope may read now; None means every source (no filter)."""
        if self.unrestricted:
            return None
        exact = {p for p in self.patterns if not is_glob(p)}
        globs = [p for p in self.patterns if is_glob(p)]
        if globs:
            known = await catalog.known()
            exact.update(s for s in known if any(fnmatchcase(s, g) for g in globs))
        return sorted(exact)


class SourceCatalog:
    """The source ids of the store's document records, read (a facet) at most every CATALOG_TTL_S.

    A write here of a source it does not list drops the list, so this replica's own new source
    is visible at once. A stale list can only hide a new source, never show one too many.
    """

    def __init__(
        self, store: VectorStore, ttl_s: float = CATALOG_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store, self.ttl_s, self._clock = store, ttl_s, clock
        self._known: frozenset[str] | None = None
        self._read_at = 0.0

    async def known(self) -> frozenset[str]:
        if self._known is None or self._clock() - self._read_at >= self.ttl_s:
            read_at = self._clock()
            self._known = frozenset(await store_call(self.store.source_identifiers))
            self._read_at = read_at
        return self._known

    def wrote(self, source_identifier: str | None) -> None:
        if source_identifier is not None and self._known is not None and source_identifier not in self._known:
            self._known = None


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated identity: its name (for logs, never a token), write right and read scope."""

    name: str
    may_write: bool
    scope: SourceScope

    @classmethod
    def anonymous(cls) -> Caller:
        """The caller of a service with no tokens configured (single-tenant, loopback)."""
        return cls("anonymous", True, SourceScope.everything())

    @property
    def partition(self) -> str:
        """This caller's own partition of the embedding cache (its queries and ask sentences)."""
        return "caller\0" + self.name + "\0" + ",".join(self.scope.patterns)


def source_partition(source_identifier: str | None) -> str:
    """A source's own partition of the embedding cache (its chunk texts); no source is one partition too."""
    return "source\0" + (source_identifier if source_identifier is not None else "\0none")


def narrow(requested: list[str] | None, allowed: list[str] | None) -> list[str] | None:
    """The sources a query may touch: the caller's own filter intersected with its scope."""
    if allowed is None:
        return requested
    if requested is None:
        return allowed
    permitted = set(allowed)
    return [s for s in requested if s in permitted]


def require_writer(caller: Caller, source_identifier: str | None, *, check_source: bool = True) -> None:
    """403 unless the caller may write, and may write this source (its patterns match it)."""
    if not caller.may_write:
        raise ForbiddenError(f"{caller.name!r} may read but not write")
    if check_source and not caller.scope.allows(source_identifier):
        raise ForbiddenError(
            f"{caller.name!r} may not write this source", code="SOURCE_FORBIDDEN", details={"caller": caller.name}
        )
