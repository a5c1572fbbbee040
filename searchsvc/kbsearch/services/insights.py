"""Insights over the query log: top, zero-result and low-score queries, searches by origin, latency.

Queries are grouped by their normalised text (case-folded, whitespace collapsed). A query is
*zero-result* when some search of it in the window found nothing, and *low-score* when it found
something but its best top score in the window stayed below the threshold. The viewer sees only
the entries its scope allows (store/querylog.py says which), filtered in the engine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from kbsearch.errors import InvalidRequestError
from kbsearch.models import Insights, InsightsWindow, QueryCount, QueryScore
from kbsearch.services.access import Caller, SourceCatalog
from kbsearch.services.querylog import QueryLog
from kbsearch.services.runtime import store_call
from kbsearch.store import querylog as q

__all__ = ["Insights", "InsightsService", "QueryCount", "QueryScore", "aggregate"]

WINDOWS: dict[str, float] = {"24h": 86_400.0, "7d": 7 * 86_400.0, "30d": 30 * 86_400.0}
TOP = 10  # entries per list


@dataclass(slots=True)
class _Group:
    count: int = 0
    zero: int = 0
    last_at: float = 0.0
    last_zero_at: float = 0.0
    best: float | None = None  # the best top score of the searches that found something


@dataclass(slots=True)
class _Tally:
    total: int = 0
    groups: dict[str, _Group] = field(default_factory=dict)
    by_origin: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)


class InsightsService:
    def __init__(
        self,
        *,
        query_log: QueryLog,
        catalog: SourceCatalog,
        low_score: float,
        top: int = TOP,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.query_log = query_log
        self.catalog = catalog
        self.low_score = low_score
        self.top = top
        self.clock = clock

    async def insights(self, caller: Caller, window: InsightsWindow) -> Insights:
        if window not in get_args(InsightsWindow):
            raise InvalidRequestError(f"window must be one of {', '.join(WINDOWS)}", details={"window": window})
        store = self.query_log.store
        if store is None:
            return empty(window, enabled=False)
        allowed = await caller.scope.resolve(self.catalog)
        if allowed == []:
            return empty(window, enabled=True)
        since = self.clock() - WINDOWS[window]

        def read() -> Insights:
            entries = store.entries(since=since, allowed=allowed, fields=q.AGGREGATE_FIELDS)
            return aggregate(entries, window, low_score=self.low_score, top=self.top)

        return await store_call(read)


def empty(window: InsightsWindow, *, enabled: bool) -> Insights:
    return Insights(window, 0, [], [], [], {}, None, None, enabled)


def aggregate(
    payloads: Iterable[Mapping[str, Any]], window: InsightsWindow, *, low_score: float, top: int = TOP
) -> Insights:
    """Insights from query-log payloads (the fields of store.querylog.AGGREGATE_FIELDS)."""
    tally = _Tally()
    for p in payloads:
        tally.total += 1
        at = float(p[q.AT])
        group = tally.groups.get(p[q.NORMALIZED])
        if group is None:
            group = tally.groups[p[q.NORMALIZED]] = _Group()
        group.count += 1
        group.last_at = max(group.last_at, at)
        score = p.get(q.TOP_SCORE)
        if int(p[q.RESULTS]) == 0:
            group.zero += 1
            group.last_zero_at = max(group.last_zero_at, at)
        elif score is not None:
            group.best = score if group.best is None else max(group.best, score)
        tally.by_origin[p[q.ORIGIN]] = tally.by_origin.get(p[q.ORIGIN], 0) + 1
        tally.latencies.append(float(p[q.LATENCY_MS]))
    groups = tally.groups
    # Most frequent first; ties by the most recent, then by text, so the lists are stable.
    frequent = sorted(groups, key=lambda k: (-groups[k].count, -groups[k].last_at, k))
    zero = sorted((k for k in groups if groups[k].zero), key=lambda k: (-groups[k].zero, -groups[k].last_zero_at, k))
    low = [k for k in frequent if groups[k].best is not None and groups[k].best < low_score]  # type: ignore[operator]
    latencies = sorted(tally.latencies)
    return Insights(
        window=window,
        total=tally.total,
        top_queries=[QueryCount(k, groups[k].count, q.rfc3339(groups[k].last_at)) for k in frequent[:top]],
        zero_result=[QueryCount(k, groups[k].zero, q.rfc3339(groups[k].last_zero_at)) for k in zero[:top]],
        low_score=[QueryScore(k, groups[k].count, float(groups[k].best or 0.0)) for k in low[:top]],
        by_origin=dict(sorted(tally.by_origin.items())),
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
        enabled=True,
    )


def percentile(ordered: list[float], pct: float) -> float | None:
    """The nearest-rank percentile of sorted values; None when there are none."""
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)
