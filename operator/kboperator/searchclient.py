"""The operator's only HTTP client: the search service's v1 API, with retries and honest errors.

Every response's status is checked. 429, 5xx and network errors are retried with exponential
backoff and full jitter (a Retry-After is honoured, capped); when retries run out the call raises
ServiceUnavailableError. 401/403 raise ServiceAuthError; a 409, 413 or 422 to a document write
or delete raises DocumentRejectedError (that document can never succeed as it is); any other
4xx raises ServiceRejectedError with the service's error code and message. The token is sent
only in the Authorization header and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx
import tenacity
from opentelemetry import propagate

from kboperator import __version__
from kboperator.errors import DocumentRejectedError, ServiceAuthError, ServiceRejectedError, ServiceUnavailableError
from kboperator.models import SyncReport

log = logging.getLogger(__name__)

_RETRY_AFTER_CAP_S = 300.0  # a hostile or confused Retry-After must not park a sync for hours
# What the service answers about one document's own content, URI or metadata (too large,
# another source's URI, invalid): sending it again cannot help.
_DOCUMENT_REJECTIONS = frozenset({409, 413, 422})
# What a service without GET /api/v1/sources/{id} answers (405: only DELETE has that path).
_NO_SUCH_ENDPOINT = frozenset({404, 405})


@dataclass(frozen=True)
class PutResult:
    """The service's answer to one PUT: status is created, updated or unchanged."""

    status: str
    checksum: str
    chunks: int


@dataclass(frozen=True)
class ListedDocument:
    """One document as the service lists it."""

    uri: str
    checksum: str
    chunks: int
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class SourceStats:
    """GET /api/v1/sources/{id}: one source's counts, and the collection they live in."""

    source_id: str
    documents: int
    chunks: int
    incomplete: int  # documents whose last write was interrupted
    last_ingested_at: str | None
    epoch: str  # changes when the collection is re-created


@dataclass(frozen=True)
class FoundPage:
    """One result of POST /api/v1/search (one per page: results are collapsed by document)."""

    uri: str
    path: str | None  # the document's `path` metadata: its path in the repository


