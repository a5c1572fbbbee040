"""POST /api/v1/reindex: rebuild the collection in the background with the settings now configured."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from kbsearch.api.auth import WriterDep
from kbsearch.deps import RebuildDep
from kbsearch.errors import ForbiddenError
from kbsearch.schemas import ErrorResponse, ReindexRequest

router = APIRouter(prefix="/api/v1", tags=["system"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (401, 403, 409, 503)}


@router.post("/reindex", status_code=202, responses=ERRORS)
async def reindex(
    service: RebuildDep,
    caller: WriterDep,
    body: ReindexRequest | None = None,
) -> JSONResponse:
    """Rebuild the whole collection in the background with the configured embedder, keyword encoder and
    chunker; searches go on meanwhile. Answers at once with the rebuild's status (also under `rebuild`
    in /api/v1/status).

    `forceSwap: true` swaps in a rebuilt collection that its self-check refused. Only a writer whose
    scope is every source may do either.
    """
    if not caller.scope.unrestricted:
        raise ForbiddenError(f"{caller.name!r} may write only some sources; a rebuild touches every one")
    if body is not None and body.forceSwap:
        service.force_swap()
    elif not service.running:
        service.start("requested by a writer (POST /api/v1/reindex)")
    return JSONResponse(service.status(), status_code=202)
