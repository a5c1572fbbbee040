"""A remote rerank endpoint in the common `/rerank` shape.

Two dialects cover the servers people run:
- `cohere` (Cohere, Jina, vLLM, Infinity): `{"model", "query", "documents", "top_n"}` answered by
  `{"results": [{"index", "relevance_score"}, ...]}`;
- `tei` (Hugging Face Text Embeddings Inference): `{"query", "texts"}` answered by
  `[{"index", "score"}, ...]`.
Either answer is read whichever dialect was sent. The key goes in the Authorization header only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import httpx

from kbsearch.rerank.base import RerankError

__all__ = ["RemoteReranker"]

# A rerank answer is a few numbers per passage; anything far larger is not one.
MAX_RESPONSE_BYTES = 1_048_576


class RemoteReranker:
    name = "remote"

    def __init__(
        self,
        url: str,
        *,
        protocol: Literal["cohere", "tei"] = "cohere",
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self.protocol = protocol
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout_s, follow_redirects=False)

    def _body(self, query: str, passages: list[str]) -> dict[str, Any]:
        if self.protocol == "tei":
            return {"query": query, "texts": passages, "truncate": True}
        body: dict[str, Any] = {"query": query, "documents": passages, "top_n": len(passages)}
        if self.model:
            body["model"] = self.model
        return body

    async def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        texts = list(passages)
        try:
            response = await self._client.post(self.url, json=self._body(query, texts))
        except httpx.HTTPError as exc:
            raise RerankError(f"the rerank endpoint is unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise RerankError(f"the rerank endpoint answered HTTP {response.status_code}")
        if len(response.content) > MAX_RESPONSE_BYTES:
            raise RerankError("the rerank endpoint's answer is too large")
        try:
            payload = response.json()
        except ValueError:
            raise RerankError("the rerank endpoint's answer is not JSON") from None
        return _scores_of(payload, len(texts))

    async def close(self) -> None:
        await self._client.aclose()


def _scores_of(payload: Any, count: int) -> list[float]:
    """One score per passage from either dialect's answer; passages it left out rank last."""
    rows = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(rows, list):
        raise RerankError("the rerank answer has no list of results")
    scores = [-math.inf] * count
    for row in rows:
        if not isinstance(row, dict):
            raise RerankError("a rerank result is not an object")
        index, score = row.get("index"), row.get("relevance_score", row.get("score"))
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankError(f"a rerank result names no passage of the {count} sent")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise RerankError("a rerank result's score is not a finite number")
        scores[index] = float(score)
    if all(s == -math.inf for s in scores):
        raise RerankError("the rerank answer scored no passage")
    return scores
