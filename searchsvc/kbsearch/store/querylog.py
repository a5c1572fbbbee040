"""The query log's store: a payload-only collection beside the chunks, shared by every replica.

One point per search, with a random id (every search is its own event) and no vectors:
`at` (seconds since the epoch, float-indexed for the window and for age-ordered pruning), `time`
(RFC 3339), `origin`, `query` and its grouping form `normalized`, `results`, `topScore`,
`latencyMs` and its histogram bucket `latencyBucket`, `caller` (a name, never a token), `sources`
(the sources the search was scoped to) and `unrestricted` (it had no source filter at all).

Insights are counted by the engine, never by reading every entry: counts and exact facets over
the indexed fields (origin, normalized query, latency bucket), plus one ordered read per listed
query for its last time or best score. Latency percentiles come from the bucket histogram, so
they are exact to within one bucket (5 %).

Visibility, enforced in the engine filter: an unrestricted viewer sees every entry; a viewer
restricted to the sources `allowed` sees an entry only if it is not unrestricted and every one
of its sources is in `allowed` (a search that touched any source outside the viewer's, or no
source filter at all, is hidden; so is one whose scope matched nothing).

The backends (edge.py, qdrant_server.py) supply a few primitives; the rest is written here once.
"""

from __future__ import annotations

import math
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from kbsearch.models import Insights, InsightsWindow, QueryCount, QueryLogEntry, QueryScore
from kbsearch.store import conditions as cd

AT = "at"
TIME = "time"
ORIGIN = "origin"
QUERY = "query"
NORMALIZED = "normalized"
RESULTS = "results"
TOP_SCORE = "topScore"
LATENCY_MS = "latencyMs"
LATENCY_BUCKET = "latencyBucket"
CALLER = "caller"
SOURCES = "sources"
UNRESTRICTED = "unrestricted"

# Payload indexes both backends create: the window and the pruning order, origin, scope, and
# what insights count and rank by.
FLOAT_INDEXES = (AT, TOP_SCORE)
KEYWORD_INDEXES = (ORIGIN, SOURCES, NORMALIZED)
INTEGER_INDEXES = (RESULTS, LATENCY_BUCKET)
BOOL_INDEXES = (UNRESTRICTED,)

# Latency histogram: bucket b holds latencies up to LATENCY_FLOOR_MS * LATENCY_STEP**b.
LATENCY_FLOOR_MS = 0.1
LATENCY_STEP = 1.05
LATENCY_BUCKETS = 400  # up to ~3 days: every bucket there can be
# Low-score candidates read per listed query: a candidate with one good search is dropped.
LOW_SCORE_CANDIDATES = 20

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
        LATENCY_BUCKET: latency_bucket(entry.latency_ms),
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


def latency_bucket(latency_ms: float) -> int:
    """The histogram bucket of a latency: the smallest b with latency <= floor * step**b."""
    if latency_ms <= LATENCY_FLOOR_MS:
        return 0
    bucket = math.ceil(math.log(latency_ms / LATENCY_FLOOR_MS) / math.log(LATENCY_STEP) - 1e-9)
    return min(bucket, LATENCY_BUCKETS - 1)


def bucket_latency(bucket: int) -> float:
    """The upper bound of a bucket, in ms."""
    return round(LATENCY_FLOOR_MS * LATENCY_STEP**bucket, 3)


