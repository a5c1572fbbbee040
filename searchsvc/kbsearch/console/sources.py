"""The console's one write: removing a source that never synced a document (a sync that failed on a typo).

The same DocumentService.delete_source REST's DELETE /api/v1/sources/{id} calls, so the same writer
check: the session's token must be a writer's whose scope covers the source. A source with documents
is refused here (409); deleting those is a deliberate REST call, not a button.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from kbsearch.console.pages import Reader
from kbsearch.console.rendering import render
from kbsearch.console.session import CSRF_FIELD, check_csrf
from kbsearch.deps import DocumentReadsDep, DocumentsDep
from kbsearch.errors import ServiceError

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.post("/sources/remove")
async def remove_source(
    request: Request,
    caller: Reader,
    documents: DocumentsDep,
    reads: DocumentReadsDep,
    source: Annotated[str, Form(min_length=1, max_length=512)],
    csrf_token: Annotated[str, Form(alias=CSRF_FIELD, max_length=128)] = "",
) -> Response:
    check_csrf(request, csrf_token)
    try:
        status, _ = await reads.source_status(source, caller)
        if status.documents or status.chunks:
            return _refused(
                request,
                409,
                f"{source} has {status.documents} documents: the console removes only a source that never synced "
                f"one. Delete it with DELETE /api/v1/sources/{{sourceIdentifier}} and a writer token.",
            )
        await documents.delete_source(source, caller)
    except ServiceError as exc:
        return _refused(request, exc.status_code, f"{source} was not removed: {exc.message}")
    return RedirectResponse("/ui/sources", status_code=303)


def _refused(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", {"title": "Source not removed", "message": message}, status)