class SearchClient:
    """Async client for one search service. Use `async with`, or call `aclose()`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 60.0,
        max_attempts: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        page_size: int = 1000,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        headers = {"User-Agent": f"kboperator/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            transport=transport,
            timeout=timeout,
            event_hooks={"request": [_traceparent]},
        )
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"SearchClient({self.base_url!r})"

    async def __aenter__(self) -> SearchClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def put_document(
        self, uri: str, content: str, metadata: Mapping[str, Any], *, content_encoding: str | None = None
    ) -> PutResult:
        """Create or replace one document; `content_encoding="base64"` when `content` is a binary file's bytes.

        The service tells the format from the URI's extension (a PDF, a Word file, a notebook...).
        """
        payload = {"uri": uri, "content": content, "metadata": dict(metadata)}
        if content_encoding is not None:
            payload["contentEncoding"] = content_encoding
        body = await self._call("PUT", "/api/v1/documents", json=payload, document=True)
        with _contract("PUT /api/v1/documents"):
            return PutResult(status=str(body["status"]), checksum=str(body["checksum"]), chunks=int(body["chunks"]))

    async def delete_document(self, uri: str, source_id: str | None = None) -> int:
        """Delete one document (only if it belongs to `source_id`, when given); returns chunks deleted."""
        params = {"uri": uri} | ({"sourceIdentifier": source_id} if source_id else {})
        body = await self._call("DELETE", "/api/v1/documents", params=params, document=True)
        with _contract("DELETE /api/v1/documents"):
            return int(body["chunksDeleted"])

    async def delete_source(self, source_id: str) -> tuple[int, int]:
        """Delete every document of a source; returns (documents, chunks) deleted."""
        body = await self._call("DELETE", f"/api/v1/sources/{quote(source_id, safe='')}")
        with _contract("DELETE /api/v1/sources"):
            return int(body["documentsDeleted"]), int(body["chunksDeleted"])

    async def list_documents(self, source_id: str) -> dict[str, ListedDocument]:
        """Every document the service holds for a source, by URI, across all pages."""
        documents: dict[str, ListedDocument] = {}
        cursor: str | None = None
        while True:
            params = {"sourceIdentifier": source_id, "limit": str(self.page_size)}
            if cursor:
                params["cursor"] = cursor
            page = await self._call("GET", "/api/v1/documents", params=params)
            with _contract("GET /api/v1/documents"):
                for item in page["documents"]:
                    documents[item["uri"]] = ListedDocument(
                        uri=item["uri"], checksum=item["checksum"], chunks=int(item["chunks"]),
                        metadata=dict(item.get("metadata") or {}),
                    )  # fmt: skip
                cursor = page.get("nextCursor")
            if not cursor:
                return documents

    async def source_stats(self, source_id: str) -> SourceStats | None:
        """One source's counts and the collection epoch; None from a service too old to tell."""
        try:
            body = await self._call("GET", f"/api/v1/sources/{quote(source_id, safe='')}")
        except ServiceRejectedError as exc:
            if exc.status in _NO_SUCH_ENDPOINT:
                return None
            raise
        with _contract("GET /api/v1/sources/{sourceIdentifier}"):
            return SourceStats(
                source_id=str(body["sourceIdentifier"]), documents=int(body["documents"]), chunks=int(body["chunks"]),
                incomplete=int(body["incompleteDocuments"]), last_ingested_at=body.get("lastIngestedAt"),
                epoch=_nonempty(body["collectionEpoch"]),
            )  # fmt: skip

    async def source_document_count(self, source_id: str) -> int:
        """How many documents the service holds for a source, from the list of every source.

        Only for a service without GET /api/v1/sources/{id} (see source_stats): it lists all sources.
        """
        body = await self._call("GET", "/api/v1/sources")
        with _contract("GET /api/v1/sources"):
            for source in body["sources"]:
                if source["sourceIdentifier"] == source_id:
                    return int(source["documents"])
            return 0

    async def report_sync(self, source_id: str, report: SyncReport) -> bool:
        """PUT /api/v1/sources/{id}/status: tell the service how a sync of the source ended.

        True when the service took it (it keeps a later report it already has); False from a
        service too old to take it (404/405). A service that refuses the `quality` block (422: older
        than the judged questions) is sent the report again without it. Tried at most twice: the caller logs a
        failure and reports again after its next sync, so a report never holds a sync up for long.
        """
        path = f"/api/v1/sources/{quote(source_id, safe='')}/status"
        sent = report.to_json()
        try:
            body = await self._call("PUT", path, json=sent, attempts=min(2, self.max_attempts))
        except ServiceRejectedError as exc:
            if exc.status in _NO_SUCH_ENDPOINT:
                return False
            if exc.status != 422 or "quality" not in sent:
                raise
            # A service older than the judged questions refuses the unknown block: the outcome without it.
            log.info("the search service at %s takes no quality block (an older version)", self.base_url)
            sent.pop("quality")
            body = await self._call("PUT", path, json=sent, attempts=min(2, self.max_attempts))
        with _contract("PUT /api/v1/sources/{sourceIdentifier}/status"):
            _nonempty(body["sync"]["syncedAt"])
        return True

    async def report_progress(self, source_id: str, progress: Mapping[str, Any]) -> bool:
        """PUT /api/v1/sources/{id}/status with only `progress`: how far a running sync is.

        True when the service took it; False from a service too old to take progress reports
        (its 422 asks for a phase; 404/405: no status endpoint). Tried once: the next one follows soon.
        """
        path = f"/api/v1/sources/{quote(source_id, safe='')}/status"
        try:
            await self._call("PUT", path, json={"progress": dict(progress)}, attempts=1)
        except ServiceRejectedError as exc:
            if exc.status in _NO_SUCH_ENDPOINT or exc.status == 422:
                return False
            raise
        return True

    async def search_pages(self, query: str, source_id: str, limit: int) -> list[FoundPage]:
        """POST /api/v1/search within one source: its best `limit` pages for `query`, best first."""
        payload = {"query": query, "limit": limit, "filter": {"sourceIdentifier": source_id}}
        body = await self._call("POST", "/api/v1/search", json=payload)
        with _contract("POST /api/v1/search"):
            pages = []
            for item in body["results"]:
                path = (item.get("metadata") or {}).get("path")
                pages.append(FoundPage(uri=str(item["uri"]), path=path if isinstance(path, str) else None))
            return pages

    async def ask(self, question: str, source_id: str) -> str:
        """POST /api/v1/ask within one source: the answer's text."""
        payload = {"question": question, "filter": {"sourceIdentifier": source_id}}
        body = await self._call("POST", "/api/v1/ask", json=payload)
        with _contract("POST /api/v1/ask"):
            answer = body["answer"]
            if not isinstance(answer, str):
                raise TypeError(f"answer is {type(answer).__name__}, not a string")
            return answer

    async def _call(
        self, method: str, path: str, *, document: bool = False, attempts: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Send with retries (tenacity); return the decoded JSON body of a 2xx answer.

        `document`: the request carries one document, which a 409/413/422 rejects for good.
        `attempts`: fewer tries than the client's own max_attempts.
        """
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(_Transient),
            stop=tenacity.stop_after_attempt(attempts or self.max_attempts),
            wait=self._wait,
            sleep=self._sleep,
            before_sleep=_log_retry,
            reraise=True,
        )
        try:
            return await retrying(self._attempt, method, path, document, kwargs)
        except _Transient as exc:
            raise exc.error from None

    async def _attempt(self, method: str, path: str, document: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One request: the JSON body of a 2xx answer, or _Transient for a failure worth another try."""
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise _Transient(
                ServiceUnavailableError(f"{method} {path}: the search service is unreachable ({problem})"),
                None,
                f"{method} {path}: {problem}",
            ) from None
        status = response.status_code
        if 200 <= status < 300:
            return _json_body(response, method, path)
        code, message, details = _error_of(response)
        # A 409 with Retry-After (WRITE_CONFLICT) lost a race with another replica: retry it.
        if status == 429 or status >= 500 or (status == 409 and "Retry-After" in response.headers):
            raise _Transient(
                ServiceUnavailableError(
                    f"{method} {path}: the search service answered {status} {code}: {message}",
                    status=status, code=code, details=details,
                ),
                _retry_after(response),
                f"{status} {code}",
            )  # fmt: skip
        error: type[ServiceRejectedError | ServiceAuthError] = ServiceRejectedError
        if status in (401, 403):
            error = ServiceAuthError
        elif document and status in _DOCUMENT_REJECTIONS:
            error = DocumentRejectedError
        raise error(f"{status} {code}: {message}", status=status, code=code, details=details)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (state.attempt_number - 1))
        delay = self._rng.uniform(0, ceiling)  # full jitter: spreads clients that failed together
        failure = state.outcome.exception() if state.outcome is not None else None
        if isinstance(failure, _Transient) and failure.retry_after is not None:
            delay = max(delay, min(failure.retry_after, _RETRY_AFTER_CAP_S))
        return delay


