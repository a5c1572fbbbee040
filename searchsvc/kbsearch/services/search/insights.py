"""Insights over the query log: top, zero-result and low-score queries, searches by origin, latency.

Queries are grouped by their normalised text (case-folded, whitespace collapsed). A query is
*zero-result* for the searches of it in the window that found nothing, and *low-score* when it
found something but its best top score in the window stayed below the threshold. The viewer
sees only the entries its scope allows (store/querylog.py says which), filtered in the engine,
which also does the counting (store.querylog.QueryLogStore.insights).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import get_args

from kbsearch.aio.runtime import store_call
from kbsearch.errors import InvalidRequestError
from kbsearch.models import Insights, InsightsWindow, QueryCount, QueryScore
from kbsearch.services.access.scope import Caller, SourceCatalog
from kbsearch.services.search.querylog import QueryLog

__all__ = ["Insights", "InsightsService", "QueryCount", "QueryScore"]

WINDOWS: dict[str, float] = {"24h": 86_400.0, "7d": 7 * 86_400.0, "30d": 30 * 86_400.0}
TOP = 10  # entries per list


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
        return await store_call(
            lambda: store.insights(window, since=since, allowed=allowed, top=self.top, low_score=self.low_score)
        )

    async def top_queries(self, caller: Caller, window: InsightsWindow, limit: int) -> list[QueryCount]:
        """The `limit` most frequent queries (more than the insights page lists), ties by text."""
        store = self.query_log.store
        allowed = await caller.scope.resolve(self.catalog)
        if store is None or limit <= 0 or allowed == []:
            return []
        since = self.clock() - WINDOWS[window]
        found = await store_call(
            lambda: store.insights(window, since=since, allowed=allowed, top=limit, low_score=self.low_score)
        )
        return sorted(found.top_queries, key=lambda q: (-q.count, q.query))


def empty(window: InsightsWindow, *, enabled: bool) -> Insights:
    return Insights(window, 0, [], [], [], {}, None, None, enabled)
