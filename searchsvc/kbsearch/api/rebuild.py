"""POST /api/v1/reindex: rebuild the collection in the background with the settings now configured."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from kbsearch.api.auth import WriterDep
from kbsearch.deps import RebuildDep
from kbsearch.errors import ConflictError, ForbiddenError
from kbsearch.schemas.system import ErrorResponse, ReindexRequest

router = APIRouter(prefix="/api/v1", tags=["system"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (401, 403, 409, 503)}


@router.post("/reindex", status_code=202, responses=ERRORS)
async def reindex(
    service: RebuildDep,
    caller: WriterDep,
    body: ReindexRequest | None = None,
) -> JSONResponse:
    """Rebuild the whole collection in the background with the configured embedder, keyword encoder and
    chunker; searches go on meanwhile. Answers 202 with the rebuild's status (also under `rebuild` in
    /api/v1/status) only when a rebuild starts: 409 `REBUILD_REFUSED_PENDING` while a rebuilt
    collection its self-check refused waits for `forceSwap`, 409 `REBUILD_RUNNING` while one is under way.

    `forceSwap: true` swaps in a rebuilt collection that its self-check refused (409 `NOTHING_TO_SWAP`
    when none waits). Only a writer whose scope is every source may do either.
    """
    if not caller.scope.unrestricted:
        raise ForbiddenError(f"{caller.name!r} may write only some sources; a rebuild touches every one")
    if body is not None and body.force_swap:
        service.force_swap()
    elif not service.request("requested by a writer (POST /api/v1/reindex)"):
        status = service.status()
        raise ConflictError(
            f"a rebuild is under way ({status['state']}); it is not started twice. GET /api/v1/status follows it.",
            code="REBUILD_RUNNING",
            details={"state": status["state"], "documents": status["documents"]},
        )
    return JSONResponse(service.status(), status_code=202)
