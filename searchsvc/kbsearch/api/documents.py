"""Routes for document writes, deletes and listings."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from kbsearch.api.auth import ReaderDep, WriterDep
from kbsearch.api.params import SOURCE_PATH, SourceIdPath, SourceIdQuery, UriPrefixQuery, UriQuery
from kbsearch.deps import DocumentReadsDep, DocumentsDep, SourcesDep, SyncStatusDep
from kbsearch.errors import NotFoundError
from kbsearch.presenters import put_response, source_documents, source_list, sync_infos, text_page
from kbsearch.schemas.documents import (
    DeleteDocumentResponse,
    DeleteSourceResponse,
    DocumentInfo,
    DocumentList,
    DocumentText,
    PutDocumentRequest,
    PutDocumentResponse,
    SourceDocumentList,
)
from kbsearch.schemas.sources import (
    SourceList,
    SourceStatusInfo,
    SyncStatusRequest,
    SyncStatusResponse,
)
from kbsearch.schemas.system import ErrorResponse
from kbsearch.services.documents.reads import MAX_LIST_LIMIT

ERROR_STATUSES = (401, 403, 409, 413, 422, 429, 503)
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in ERROR_STATUSES}
router = APIRouter(prefix="/api/v1", responses=ERRORS)


@router.put("/documents", tags=["documents"])
async def put_document(body: PutDocumentRequest, service: DocumentsDep, caller: WriterDep) -> PutDocumentResponse:
    """Create or replace one document; identical content and metadata is a no-op."""
    return put_response(await service.put(body.to_command(), caller))


@router.delete("/documents", tags=["documents"])
async def delete_document(
    service: DocumentsDep,
    caller: WriterDep,
    uri: UriQuery,
    sourceIdentifier: SourceIdQuery = None,
) -> DeleteDocumentResponse:
    """Delete one document and all its chunks; deleting an absent document deletes 0.

    With `sourceIdentifier`, the document is deleted only if it belongs to that source. A
    document of a source the caller may not see is answered like an absent one.
    """
    return DeleteDocumentResponse(uri=uri, chunks_deleted=await service.delete(uri, sourceIdentifier, caller))


@router.get("/documents", tags=["documents"])
async def list_documents(
    service: DocumentReadsDep,
    caller: ReaderDep,
    sourceIdentifier: SourceIdQuery = None,
    uriPrefix: UriPrefixQuery = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> DocumentList:
    """Every document, in a stable order, one page at a time."""
    records, next_cursor = await service.list(
        source_identifier=sourceIdentifier, uri_prefix=uriPrefix, limit=limit, cursor=cursor, caller=caller
    )
    documents = [DocumentInfo.model_validate(r, from_attributes=True) for r in records]
    return DocumentList(documents=documents, next_cursor=next_cursor)


# Pages of document text: large enough for most documents in one call, small enough to bound a response.
MAX_TEXT_CHARS = 1_000_000


@router.get("/documents/text", tags=["documents"], responses={404: {"model": ErrorResponse}})
async def document_text(
    service: DocumentReadsDep,
    caller: ReaderDep,
    uri: UriQuery,
    start: Annotated[int, Query(ge=0, description="Character offset to start at.")] = 0,
    maxChars: Annotated[int, Query(ge=1, le=MAX_TEXT_CHARS, description="Characters to return.")] = 100_000,
) -> DocumentText:
    """One page of a document's text as written: headings, code and lists in place, front matter aside.

    Read on with `start=nextStart` until `nextStart` is null. A document out of the caller's scope is
    answered like an absent one (404).
    """
    page = await service.page(uri, caller, start, maxChars)
    if page is None:
        raise NotFoundError(f"no document {uri!r}", code="DOCUMENT_NOT_FOUND")
    return text_page(page)


@router.put(f"/sources/{SOURCE_PATH}/status", tags=["sources"])
async def put_sync_status(
    sourceIdentifier: SourceIdPath, body: SyncStatusRequest, service: SyncStatusDep, caller: WriterDep
) -> SyncStatusResponse:
    """Report the outcome of one sync of a source: commit, phase, counts, failed and skipped files, times;
    or, with `progress` alone, how far the sync running now is (the sources page shows it until the outcome).

    Needs write rights on the source, like its documents. The last report is kept (a report with
    an earlier `syncedAt` than the stored one is answered `stored: false` and dropped) and shown
    as `sync` by GET /api/v1/sources. A source whose every file failed is listed all the same.
    """
    status, stored = await service.report(body.to_command(sourceIdentifier), caller)
    sync, progress = sync_infos(status)
    return SyncStatusResponse(source_identifier=sourceIdentifier, stored=stored, sync=sync, progress=progress)


@router.delete(f"/sources/{SOURCE_PATH}", tags=["sources"])
async def delete_source(
    sourceIdentifier: SourceIdPath, service: DocumentsDep, caller: WriterDep
) -> DeleteSourceResponse:
    """Delete every document of one source, however many chunks it has, and its sync status."""
    documents, chunks = await service.delete_source(sourceIdentifier, caller)
    return DeleteSourceResponse(source_identifier=sourceIdentifier, documents_deleted=documents, chunks_deleted=chunks)


# Before GET /sources/{id}: its path pattern takes slashes, so it would match .../documents too.
@router.get(f"/sources/{SOURCE_PATH}/documents", tags=["sources"], responses={404: {"model": ErrorResponse}})
async def list_source_documents(
    sourceIdentifier: SourceIdPath,
    service: DocumentReadsDep,
    caller: ReaderDep,
    prefix: UriPrefixQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> SourceDocumentList:
    """One page of a source's documents: uri, title, last write and documentation version, in a stable order.

    Read on with `cursor=nextCursor` until it is null. An unknown source and one the caller may not see
    both answer 404 SOURCE_NOT_FOUND with the same body (GET /api/v1/documents answers them an empty list).
    """
    page = await service.source_documents(sourceIdentifier, caller, prefix=prefix, limit=limit, cursor=cursor)
    return source_documents(page)


@router.get(f"/sources/{SOURCE_PATH}", tags=["sources"])
async def source_status(
    sourceIdentifier: SourceIdPath, service: DocumentReadsDep, caller: ReaderDep
) -> SourceStatusInfo:
    """One source's document, chunk and incomplete-document counts, with the collection epoch.

    Engine counts filtered on the source, never a scan of the collection. A source with no
    documents answers zeros, not 404: zero is what a reset collection looks like. A source the
    caller may not see answers the same zeros.
    """
    status, epoch = await service.source_status(sourceIdentifier, caller)
    sync, progress = sync_infos(status.sync)
    return SourceStatusInfo(
        source_identifier=status.source_identifier,
        documents=status.documents,
        chunks=status.chunks,
        incomplete_documents=status.incomplete_documents,
        last_ingested_at=status.last_ingested_at,
        collection_epoch=epoch,
        sync=sync,
        progress=progress,
    )


@router.get("/sources", tags=["sources"])
async def list_sources(
    service: SourcesDep,
    caller: ReaderDep,
    query: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=1000,
            description="A name and a task ('cert-manager 1.16 renew a certificate'): only the sources that fit, best "
            "first, at most 10, each with its `match`.",
        ),
    ] = None,
) -> SourceList:
    """Every source the caller may see, with its document and chunk counts, its last reported sync and the
    documentation versions it holds; with `query`, the sources whose name or documents fit the query."""
    return await source_list(service, caller, query)
