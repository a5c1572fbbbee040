"""Sources as an agent sees them: which it may read, their versions and freshness, and which fit a task.

One service behind GET /api/v1/sources (with or without `query`), MCP's list_sources and
resolve_sources tools. Every read is the caller's: the listing is scoped in the store
(DocumentReads.sources), the task's search is the caller's own search (SearchService.search), and
the versions are counted only for the sources listed, so a caller never learns of another's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kbsearch.aio.runtime import store_call
from kbsearch.commands import SearchQuery
from kbsearch.models import SearchOrigin, SourceStats
from kbsearch.services.access.scope import Caller
from kbsearch.services.documents.reads import DocumentReads
from kbsearch.services.documents.versions import newest_first_key
from kbsearch.services.search.service import SearchService
from kbsearch.services.serving import Serving
from kbsearch.store.base import VectorStore

# Bounds of one resolve, whatever the query: its tokens, the chunks its search reads, the sources it returns.
MAX_QUERY_TOKENS = 32
RESOLVE_HITS = 50  # pages: the calibrated relevance is a page's
MAX_RESOLVED = 10
# Versions listed per source (a facet's limit): more than any docs site keeps.
MAX_VERSIONS = 200
# A name match and the task's best relevance count alike.
NAME_WEIGHT = 0.5

_TOKEN = re.compile(r"[a-z0-9]+(?:\.[a-z0-9]+)*")


def tokens(text: str) -> list[str]:
    """Lower-case words and dotted numbers ('cert-manager v1.16' -> cert, manager, v1.16), at most MAX_QUERY_TOKENS."""
    return _TOKEN.findall(text.lower()[: MAX_QUERY_TOKENS * 64])[:MAX_QUERY_TOKENS]


@dataclass(frozen=True, slots=True)
class SourceMatch:
    """Why a source fits a query: the query words in its name, and how well its documents answer it."""

    score: float  # 0-1: NAME_WEIGHT of the name's words matched, the rest the task's best relevance
    name_tokens: tuple[str, ...]
    relevance: float  # the best relevance of its chunks for the query (0: none found)
    hits: int  # its pages among the query's RESOLVE_HITS results
    best_title: str | None
    best_uri: str | None
    version: str | None  # a version the query names that the source holds


@dataclass(frozen=True, slots=True)
class SourceView:
    stats: SourceStats
    versions: tuple[tuple[str, int], ...]  # (version, chunks), newest first
    unversioned_chunks: int  # chunks of the current copy, which has no version
    quality: float | None = None  # hit@5 of its judged questions, from its last sync report (sync.quality)
    match: SourceMatch | None = None


class SourceService:
    def __init__(self, serving: Serving, *, reads: DocumentReads, search: SearchService) -> None:
        self._serving = serving
        self.reads = reads
        self.search = search

    @property
    def store(self) -> VectorStore:
        return self._serving.store

    async def overview(
        self, caller: Caller, query: str | None = None, *, origin: SearchOrigin = "api"
    ) -> list[SourceView]:
        """Every source the caller may read; with `query`, only those that fit it, best first (at most MAX_RESOLVED)."""
        listed = await self.reads.sources(caller)
        if query is None:
            return [await self._view(stats) for stats in listed]
        matches = await self._matches(listed, query, caller, origin)
        ranked = sorted(matches.items(), key=lambda item: (-item[1].score, item[0]))[:MAX_RESOLVED]
        by_id = {s.source_identifier: s for s in listed}
        views = []
        for source, match in ranked:
            view = await self._view(by_id[source])
            named = {v for v, _ in view.versions}
            version = next((t.removeprefix("v") for t in tokens(query) if t.removeprefix("v") in named), None)
            views.append(_with_match(view, match, version))
        return views

    async def _view(self, stats: SourceStats) -> SourceView:
        counts = await store_call(self.store.version_counts, [stats.source_identifier], None, MAX_VERSIONS)
        versions = tuple(sorted(counts.items(), key=lambda item: newest_first_key(item[0])))
        judged = stats.sync.quality if stats.sync is not None else None
        return SourceView(
            stats=stats, versions=versions, unversioned_chunks=max(0, stats.chunks - sum(counts.values())),
            quality=judged.hit_at_5 if judged is not None else None,
        )  # fmt: skip

    async def _matches(
        self, listed: Sequence[SourceStats], query: str, caller: Caller, origin: SearchOrigin
    ) -> dict[str, SourceMatch]:
        words = set(tokens(query))
        outcome = await self.search.search(SearchQuery(query=query, limit=RESOLVE_HITS), caller, origin=origin)
        matches: dict[str, SourceMatch] = {}
        for stats in listed:
            source = stats.source_identifier
            name = tokens(source)
            named = tuple(t for t in name if t in words)
            hits = [h for h in outcome.hits if h.source_identifier == source]
            best = max(hits, key=lambda h: h.relevance or 0.0, default=None)
            relevance = (best.relevance or 0.0) if best is not None else 0.0
            score = NAME_WEIGHT * (len(named) / len(name) if name else 0.0) + (1 - NAME_WEIGHT) * relevance
            if not named and relevance < outcome.relevant_at:
                continue  # neither named nor about the task
            matches[source] = SourceMatch(
                score=round(score, 4),
                name_tokens=named,
                relevance=round(relevance, 4),
                hits=len(hits),
                best_title=best.title if best is not None else None,
                best_uri=best.uri if best is not None else None,
                version=None,
            )
        return matches


def _with_match(view: SourceView, match: SourceMatch, version: str | None) -> SourceView:
    return replace(view, match=replace(match, version=version))
