"""The query log's store: a payload-only collection beside the chunks, shared by every replica.

One point per search, with a random id (every search is its own event) and no vectors:
`at` (seconds since the epoch, float-indexed for the window and for age-ordered pruning), `time`
(RFC 3339), `origin`, `query` and its grouping form `normalized`, `results`, `topScore`,
`latencyMs`, `caller` (a name, never a token), `sources` (the sources the search was scoped to)
and `unrestricted` (it had no source filter at all).

Visibility, enforced in the engine filter: an unrestricted viewer sees every entry; a viewer
restricted to the sources `allowed` sees an entry only if it is not unrestricted and every one
of its sources is in `allowed` (a search that touched any source outside the viewer's, or no
source filter at all, is hidden; so is one whose scope matched nothing).

The backends (edge.py, qdrant_server.py) supply a few primitives; the rest is written here once.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from kbsearch.models import QueryLogEntry
from kbsearch.store import payloads as pl

AT = "at"
TIME = "time"
ORIGIN = "origin"
QUERY = "query"
NORMALIZED = "normalized"
RESULTS = "results"
TOP_SCORE = "topScore"
LATENCY_MS = "latencyMs"
CALLER = "caller"
SOURCES = "sources"
UNRESTRICTED = "unrestricted"

# Payload indexes both backends create: the window and the pruning order, origin, scope.
FLOAT_INDEXES = (AT,)
KEYWORD_INDEXES = (ORIGIN, SOURCES)
BOOL_INDEXES = (UNRESTRICTED,)

# What an insights read needs of each entry: not the caller, not the raw text.
AGGREGATE_FIELDS = [AT, ORIGIN, NORMALIZED, RESULTS, TOP_SCORE, LATENCY_MS]

_PAGE = 2000  # points per scroll page
_PRUNE_BATCH = 1000  # ids per delete when trimming to the count cap


def querylog_collection(collection: str) -> str:
    return f"{collection}_querylog"


def normalize(query: str) -> str:
    """The grouping form of a query: case-folded, whitespace collapsed."""
    return " ".join(query.casefold().split())


def entry_payload(entry: QueryLogEntry) -> dict[str, Any]:
    return {
        AT: entry.at,
        TIME: rfc3339(entry.at),
        ORIGIN: entry.origin,
        QUERY: entry.query,
        NORMALIZED: normalize(entry.query),
        RESULTS: entry.results,
        TOP_SCORE: entry.top_score,
        LATENCY_MS: entry.latency_ms,
        CALLER: entry.caller,
        SOURCES: list(entry.sources or []),
        UNRESTRICTED: entry.sources is None,
    }


def entry_from_payload(payload: dict[str, Any]) -> QueryLogEntry:
    return QueryLogEntry(
        at=float(payload[AT]),
        origin=payload[ORIGIN],
        query=payload[QUERY],
        results=int(payload[RESULTS]),
        top_score=payload.get(TOP_SCORE),
        latency_ms=float(payload[LATENCY_MS]),
        caller=payload[CALLER],
        sources=None if payload.get(UNRESTRICTED) else list(payload.get(SOURCES) or []),
    )


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def visible_to(allowed: list[str] | None) -> list[pl.Condition]:
    """The entries a viewer with scope `allowed` (None: unrestricted) may see; see the module docstring."""
    if allowed is None:
        return []
    return [pl.Match(UNRESTRICTED, False), pl.OnlyAmong(SOURCES, list(allowed))]


class QueryLogStore(ABC):
    """The query log's collection; blocking calls, like VectorStore's."""

    backend: str
    collection: str

    # --- primitives (one backend each) --------------------------------------------------------

    @abstractmethod
    def open(self) -> None:
        """Create the collection and its payload indexes, or open it."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _upsert(self, points: list[tuple[str, dict[str, Any]]]) -> None:
        """Write vector-less points (id, payload)."""

    @abstractmethod
    def _scroll_page(
        self, conditions: list[pl.Condition], *, offset: Any, limit: int, payload: list[str] | bool
    ) -> tuple[list[Any], Any]:
        """One page of matching points (`.id`, `.payload`) and the next offset (None at the end)."""

    @abstractmethod
    def _oldest_ids(self, limit: int) -> list[str]:
        """The ids of the `limit` entries with the smallest `at`."""

    @abstractmethod
    def _count(self, conditions: list[pl.Condition]) -> int: ...

    @abstractmethod
    def _delete_where(self, conditions: list[pl.Condition]) -> None:
        """Delete the matching points; `conditions` is never empty."""

    @abstractmethod
    def _delete_ids(self, ids: list[str]) -> None: ...

    # --- the log ------------------------------------------------------------------------------

    def append(self, entries: list[QueryLogEntry]) -> None:
        self._upsert([(str(uuid.uuid4()), entry_payload(e)) for e in entries])

    def count(self) -> int:
        return self._count([])

    def entries(self, *, since: float, allowed: list[str] | None, fields: list[str] | None = None) -> Iterator[Any]:
        """The payloads (only `fields`, default every one) of the entries at or after `since` the viewer may see."""
        conditions = [pl.Range(AT, gte=since), *visible_to(allowed)]
        offset = None
        while True:
            page, offset = self._scroll_page(conditions, offset=offset, limit=_PAGE, payload=fields or True)
            for point in page:
                yield point.payload or {}
            if offset is None:
                return

    def prune(self, *, before: float, keep: int) -> int:
        """Delete the entries older than `before`, then the oldest beyond the newest `keep`; returns how many."""
        aged = self._count([pl.Range(AT, lte=before)])
        if aged:
            self._delete_where([pl.Range(AT, lte=before)])
        trimmed = 0
        excess = self.count() - keep
        while excess > 0:
            ids = self._oldest_ids(min(excess, _PRUNE_BATCH))
            if not ids:
                break
            self._delete_ids(ids)
            trimmed += len(ids)
            excess -= len(ids)
        return aged + trimmed