def histogram_percentile(histogram: dict[int, int], pct: float) -> float | None:
    """The nearest-rank percentile of a bucket histogram, as its bucket's upper bound."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(pct / 100 * total)), 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return bucket_latency(bucket)
    return None  # unreachable: the counts add up to the total


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def visible_to(allowed: list[str] | None) -> list[cd.Condition]:
    """The entries a viewer with scope `allowed` (None: unrestricted) may see; see the module docstring."""
    if allowed is None:
        return []
    return [cd.Match(UNRESTRICTED, False), cd.OnlyAmong(SOURCES, list(allowed))]


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
        self, conditions: list[cd.Condition], *, offset: Any, limit: int, payload: list[str] | bool
    ) -> tuple[list[Any], Any]:
        """One page of matching points (`.id`, `.payload`) and the next offset (None at the end)."""

    @abstractmethod
    def _oldest_ids(self, limit: int) -> list[str]:
        """The ids of the `limit` entries with the smallest `at`."""

    @abstractmethod
    def _count(self, conditions: list[cd.Condition]) -> int: ...

    @abstractmethod
    def _facet(self, key: str, conditions: list[cd.Condition], limit: int) -> dict[Any, int]:
        """The `limit` most frequent values of an indexed `key` among the matching points (exact counts)."""

    @abstractmethod
    def _first_by(
        self, conditions: list[cd.Condition], field: str, *, descending: bool = True
    ) -> dict[str, Any] | None:
        """The payload of the matching point with the greatest (or least) float-indexed `field`, or None."""

    @abstractmethod
    def _delete_where(self, conditions: list[cd.Condition]) -> None:
        """Delete the matching points; `conditions` is never empty."""

    @abstractmethod
    def _delete_ids(self, ids: list[str]) -> None: ...

    # --- the log ------------------------------------------------------------------------------

    def append(self, entries: list[QueryLogEntry]) -> None:
        if not entries:
            return
        self._upsert([(str(uuid.uuid4()), entry_payload(e)) for e in entries])

    def count(self) -> int:
        return self._count([])

    def entries(self, *, since: float, allowed: list[str] | None, fields: list[str] | None = None) -> Iterator[Any]:
        """The payloads (only `fields`, default every one) of the entries at or after `since` the viewer may see."""
        conditions = [cd.Range(AT, gte=since), *visible_to(allowed)]
        offset = None
        while True:
            page, offset = self._scroll_page(conditions, offset=offset, limit=_PAGE, payload=fields or True)
            for point in page:
                yield point.payload or {}
            if offset is None:
                return

    def insights(
        self, window: InsightsWindow, *, since: float, allowed: list[str] | None, top: int, low_score: float
    ) -> Insights:
        """What the entries at or after `since` that the viewer may see add up to (see the module docstring).

        A query is zero-result for its searches that found nothing; low-score when it found
        something in the window and its best top score stayed below `low_score` (the first
        LOW_SCORE_CANDIDATES * top queries with a low search are considered). Lists are ordered
        by count; queries tied at a list's end are cut by the engine's order.
        """
        oldest = self._first_by([], AT, descending=False)
        # A window that reaches past the oldest entry (a retention shorter than the window) needs no
        # time condition, which spares every count and facet below a range check per entry.
        within = [cd.Range(AT, gte=since)] if oldest is not None and float(oldest[AT]) < since else []
        where = [*within, *visible_to(allowed)]
        total = self._count(where)
        if not total:
            return Insights(window, 0, [], [], [], {}, None, None, True)
        latencies = {int(k): v for k, v in self._facet(LATENCY_BUCKET, where, LATENCY_BUCKETS).items()}
        zero = [*where, cd.Match(RESULTS, 0)]
        low = [*where, cd.Range(RESULTS, gte=1), cd.Range(TOP_SCORE, lt=low_score)]
        return Insights(
            window=window,
            total=total,
            top_queries=self._ranked(where, top),
            zero_result=self._ranked(zero, top),
            low_score=self._low_scores(where, low, top, low_score),
            by_origin=dict(sorted(self._facet(ORIGIN, where, 64).items())),
            latency_p50_ms=histogram_percentile(latencies, 50),
            latency_p95_ms=histogram_percentile(latencies, 95),
            enabled=True,
        )

    def _ranked(self, where: list[cd.Condition], top: int) -> list[QueryCount]:
        """The `top` most frequent queries among the matching entries, with their count and last time."""
        ranked: list[tuple[int, float, str]] = []
        for query, count in self._facet(NORMALIZED, where, top).items():
            last = self._first_by([*where, cd.Match(NORMALIZED, str(query))], AT) or {}
            ranked.append((count, float(last.get(AT, 0.0)), str(query)))
        # Most frequent first; ties by the most recent, then by text, so the lists are stable.
        ranked.sort(key=lambda r: (-r[0], -r[1], r[2]))
        return [QueryCount(query, count, rfc3339(at)) for count, at, query in ranked]

    def _low_scores(
        self, where: list[cd.Condition], low: list[cd.Condition], top: int, low_score: float
    ) -> list[QueryScore]:
        candidates = self._facet(NORMALIZED, low, top * LOW_SCORE_CANDIDATES)
        if not candidates:
            return []
        names = [str(k) for k in candidates]
        good = [*where, cd.Range(TOP_SCORE, gte=low_score), cd.MatchAny(NORMALIZED, names)]
        once_good = {str(k) for k in self._facet(NORMALIZED, good, len(names))}
        scores = []
        for query in [n for n in names if n not in once_good][:top]:
            best = self._first_by([*low, cd.Match(NORMALIZED, query)], TOP_SCORE) or {}
            scores.append(QueryScore(query, candidates[query], float(best.get(TOP_SCORE, 0.0))))
        return sorted(scores, key=lambda q: (-q.count, q.top_score, q.query))

    def prune(self, *, before: float, keep: int) -> int:
        """Delete the entries older than `before`, then the oldest beyond the newest `keep`; returns how many."""
        aged = self._count([cd.Range(AT, lte=before)])
        if aged:
            self._delete_where([cd.Range(AT, lte=before)])
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
