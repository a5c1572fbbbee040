"""Insights over a real query-log collection on both stores: the engine's counting, windows and scope."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from kbsearch.metrics import Metrics
from kbsearch.models import Insights, QueryCount, QueryLogEntry, QueryScore
from kbsearch.services.access.scope import Caller, SourceScope
from kbsearch.services.search.insights import InsightsService
from kbsearch.services.search.querylog import QueryLog
from kbsearch.settings import QueryLogSettings
from kbsearch.store.base import VectorStore
from kbsearch.store.factory import query_log_beside
from kbsearch.store.querylog import (
    LATENCY_STEP,
    QueryLogStore,
    bucket_latency,
    histogram_percentile,
    latency_bucket,
    rfc3339,
)

NOW = 1_800_000_000.0
HOUR = 3600.0


@pytest.fixture
def log_store(store: VectorStore) -> Iterator[QueryLogStore]:
    log = query_log_beside(store)
    log.open()
    yield log
    log.close()


def searched(
    query: str,
    *,
    ago: float = HOUR,
    results: int = 3,
    score: float | None = 0.9,
    latency: float = 10.0,
    origin: str = "api",
    sources: list[str] | None = None,
) -> QueryLogEntry:
    return QueryLogEntry(
        at=NOW - ago,
        origin=origin,  # type: ignore[arg-type]
        query=query,
        results=results,
        top_score=score if results else None,
        latency_ms=latency,
        caller="someone",
        sources=sources,
    )


def insights_of(
    log_store: QueryLogStore, entries: list[QueryLogEntry], low_score: float = 0.4, top: int = 10
) -> Insights:
    log_store.append(entries)
    return log_store.insights("24h", since=NOW - 24 * HOUR, allowed=None, top=top, low_score=low_score)


def test_queries_group_by_case_and_whitespace_and_rank_by_count(log_store: QueryLogStore) -> None:
    found = insights_of(
        log_store,
        [
            searched("Deploy rollback", ago=5 * HOUR),
            searched("deploy   ROLLBACK", ago=1 * HOUR),
            searched("  deploy rollback ", ago=3 * HOUR),
            searched("helm values", ago=2 * HOUR),
            searched("helm values", ago=4 * HOUR),
            searched("vault", ago=0.5 * HOUR),
        ],
    )
    assert found.total == 6 and found.enabled
    assert found.top_queries == [
        QueryCount("deploy rollback", 3, rfc3339(NOW - HOUR)),
        QueryCount("helm values", 2, rfc3339(NOW - 2 * HOUR)),
        QueryCount("vault", 1, rfc3339(NOW - 0.5 * HOUR)),
    ]


def test_ties_are_broken_by_recency_then_text_and_lists_are_cut_at_top(log_store: QueryLogStore) -> None:
    entries = [searched("c"), searched("c"), searched("b", ago=2 * HOUR), searched("a", ago=2 * HOUR)]
    entries += [searched("d", ago=0.5 * HOUR)]
    assert [q.query for q in insights_of(log_store, entries).top_queries] == ["c", "d", "a", "b"]
    assert [q.query for q in log_store.insights("24h", since=0, allowed=None, top=1, low_score=0.4).top_queries] == [
        "c"
    ]


def test_zero_result_queries_count_only_their_empty_searches(log_store: QueryLogStore) -> None:
    found = insights_of(
        log_store,
        [
            searched("kubectl rollout", results=0, ago=3 * HOUR),
            searched("kubectl rollout", results=0, ago=2 * HOUR),
            searched("kubectl rollout", results=4, ago=1 * HOUR),  # found once: still listed, with 2
            searched("xyzzy", results=0, ago=5 * HOUR),
            searched("found", results=1),
        ],
    )
    assert found.zero_result == [
        QueryCount("kubectl rollout", 2, rfc3339(NOW - 2 * HOUR)),
        QueryCount("xyzzy", 1, rfc3339(NOW - 5 * HOUR)),
    ]


def test_low_score_queries_are_those_whose_best_top_score_stays_below_the_threshold(log_store: QueryLogStore) -> None:
    found = insights_of(
        log_store,
        [
            searched("vague", score=0.2),
            searched("vague", score=0.35),
            searched("vague", score=0.1),
            searched("once good", score=0.1),
            searched("once good", score=0.8),  # its best is good: not listed
            searched("weak", score=0.3),
            searched("exactly at", score=0.4),  # not below
            searched("nothing", results=0),  # zero-result, not low-score
        ],
        low_score=0.4,
    )
    assert found.low_score == [QueryScore("vague", 3, 0.35), QueryScore("weak", 1, 0.3)]


def test_searches_by_origin_and_latency_percentiles(log_store: QueryLogStore) -> None:
    entries = [searched(f"q{i}", latency=float(i), origin="api") for i in range(1, 91)]
    entries += [searched(f"m{i}", latency=float(90 + i), origin="mcp") for i in range(1, 9)]
    entries += [searched("ui", latency=99.0, origin="ui"), searched("ask", latency=100.0, origin="ask")]
    found = insights_of(log_store, entries)
    assert found.by_origin == {"api": 90, "ask": 1, "mcp": 8, "ui": 1}
    # Nearest rank over 100 latencies of 1..100 ms, to within one 5 % histogram bucket.
    assert found.latency_p50_ms is not None and 50.0 <= found.latency_p50_ms < 50.0 * LATENCY_STEP
    assert found.latency_p95_ms is not None and 95.0 <= found.latency_p95_ms < 95.0 * LATENCY_STEP


@pytest.mark.parametrize("latency", [0.0, 0.1, 0.37, 1.0, 9.99, 50.0, 1234.5])
def test_a_latency_bucket_bounds_its_latency_within_five_percent(latency: float) -> None:
    upper = bucket_latency(latency_bucket(latency))
    assert latency <= upper + 1e-9 and (upper <= 0.1 or upper < latency * LATENCY_STEP + 1e-9)


def test_histogram_percentiles_are_nearest_rank() -> None:
    assert histogram_percentile({}, 50) is None
    assert histogram_percentile({3: 1}, 95) == bucket_latency(3)
    assert histogram_percentile({1: 2, 7: 2}, 50) == bucket_latency(1)
    assert histogram_percentile({1: 2, 7: 2}, 95) == bucket_latency(7)


def test_no_entries_means_empty_lists_and_no_latency(log_store: QueryLogStore) -> None:
    assert insights_of(log_store, []) == Insights("24h", 0, [], [], [], {}, None, None, True)


# --- windows and scope over a real collection -----------------------------------------------


class _NoCatalog:
    """Callers here have exact scopes, which resolve without a catalog."""

    async def known(self) -> frozenset[str]:
        raise AssertionError("an exact scope needs no catalog")


def service(log_store: QueryLogStore) -> InsightsService:
    query_log = QueryLog(log_store, QueryLogSettings(), metrics=Metrics())
    return InsightsService(query_log=query_log, catalog=_NoCatalog(), low_score=0.4, clock=lambda: NOW)  # type: ignore[arg-type]


def caller(*patterns: str) -> Caller:
    return Caller("viewer", False, SourceScope(patterns))


async def test_each_window_counts_only_its_own_span(log_store: QueryLogStore) -> None:
    log_store.append(
        [
            searched("last hour", ago=HOUR),
            searched("two days ago", ago=48 * HOUR),
            searched("ten days ago", ago=240 * HOUR),
            searched("forty days ago", ago=960 * HOUR),
        ]
    )
    insights = service(log_store)
    everyone = caller("*")
    assert (await insights.insights(everyone, "24h")).total == 1
    assert (await insights.insights(everyone, "7d")).total == 2
    month = await insights.insights(everyone, "30d")
    assert month.total == 3 and month.window == "30d"
    assert {q.query for q in month.top_queries} == {"last hour", "two days ago", "ten days ago"}


async def test_a_viewer_counts_only_the_searches_its_scope_covers(log_store: QueryLogStore) -> None:
    log_store.append(
        [
            searched("a only", sources=["team-a/docs"], origin="mcp"),
            searched("a only", sources=["team-a/docs"], results=0),
            searched("b only", sources=["team-b/docs"]),
            searched("unrestricted", sources=None),
        ]
    )
    insights = service(log_store)
    seen = await insights.insights(caller("team-a/docs"), "24h")
    assert seen.total == 2 and seen.by_origin == {"api": 1, "mcp": 1}
    assert [q.query for q in seen.top_queries] == ["a only"] and [q.query for q in seen.zero_result] == ["a only"]
    assert (await insights.insights(caller(), "24h")).total == 0  # a scope of nothing sees nothing


async def test_switched_off_insights_say_so() -> None:
    switched_off = QueryLog(None, QueryLogSettings(), metrics=Metrics())
    off = InsightsService(query_log=switched_off, catalog=_NoCatalog(), low_score=0.4)  # type: ignore[arg-type]
    found = await off.insights(caller("*"), "7d")
    assert found == replace(Insights("7d", 0, [], [], [], {}, None, None, True), enabled=False)
