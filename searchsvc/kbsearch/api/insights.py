"""GET /api/v1/insights: the query log, aggregated over a window, within the caller's scope."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from kbsearch.api.auth import ReaderDep
from kbsearch.deps import InsightsDep
from kbsearch.schemas.system import ErrorResponse, InsightsResponse

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
    # The aggregate's fields are the body's, by the same names.
    return InsightsResponse.model_validate(await service.insights(caller, window), from_attributes=True)
