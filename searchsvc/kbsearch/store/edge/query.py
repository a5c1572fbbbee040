"""The engine's query for a search: lanes (dense, keyword), their fusion, and the hits it returns."""

from __future__ import annotations

from typing import Any

import qdrant_edge as qe

from kbsearch.models import Fusion, SearchHit
from kbsearch.store import payloads as pl
from kbsearch.store.base import DENSE_VECTOR, SPARSE_VECTOR
from kbsearch.store.edge.filters import to_filter
from kbsearch.store.points import RankedQuery

__all__ = ["dense_of", "hits", "query_request"]


def query_request(search: RankedQuery) -> qe.QueryRequest | None:
    """The engine's request for one search, or None when it can match nothing (no lane has a query)."""
    mode, dense, sparse, fusion = search.mode, search.dense, search.sparse, search.fusion
    limit, candidates = search.limit, search.candidates
    scope = to_filter(search.conditions)
    # With a query vector, each hit's cosine to it comes back too: an absolute relevance signal
    # that fusion's per-query normalised scores are not.
    want_vectors: Any = [DENSE_VECTOR] if dense is not None else False
    dense_query = qe.Query.Nearest(list(dense), using=DENSE_VECTOR) if dense is not None else None
    # A query of stopwords only has no terms: it can match nothing, so it is not sent.
    sparse_query = (
        qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE_VECTOR)
        if sparse is not None and sparse.indices
        else None
    )
    if mode == "hybrid":
        lanes = [(q, w) for q, w in ((dense_query, fusion.dense_weight), (sparse_query, fusion.keyword_weight)) if q]
        if not lanes:
            return None
        prefetches = [qe.Prefetch(candidates, query=q, filter=scope) for q, _ in lanes]
        lane_size = candidates
        if fusion.full_scores and len(lanes) > 1:
            # Each lane rescores the union of both lanes' candidates.
            union, lane_size = prefetches, 2 * candidates
            prefetches = [qe.Prefetch(lane_size, prefetches=union, query=q, filter=scope) for q, _ in lanes]
        weights = [w for _, w in lanes]
        query: Any
        if fusion.method == "dbsf" and any(w != 1.0 for w in weights):
            # Weighted DBSF: each lane normalised alone (a DBSF of one prefetch), then a weighted sum.
            normalise = _fusion(Fusion("dbsf"), [])
            prefetches = [qe.Prefetch(lane_size, prefetches=[p], query=normalise) for p in prefetches]
            query = _weighted_sum(weights)
        else:
            query = _fusion(fusion, weights)
        request = qe.QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=query,
            filter=scope,
            with_payload=True,
            with_vector=want_vectors,
        )
    else:
        query = dense_query if mode == "dense" else sparse_query
        if query is None:
            if mode == "dense":
                raise ValueError("dense search needs a dense query vector")
            return None
        request = qe.QueryRequest(limit=limit, query=query, filter=scope, with_payload=True, with_vector=want_vectors)
    return request


def hits(points: list[Any], dense: list[float] | None) -> list[SearchHit]:
    """The engine's scored points as hits, each with its cosine to the dense query when there was one."""
    return [pl.hit_from_payload(p.id, p.score, p.payload or {}, _similarity(dense, p.vector)) for p in points]


def _fusion(fusion: Fusion, weights: list[float]) -> Any:
    """The engine's fusion of the lanes' prefetches; `weights` follows the prefetch order."""
    if fusion.method == "dbsf":
        return qe.Fusion.Dbsf()
    return qe.Fusion.Rrf(k=fusion.rrf_k, weights=weights)


def _weighted_sum(weights: list[float]) -> qe.Formula:
    """sum(weight_i * score of prefetch i); a point a lane did not return scores 0 there."""
    terms = [
        qe.Expression.Mult([qe.Expression.Constant(w), qe.Expression.Variable(f"$score[{i}]")])
        for i, w in enumerate(weights)
    ]
    return qe.Formula(qe.Expression.Sum(terms), defaults={f"$score[{i}]": 0.0 for i in range(len(weights))})


def _similarity(dense: list[float] | None, vectors: Any) -> float | None:
    if dense is None or not isinstance(vectors, dict) or DENSE_VECTOR not in vectors:
        return None
    return pl.cosine(dense, dense_of(vectors))


def dense_of(vectors: dict[str, Any]) -> list[float]:
    return [float(x) for x in vectors[DENSE_VECTOR]]
