"""The reranking stage: one place, after first-stage ranking, that every face's search passes through.

It reorders the first `candidates` pages by a second-stage scorer: a local cross-encoder, a remote
`/rerank` endpoint (kbsearch.rerank), or a listwise ranking by the configured chat model
(`ListwiseChat`, here because only kbsearch.llm speaks to it). The stage has a time budget: on a
timeout or an error the first-stage order is served as it was, and the metrics count why.

Only the order changes. Each hit keeps its calibrated relevance (the service's own embedder's
similarity through the logistic curve, services/search/ranking.py), so "nothing relevant" and the
thresholds mean the same with or without a reranker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Sequence

from kbsearch import tracing
from kbsearch.errors import LLMTimeoutError, LLMUnavailableError
from kbsearch.llm.chat import ChatClient, ChatMessage, TextPiece
from kbsearch.metrics import Metrics
from kbsearch.models import SearchHit
from kbsearch.rerank.base import Reranker, RerankError

__all__ = ["ListwiseChat", "RerankStage", "passage_of"]

log = logging.getLogger(__name__)

# What the scorer reads of a hit: its page title and heading path say what the passage is about.
MAX_PASSAGE_CHARS = 2_000


def passage_of(hit: SearchHit) -> str:
    trail = " > ".join(h for h in [hit.title or "", *hit.headings] if h)
    text = f"{trail}\n{hit.content}" if trail else hit.content
    return text[:MAX_PASSAGE_CHARS]


class RerankStage:
    def __init__(self, reranker: Reranker, *, metrics: Metrics, candidates: int, budget_s: float) -> None:
        self.reranker = reranker
        self.metrics = metrics
        self.candidates = candidates
        self.budget_s = budget_s

    async def rerank(self, query: str, hits: list[SearchHit]) -> list[SearchHit]:
        """`hits` with the first `candidates` reordered by the scorer, or unchanged if it fails in time."""
        head, tail = hits[: self.candidates], hits[self.candidates :]
        if len(head) < 2:
            return hits
        started = time.perf_counter()
        outcome = "ok"
        try:
            async with asyncio.timeout(self.budget_s):
                with tracing.rerank(self.reranker.name, len(head)):
                    scores = await self.reranker.scores(query, [passage_of(hit) for hit in head])
            if len(scores) != len(head):
                raise RerankError(f"{len(scores)} scores for {len(head)} passages")
        except TimeoutError:
            outcome = "timeout"
        except RerankError as exc:
            outcome = "error"
            log.warning("rerank failed; the first-stage order is served", extra={"reason": str(exc)[:200]})
        finally:
            self.metrics.rerank_seconds.labels(self.reranker.name).observe(time.perf_counter() - started)
        self.metrics.reranks.labels(self.reranker.name, outcome).inc()
        if outcome != "ok":
            return hits
        # A stable sort: equal scores keep the first stage's order.
        order = sorted(range(len(head)), key=lambda i: -scores[i])
        return [head[i] for i in order] + tail

    async def close(self) -> None:
        await self.reranker.close()


_NUMBERS = re.compile(r"\d{1,4}")


class ListwiseChat:
    """A listwise rerank by the chat model: it reads the numbered passages and lists them best first.

    Passages it does not list keep their first-stage order after the listed ones. The answer is
    read as a JSON list of numbers, or failing that as the numbers in its text, in order.
    """

    name = "llm"
    SYSTEM = (
        "You rank passages by how well they answer a search query. Reply with only a JSON array of "
        "the passage numbers, the most relevant first, for example [3, 1, 2]."
    )

    def __init__(self, chat: ChatClient, *, timeout_s: float) -> None:
        self.chat = chat
        self.timeout_s = timeout_s

    async def scores(self, query: str, passages: Sequence[str]) -> list[float]:
        numbered = "\n\n".join(f"[{i + 1}] {p[:600]}" for i, p in enumerate(passages))
        messages = [
            ChatMessage("system", self.SYSTEM),
            ChatMessage("user", f"Query: {query}\n\nPassages:\n\n{numbered}"),
        ]
        try:
            turn = self.chat.turn(messages, (), deadline=time.monotonic() + self.timeout_s)
            text = [piece.text async for piece in turn if isinstance(piece, TextPiece)]
        except (LLMUnavailableError, LLMTimeoutError) as exc:
            raise RerankError(f"the chat model failed: {exc}") from None
        return _listwise_scores("".join(text), len(passages))

    async def close(self) -> None:
        pass  # the chat client is the ask service's too; the context closes it


def _listwise_scores(answer: str, count: int) -> list[float]:
    try:
        parsed = json.loads(answer.strip())
        numbers = (
            [n for n in parsed if isinstance(n, int) and not isinstance(n, bool)] if isinstance(parsed, list) else []
        )
    except ValueError:
        numbers = [int(n) for n in _NUMBERS.findall(answer[:10_000])]
    order: list[int] = []
    for n in numbers:
        if 1 <= n <= count and n - 1 not in order:
            order.append(n - 1)
    if not order:
        raise RerankError("the chat model's ranking names no passage")
    scores = [-math.inf] * count
    for rank, index in enumerate(order):
        scores[index] = float(count - rank)
    return scores
