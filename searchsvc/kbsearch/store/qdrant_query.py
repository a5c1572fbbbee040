"""The server store's searches: one lane, or the lanes fused by the engine, ties at the cut broken by id."""

from __future__ import annotations

from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from kbsearch.models import Fusion, SearchHit
from kbsearch.store import payloads as pl
from kbsearch.store.base import DENSE_VECTOR, SPARSE_VECTOR
from kbsearch.store.points import RankedQuery
from kbsearch.store.qdrant_common import to_filter

__all__ = ["TIE_SLACK", "query_points"]

# Points fetched past a cut so that ties at it are broken by id (see _top).
TIE_SLACK = 16


def query_points(client: QdrantClient, collection: str, search: RankedQuery) -> list[SearchHit]:
    """The engine's hits: one lane, or both fused by the engine (see VectorStore.search)."""
    mode, dense, sparse, fusion = search.mode, search.dense, search.sparse, search.fusion
    limit, candidates = search.limit, search.candidates
    where = to_filter(search.conditions)
    stages: list[tuple[Any, str, float]] = []
    if dense is not None and mode in ("hybrid", "dense"):
        stages.append((list(dense), DENSE_VECTOR, fusion.dense_weight))
    # A query of stopwords only has no terms: it can match nothing, so it is not sent.
    if sparse is not None and sparse.indices and mode in ("hybrid", "keyword"):
        vector = qm.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
        stages.append((vector, SPARSE_VECTOR, fusion.keyword_weight))
    if mode == "dense" and not stages:
        raise ValueError("dense search needs a dense query vector")
    if not stages:
        return []
    # With a query vector, each hit's cosine to it comes back too (see EdgeStore._query).
    wanted = [DENSE_VECTOR] if dense is not None else False
    # TIE_SLACK more than asked, so that _top can break ties at the cut by id.
    common: dict[str, Any] = {
        "query_filter": where,
        "limit": limit + TIE_SLACK,
        "with_payload": True,
        "with_vectors": wanted,
    }
    if mode == "hybrid":
        prefetch = [qm.Prefetch(query=q, using=using, filter=where, limit=candidates) for q, using, _ in stages]
        lane_size = candidates
        if fusion.full_scores and len(stages) > 1:
            # Each lane rescores the union of both lanes' candidates, chosen here (ties by id).
            union = _candidate_union(client, collection, stages, where, candidates)
            if not union:
                return []
            pinned = qm.Filter(must=[*(where.must if where else []), qm.HasIdCondition(has_id=union)])  # type: ignore[misc]
            lane_size = len(union)
            prefetch = [qm.Prefetch(query=q, using=using, filter=pinned, limit=lane_size) for q, using, _ in stages]
        weights = [w for _, _, w in stages]
        fused: Any
        if fusion.method == "dbsf" and any(w != 1.0 for w in weights):
            # Weighted DBSF: each lane normalised alone (a DBSF of one prefetch), then a weighted sum.
            dbsf = qm.FusionQuery(fusion=qm.Fusion.DBSF)
            prefetch = [qm.Prefetch(prefetch=[p], query=dbsf, limit=lane_size) for p in prefetch]
            fused = _weighted_sum(weights)
        else:
            fused = _fusion(fusion, weights)
        response = client.query_points(collection, prefetch=prefetch, query=fused, **common)
    else:
        query, using, _ = stages[0]
        response = client.query_points(collection, query=query, using=using, **common)
    return [
        pl.hit_from_payload(p.id, p.score, p.payload or {}, _similarity(dense, p.vector))
        for p in _top(response.points, limit)
    ]


def _candidate_union(
    client: QdrantClient, collection: str, stages: list[tuple[Any, str, float]], where: qm.Filter | None, n: int
) -> list[Any]:
    """Each lane's top `n` (ties broken by id, as _top does), in one batch of lane queries."""
    requests = [
        qm.QueryRequest(query=q, using=using, filter=where, limit=n + TIE_SLACK, with_payload=False)
        for q, using, _ in stages
    ]
    answers = client.query_batch_points(collection, requests=requests)
    return sorted({p.id for answer in answers for p in _top(answer.points, n)}, key=str)


def _top(points: list[qm.ScoredPoint], n: int) -> list[qm.ScoredPoint]:
    """The engine's first `n` (best first), with the points tied at the cut chosen by id.

    Which of several equal scores an engine keeps at a cut depends on where the points sit
    (segments, shards, which replica answers): Qdrant's local mode and a server differ, and so do
    runs on a cluster. By id, every engine and replica keeps the same ones. Above the cut the
    engine's order stays (its fusion ranks a lane in that order). Callers fetch TIE_SLACK more
    than `n`: a tie reaching further past the cut than that stays the engine's pick.
    """
    if len(points) <= n or n <= 0:
        return points[: max(n, 0)]
    edge = points[n - 1].score
    above = [p for p in points if p.score > edge]
    tied = sorted((p for p in points if p.score == edge), key=lambda p: str(p.id))[: n - len(above)]
    kept = {str(p.id) for p in tied}
    return [p for p in points if p.score > edge or str(p.id) in kept]


def _similarity(dense: list[float] | None, vectors: Any) -> float | None:
    if dense is None or not isinstance(vectors, dict) or not isinstance(vectors.get(DENSE_VECTOR), list):
        return None
    return pl.cosine(dense, vectors[DENSE_VECTOR])


def _fusion(fusion: Fusion, weights: list[float]) -> qm.FusionQuery | qm.RrfQuery:
    """The engine's fusion of the lanes' prefetches; `weights` follows the prefetch order."""
    if fusion.method == "dbsf":
        return qm.FusionQuery(fusion=qm.Fusion.DBSF)
    return qm.RrfQuery(rrf=qm.Rrf(k=fusion.rrf_k, weights=weights))


def _weighted_sum(weights: list[float]) -> qm.FormulaQuery:
    """sum(weight_i * score of prefetch i); a point a lane did not return scores 0 there."""
    terms: list[qm.Expression] = [qm.MultExpression(mult=[w, f"$score[{i}]"]) for i, w in enumerate(weights)]
    return qm.FormulaQuery(
        formula=qm.SumExpression(sum=terms), defaults={f"$score[{i}]": 0.0 for i in range(len(weights))}
    )
