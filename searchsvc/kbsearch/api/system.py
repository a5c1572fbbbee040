"""Liveness, readiness and the service's status. Metrics are served on a port of their own (kbsearch.metrics)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kbsearch import __version__
from kbsearch.aio.runtime import in_thread, store_call
from kbsearch.api.auth import ReaderDep
from kbsearch.deps import ContextDep, context, is_ready
from kbsearch.deps import authenticator as app_authenticator
from kbsearch.deps import settings as app_settings
from kbsearch.presenters import error_response
from kbsearch.store.health import DATA_DIR_GONE

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Store open and embedder loaded; says why when the store refuses writes.

    A full disk or a failing flush leaves reads working, so the pod stays in its Service
    (200, status "degraded", the cause under "writes"); failing readiness there would cut every
    read of a single replica too. A vanished data directory is not ready (503): nothing
    written can be kept until a restart. Nor is a Qdrant server that cannot answer a count of
    the collection within SEARCHSVC_QDRANT_READY_TIMEOUT_S (every shard must have a live copy).
    """
    if not is_ready(request):
        return error_response(503, "NOT_READY", "store or embedder not loaded yet")
    store = context(request).store
    lost = await in_thread(store.read_problem)  # a store server that cannot serve (bounded in time)
    if lost is not None:
        retry = {"Retry-After": str(lost.details["retryAfterSeconds"])}
        return error_response(503, lost.code, lost.message, lost.details, headers=retry)
    problem = await in_thread(store.write_problem)
    if problem is None:
        return JSONResponse({"status": "ready"})
    if problem.details.get("cause") == DATA_DIR_GONE:
        return error_response(503, problem.code, problem.message, problem.details)
    writes = {"code": problem.code, "message": problem.message, "details": problem.details}
    return JSONResponse({"status": "degraded", "writes": writes})


@router.get("/api/v1/status")
async def status(caller: ReaderDep, state: ContextDep, request: Request) -> dict[str, Any]:
    """Version, store, embedder and chunker settings, with live counts of what the caller may see.

    A rebuild's progress counts and message speak of every source's documents (its self-check, of
    the most asked queries): only a caller that sees every source gets them; others get its state.
    """
    settings = app_settings(request)
    rebuild = state.rebuild.status()
    if not caller.scope.unrestricted:
        rebuild = {"state": rebuild["state"]}
    documents, chunks = await state.document_reads.count(caller)
    epoch = await store_call(state.store.collection_epoch)
    min_chars, max_chars = settings.chunk_range
    return {
        "version": __version__,
        # Changes only when the collection is re-created: a client that remembers it sees a reset.
        "collectionEpoch": epoch,
        "store": {
            "backend": state.store.backend,
            "collection": state.store.collection,
            "documents": documents,
            "chunks": chunks,
        },
        "embedder": {
            "provider": state.embedder.provider,
            "model": state.embedder.model,
            "dimensions": state.embedder.dimensions,
        },
        "sparse": {"encoder": state.sparse.name},
        "chunker": {
            "minChars": min_chars,
            "maxChars": max_chars,
            "overlapChars": settings.chunking.chunk_overlap_chars,
            "fingerprint": state.chunker.fingerprint,
        },
        "search": {
            "fusion": settings.search.fusion,
            "rrfK": settings.search.rrf_k,
            "denseWeight": settings.search.fusion_dense_weight,
            "keywordWeight": settings.search.fusion_keyword_weight,
            "fullScores": settings.search.fusion_full_scores,
            "candidates": settings.search.search_candidates,
        },
        "rebuild": rebuild,
        "auth": {
            "writeTokenRequired": app_authenticator(request).writes_need_token,
            "readTokenRequired": settings.auth.read_token is not None or settings.auth.authenticates,
            "mode": settings.auth.auth_mode,
            "caller": caller.name,
        },
    }
