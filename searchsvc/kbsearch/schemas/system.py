"""The bodies of no one resource: the error body, a reindex, the query insights."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool

from kbsearch.schemas.fields import Body


class ErrorDetail(Body):
    code: str
    message: str
    details: dict[str, object] = Field(default_factory=dict)


class ErrorResponse(Body):
    error: ErrorDetail


class ReindexRequest(Body):
    force_swap: StrictBool = False


class QueryCountInfo(Body):
    query: str
    count: int
    last_at: str


class QueryScoreInfo(Body):
    query: str
    count: int
    top_score: float


class InsightsResponse(Body):
    """GET /api/v1/insights: what was searched in the window, as far as the caller's scope reaches."""

    window: Literal["24h", "7d", "30d"]
    enabled: bool  # false: the query log is switched off (SEARCHSVC_QUERY_LOG=off)
    total: int
    top_queries: list[QueryCountInfo]
    zero_result: list[QueryCountInfo]
    low_score: list[QueryScoreInfo]
    by_origin: dict[str, int]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