class _Transient(Exception):
    """A failure worth another try (no connection, 429, 5xx, a lost write race), with its final error."""

    def __init__(self, error: ServiceUnavailableError, retry_after: float | None, why: str) -> None:
        super().__init__(why)
        self.error = error
        self.retry_after = retry_after
        self.why = why


def _log_retry(state: tenacity.RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome is not None else None
    why = failure.why if isinstance(failure, _Transient) else repr(failure)
    log.warning("search service call failed (%s); retry %d in %.2fs", why, state.attempt_number, state.upcoming_sleep)


@contextlib.contextmanager
def _contract(call: str) -> Iterator[None]:
    """A 2xx body that lacks the contract's fields is a broken service, never a success."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ServiceUnavailableError(f"{call}: the answer does not follow the v1 contract ({exc!r})") from None


def _nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _json_body(response: httpx.Response, method: str, path: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        # A 2xx that is not our JSON comes from something in between (a proxy page): not success.
        raise ServiceUnavailableError(
            f"{method} {path}: the search service answered {response.status_code} without a JSON object"
        )
    return body


def _error_of(response: httpx.Response) -> tuple[str, str, Any]:
    """The contract's `{"error": {"code", "message", "details"}}`, or a fallback from the raw body."""
    try:
        error = response.json().get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return error["code"], str(error.get("message", "")), error.get("details")
    except (ValueError, AttributeError):
        pass
    snippet = response.text[:200].strip() or response.reason_phrase
    return f"HTTP_{response.status_code}", snippet, None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


async def _traceparent(request: httpx.Request) -> None:
    """The current trace's W3C `traceparent` on every call, so the service's spans join the sync's trace.
    Without an OpenTelemetry SDK configured in the operator there is no current trace and nothing is sent."""
    propagate.inject(request.headers)
