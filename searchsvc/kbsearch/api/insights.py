"""GET /api/v1/insights: the query log, aggregated over a window, within the caller's scope."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from kbsearch.api.auth import ReaderDep
from kbsearch.deps import InsightsDep
from kbsearch.schemas.system import ErrorResponse, InsightsResponse, QueryCountInfo, QueryScoreInfo

router = APIRouter(
    prefix="/api/v1", tags=["insights"], responses={code: {"model": ErrorResponse} for code in (401, 422, 503)}
)


@router.get("/insights")
async def insights(
    service: InsightsDep,
    caller: ReaderDep,
    window: Annotated[Literal["24h", "7d", "30d"], Query()] = "24h",
) -> InsightsResponse:
    """Top, zero-result and low-score queries, searches by origin and latency p50/p95 over the window.

    Only the searches the caller's scope covers are counted (see docs/user/sync-status-and-insights.md).
    """
    found = await service.insights(caller, window)
    return InsightsResponse(
        window=found.window,
        enabled=found.enabled,
        total=found.total,
        topQueries=[QueryCountInfo(query=c.query, count=c.count, lastAt=c.last_at) for c in found.top_queries],
        zeroResult=[QueryCountInfo(query=c.query, count=c.count, lastAt=c.last_at) for c in found.zero_result],
        lowScore=[QueryScoreInfo(query=s.query, count=s.count, topScore=s.top_score) for s in found.low_score],
        byOrigin=found.by_origin,
        latencyP50Ms=found.latency_p50_ms,
        latencyP95Ms=found.latency_p95_ms,
    )
