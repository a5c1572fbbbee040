"""SearchClient against the real search service app in-process: the v1 contract, errors, retries.

This pins what the operator relies on, including PUT /api/v1/sources/{sourceIdentifier}/status (each
sync's outcome, shown by GET /api/v1/sources), GET /api/v1/sources/{sourceIdentifier} (counts
and the collection epoch, zeros for an unknown source, never 404) and `collectionEpoch` in GET
/api/v1/status: an id that stays across restarts and changes when the collection is re-created.
What the judged questions rely on (search and ask within a source, a report's `quality` block) is
pinned in test_client_contract_quality.py.
"""

from __future__ import annotations

import base64
import logging
import random
import shutil
from pathlib import Path

import httpx
import pytest

from kboperator.errors import (
    DocumentRejectedError,
    RepositoryUnavailableError,
    ServiceAuthError,
    ServiceRejectedError,
    ServiceUnavailableError,
)
from kboperator.git.repo import RepoCache
from kboperator.models import REPORTED_FILES, FileIssue, Freshness, SyncReport
from kboperator.searchclient import SearchClient, SourceStats
from kboperator.sync.engine import SyncEngine
from tests.operator.contract_support import SOURCE, synced
from tests.operator.search_service import (
    BASE_URL,
    asgi,
    listing,
    no_sleep,
    sha256,
)
from tests.support.formatfiles import pdf_pages, scanned_pdf
from tests.support.service import running_service

META = {"sourceIdentifier": SOURCE, "path": "a.md"}


class Sleeps(list[float]):
    """A SearchClient's sleep that records each delay instead of waiting it out."""

    async def __call__(self, delay: float) -> None:
        self.append(delay)


async def test_put_reports_created_updated_unchanged(search_client: SearchClient) -> None:
    first = await search_client.put_document("https://x/a.md", "# A\n\nalpha", META)
    assert (first.status, first.checksum) == ("created", sha256(b"# A\n\nalpha"))
    assert first.chunks >= 1
    assert (await search_client.put_document("https://x/a.md", "# A\n\nalpha", META)).status == "unchanged"
    assert (await search_client.put_document("https://x/a.md", "# A\n\nbeta", META)).status == "updated"


async def test_delete_document_is_idempotent(search_client: SearchClient) -> None:
    await search_client.put_document("https://x/a.md", "alpha beta", META)
    assert await search_client.delete_document("https://x/a.md") >= 1
    assert await search_client.delete_document("https://x/a.md") == 0


async def test_list_documents_follows_every_page(service: httpx.AsyncClient) -> None:
    async with SearchClient(BASE_URL, transport=asgi(service), page_size=2) as client:
        for i in range(5):
            await client.put_document(f"https://x/{i}.md", f"doc {i}", {"sourceIdentifier": SOURCE, "path": f"{i}.md"})
        await client.put_document("https://x/other.md", "other", {"sourceIdentifier": "team/other"})
        documents = await client.list_documents(SOURCE)
    assert sorted(documents) == [f"https://x/{i}.md" for i in range(5)]
    assert documents["https://x/3.md"].checksum == sha256(b"doc 3")
    assert documents["https://x/3.md"].metadata == {"sourceIdentifier": SOURCE, "path": "3.md"}


async def test_delete_source_and_count_with_a_slash_in_the_id(search_client: SearchClient, service) -> None:
    for i in range(3):
        await search_client.put_document(f"https://x/{i}.md", f"doc {i}", {"sourceIdentifier": SOURCE})
    await search_client.put_document("https://x/keep.md", "keep", {"sourceIdentifier": "team/docs-other"})
    assert await search_client.source_document_count(SOURCE) == 3
    documents, chunks = await search_client.delete_source(SOURCE)
    assert documents == 3 and chunks >= 3
    assert await search_client.source_document_count(SOURCE) == 0
    assert await search_client.delete_source(SOURCE) == (0, 0)
    assert list(await listing(service, "team/docs-other")) == ["https://x/keep.md"]


async def test_oversize_document_is_rejected_with_the_service_code(search_client: SearchClient) -> None:
    with pytest.raises(DocumentRejectedError) as caught:  # for good: the sync skips the file
        await search_client.put_document("https://x/big.md", "x" * (1_048_576 + 1), META)
    assert caught.value.status == 413 and caught.value.code == "DOCUMENT_TOO_LARGE"
    assert "DOCUMENT_TOO_LARGE" in str(caught.value)


async def test_a_binary_file_goes_base64_encoded_and_its_checksum_is_of_its_bytes(search_client: SearchClient) -> None:
    # contentEncoding: base64 carries a PDF or Word file; the service tells the format from the URI.
    data = pdf_pages("Contract page one. " * 40, "Contract page two. " * 40)
    encoded = base64.b64encode(data).decode()
    first = await search_client.put_document("https://x/manual.pdf", encoded, META, content_encoding="base64")
    assert (first.status, first.checksum) == ("created", sha256(data)) and first.chunks >= 2
    again = await search_client.put_document("https://x/manual.pdf", encoded, META, content_encoding="base64")
    assert again.status == "unchanged"
    # Text sent base64-encoded is the same document as text sent as a string.
    text = "# A\n\nalpha"
    as_bytes = base64.b64encode(text.encode()).decode()
    assert (await search_client.put_document("https://x/t.md", as_bytes, META, content_encoding="base64")).checksum == (
        await search_client.put_document("https://x/t.md", text, META)
    ).checksum


async def test_a_file_the_service_cannot_convert_is_a_document_rejection_with_its_code(
    search_client: SearchClient,
) -> None:
    encoded = base64.b64encode(scanned_pdf()).decode()
    with pytest.raises(DocumentRejectedError) as caught:  # for good: the sync lists it with the skipped files
        await search_client.put_document("https://x/scan.pdf", encoded, META, content_encoding="base64")
    assert caught.value.status == 422 and caught.value.code == "NO_TEXT_LAYER"
    assert "no text layer" in str(caught.value)


async def test_a_uri_of_another_source_is_a_document_rejection(search_client: SearchClient) -> None:
    await search_client.put_document("https://x/a.md", "alpha", {"sourceIdentifier": "team/first"})
    with pytest.raises(DocumentRejectedError) as caught:
        await search_client.put_document("https://x/a.md", "alpha", META)
    assert caught.value.status == 409 and caught.value.code == "URI_OWNED_BY_OTHER_SOURCE"
    assert "team/first" not in str(caught.value)  # the service never names the owner


async def test_a_4xx_that_is_not_about_one_document_is_not_a_document_rejection(search_client: SearchClient) -> None:
    with pytest.raises(ServiceRejectedError) as caught:
        await search_client.list_documents("s" * 600)  # over the contract's 512 characters
    assert caught.value.status == 422 and not isinstance(caught.value, DocumentRejectedError)


async def test_invalid_request_is_rejected_not_retried(service: httpx.AsyncClient) -> None:
    sleeps = Sleeps()
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=sleeps) as client:
        with pytest.raises(DocumentRejectedError) as caught:
            await client.put_document("u" * 2049, "text", META)
        assert caught.value.status == 422 and caught.value.code
        with pytest.raises(DocumentRejectedError) as caught:  # a delete of a URI the service cannot hold
            await client.delete_document("u" * 2049, SOURCE)
        assert caught.value.status == 422
    assert sleeps == []


async def test_source_stats_count_one_source_in_the_collection_of_the_status(
    search_client: SearchClient, service: httpx.AsyncClient
) -> None:
    odd = "team/a b#?%&+=;"  # reserved characters travel percent-encoded in the path
    for i in range(3):
        await search_client.put_document(f"https://x/{i}.md", f"doc {i}", {"sourceIdentifier": SOURCE})
    await search_client.put_document("https://x/odd.md", "odd", {"sourceIdentifier": odd})
    await search_client.put_document("https://x/keep.md", "keep", {"sourceIdentifier": "team/docs-other"})
    epoch = (await service.get("/api/v1/status")).json()["collectionEpoch"]
    assert isinstance(epoch, str) and epoch

    stats = await search_client.source_stats(SOURCE)
    assert stats is not None
    assert (stats.source_id, stats.documents, stats.incomplete, stats.epoch) == (SOURCE, 3, 0, epoch)
    assert stats.chunks >= 3 and isinstance(stats.last_ingested_at, str)
    odd_stats = await search_client.source_stats(odd)
    assert odd_stats is not None and (odd_stats.source_id, odd_stats.documents, odd_stats.epoch) == (odd, 1, epoch)
    # An unknown source answers zeros, never 404: zero is what a reset collection looks like.
    assert await search_client.source_stats("team/unknown") == SourceStats(
        "team/unknown", documents=0, chunks=0, incomplete=0, last_ingested_at=None, epoch=epoch
    )
    await search_client.delete_source(SOURCE)
    assert (await search_client.source_stats(SOURCE)).documents == 0  # type: ignore[union-attr]


async def test_the_epoch_stays_across_restarts_and_changes_with_a_new_collection(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def epochs() -> tuple[str, str | None]:
        async with running_service("edge", data) as service:
            async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
                await client.put_document("https://x/a.md", "alpha", META)
                stats = await client.source_stats(SOURCE)
            assert stats is not None
            return (await service.get("/api/v1/status")).json()["collectionEpoch"], stats.epoch

    first, seen = await epochs()
    assert seen == first
    assert (await epochs())[0] == first  # restarted on the same volume: the same collection
    shutil.rmtree(data)
    assert (await epochs())[0] != first  # re-created


@pytest.mark.parametrize("status", [404, 405])
async def test_a_service_without_source_stats_answers_none(status: int) -> None:
    # An older service: 405, since only DELETE has that path; 404 from anything in between.
    async def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.raw_path == b"/api/v1/sources/team%2Fdocs"
        return httpx.Response(status, json={"error": {"code": "NOT_FOUND", "message": "no", "details": {}}})

    async with SearchClient(BASE_URL, transport=httpx.MockTransport(handler), sleep=no_sleep) as client:
        assert await client.source_stats(SOURCE) is None


async def test_auth_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token = "svc-T0ken-never-logged"
    async with running_service("edge", tmp_path / "data", api_token=token) as service:
        for presented in (None, "wrong"):
            async with SearchClient(BASE_URL, presented, transport=asgi(service), sleep=no_sleep) as client:
                with pytest.raises(ServiceAuthError) as caught:
                    await client.put_document("https://x/a.md", "a", META)
                assert caught.value.status == 401
        async with SearchClient(BASE_URL, token, transport=asgi(service), sleep=no_sleep) as client:
            assert (await client.put_document("https://x/a.md", "a", META)).status == "created"
            assert await client.delete_source(SOURCE) == (1, 1)
            assert token not in repr(client)
    assert token not in caplog.text


def refusal(status: int, code: str, message: str, *, retry_after: str) -> httpx.Response:
    """The service's error answer with a Retry-After."""
    error = {"code": code, "message": message, "details": {}}
    return httpx.Response(status, headers={"Retry-After": retry_after}, json={"error": error})


def flaky(service: httpx.AsyncClient, failures: list[httpx.Response | Exception]) -> httpx.MockTransport:
    """Answers with `failures` in order, then hands every request to the real app."""
    real = asgi(service)

    async def handler(request: httpx.Request) -> httpx.Response:
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        return await real.handle_async_request(request)

    return httpx.MockTransport(handler)


def unavailable() -> httpx.Response:
    return httpx.Response(503, json={"error": {"code": "STORE_UNAVAILABLE", "message": "try later", "details": {}}})


async def test_503_twice_then_success_with_jittered_backoff(service: httpx.AsyncClient) -> None:
    sleeps = Sleeps()
    transport = flaky(service, [unavailable(), unavailable()])
    async with SearchClient(
        BASE_URL, transport=transport, sleep=sleeps, backoff_base=1.0, rng=random.Random(7)
    ) as client:
        result = await client.put_document("https://x/a.md", "alpha", META)
    assert result.status == "created"
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= 1.0 and 0 <= sleeps[1] <= 2.0  # full jitter under a doubling ceiling
    assert list(await listing(service, SOURCE)) == ["https://x/a.md"]


async def test_429_honours_retry_after_and_network_errors_are_retried(service: httpx.AsyncClient) -> None:
    sleeps = Sleeps()
    busy = httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"code": "OVERLOADED", "message": "busy"}})
    transport = flaky(service, [busy, httpx.ConnectError("refused"), httpx.ReadTimeout("slow")])
    async with SearchClient(BASE_URL, transport=transport, sleep=sleeps, backoff_base=0.1) as client:
        assert await client.source_document_count(SOURCE) == 0
    assert len(sleeps) == 3 and sleeps[0] >= 7


async def test_503_honours_retry_after(service: httpx.AsyncClient) -> None:
    # The service's SERVICE_BUSY (its body budget is spent) asks for a wait; coming back sooner is refused again.
    sleeps = Sleeps()
    busy = refusal(503, "SERVICE_BUSY", "busy", retry_after="4")
    transport = flaky(service, [busy])
    async with SearchClient(BASE_URL, transport=transport, sleep=sleeps, backoff_base=0.1) as client:
        assert (await client.put_document("https://x/a.md", "alpha", META)).status == "created"
    assert len(sleeps) == 1 and sleeps[0] >= 4


async def test_a_lost_write_race_is_retried_not_skipped(service: httpx.AsyncClient) -> None:
    # Another replica won the race for this URI: the service's WRITE_CONFLICT carries Retry-After.
    sleeps = Sleeps()
    lost = refusal(409, "WRITE_CONFLICT", "raced", retry_after="1")
    transport = flaky(service, [lost])
    async with SearchClient(BASE_URL, transport=transport, sleep=sleeps, backoff_base=0.1) as client:
        assert (await client.put_document("https://x/a.md", "alpha", META)).status == "created"
    assert len(sleeps) == 1 and sleeps[0] >= 1
    assert list(await listing(service, SOURCE)) == ["https://x/a.md"]


async def test_retries_run_out_into_service_unavailable(service: httpx.AsyncClient) -> None:
    transport = flaky(service, [unavailable() for _ in range(3)])
    async with SearchClient(BASE_URL, transport=transport, sleep=no_sleep, max_attempts=3) as client:
        with pytest.raises(ServiceUnavailableError) as caught:
            await client.put_document("https://x/a.md", "alpha", META)
    assert caught.value.status == 503 and caught.value.code == "STORE_UNAVAILABLE"
    assert await listing(service, SOURCE) == {}


async def test_a_2xx_that_is_not_the_contract_is_not_success(service: httpx.AsyncClient) -> None:
    for answer in (httpx.Response(200, text="<html>proxy</html>"), httpx.Response(200, json={"unexpected": True})):
        transport = flaky(service, [answer])
        async with SearchClient(BASE_URL, transport=transport, sleep=no_sleep, max_attempts=1) as client:
            with pytest.raises(ServiceUnavailableError):
                await client.put_document("https://x/a.md", "alpha", META)


# --- sync status ----------------------------------------------------------------------------


async def sources_seen(service: httpx.AsyncClient) -> dict[str, dict]:
    return {s["sourceIdentifier"]: s for s in (await service.get("/api/v1/sources")).json()["sources"]}


async def test_a_sync_report_is_what_the_sources_listing_shows(search_client: SearchClient, service) -> None:
    report = SyncReport.of(synced(), None, synced_at="2026-11-24T10:00:00Z", next_sync_at="2026-11-24T11:00:00Z")
    assert await search_client.report_sync(SOURCE, report) is True
    sync = (await sources_seen(service))[SOURCE]["sync"]
    assert (sync["phase"], sync["commit"], sync["documents"]) == ("ok", "c0ffee" * 6 + "c0ff", 9)
    assert (sync["added"], sync["modified"], sync["deleted"], sync["unchanged"]) == (
        2,
        2,
        1,
        5,
    )  # renames count as modified
    assert sync["skippedFiles"] == [
        {"path": "big.md", "reason": "refused by the search service: 413", "code": "DOCUMENT_TOO_LARGE"}
    ]
    assert (sync["syncedAt"], sync["nextSyncAt"]) == ("2026-11-24T10:00:00.000Z", "2026-11-24T11:00:00.000Z")


async def test_a_partial_sync_with_more_failures_than_a_report_lists(search_client: SearchClient, service) -> None:
    failed = [FileIssue(f"dir/f{i:03}.md", "not ingested: 503 STORE_UNAVAILABLE " + "x" * 1200) for i in range(150)]
    failed[0] = FileIssue("odd\nname\x01.md", "not ingested:\nline two")  # git allows these bytes in a path
    report = SyncReport.of(synced(failed=failed), None, synced_at="2026-11-24T10:00:00Z", next_sync_at=None)
    assert await search_client.report_sync(SOURCE, report) is True
    sync = (await sources_seen(service))[SOURCE]["sync"]
    assert sync["phase"] == "partial" and sync["failed"] == 150 and len(sync["failedFiles"]) == REPORTED_FILES
    assert sync["failedFiles"][0] == {"path": "odd\\x0aname\\x01.md", "reason": "not ingested:\nline two", "code": None}
    assert all(len(f["reason"]) <= 1000 for f in sync["failedFiles"])


async def test_a_failed_sync_is_reported_as_an_error_for_a_source_with_no_documents(
    search_client: SearchClient, service
) -> None:
    error = RepositoryUnavailableError("git clone failed: could not resolve host")
    report = SyncReport.of(None, error, synced_at="2026-11-24T10:00:00Z", next_sync_at="2026-11-24T10:05:00Z")
    assert await search_client.report_sync(SOURCE, report) is True
    listed = (await sources_seen(service))[SOURCE]
    assert listed["documents"] == 0 and listed["sync"]["phase"] == "error"
    assert listed["sync"]["message"] == "git clone failed: could not resolve host" and listed["sync"]["commit"] is None


async def test_freshness_travels_with_every_report_a_failed_one_too(search_client: SearchClient, service) -> None:
    fresh = Freshness("c0ffee" * 6 + "c0ff", "2026-11-24T09:59:57Z", "2026-11-24T10:00:00Z", 2.7504)
    ok = SyncReport.of(
        synced(), None, synced_at="2026-11-24T10:00:00Z", next_sync_at=None,
        last_success_at="2026-11-24T10:00:00Z", freshness=fresh,
    )  # fmt: skip
    assert await search_client.report_sync(SOURCE, ok) is True
    sync = (await sources_seen(service))[SOURCE]["sync"]
    assert sync["lastSuccessAt"] == "2026-11-24T10:00:00.000Z"
    assert sync["freshness"] == {
        "remoteCommit": "c0ffee" * 6 + "c0ff", "seenAt": "2026-11-24T09:59:57.000Z",
        "searchableAt": "2026-11-24T10:00:00.000Z", "lagSeconds": 2.75,
    }  # fmt: skip
    error = RepositoryUnavailableError("could not resolve host")
    failed = SyncReport.of(
        None, error, synced_at="2026-11-24T10:05:00Z", next_sync_at=None,
        last_success_at="2026-11-24T10:00:00Z", freshness=fresh,
    )  # fmt: skip
    assert await search_client.report_sync(SOURCE, failed) is True
    sync = (await sources_seen(service))[SOURCE]["sync"]
    assert sync["phase"] == "error" and sync["lastSuccessAt"] == "2026-11-24T10:00:00.000Z"
    assert sync["freshness"]["lagSeconds"] == 2.75
    # Without them (an older syncer, or a first sync that failed) the listing says null.
    plain = SyncReport.of(None, error, synced_at="2026-11-24T10:06:00Z", next_sync_at=None)
    assert await search_client.report_sync(SOURCE, plain) is True
    sync = (await sources_seen(service))[SOURCE]["sync"]
    assert sync["lastSuccessAt"] is None and sync["freshness"] is None


async def test_an_older_service_takes_no_report_and_the_engine_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "PUT" and request.url.raw_path == b"/api/v1/sources/team%2Fdocs/status"
        return httpx.Response(405, json={"error": {"code": "METHOD_NOT_ALLOWED", "message": "no", "details": {}}})

    report = SyncReport.of(synced(), None, synced_at="2026-11-24T10:00:00Z", next_sync_at=None)
    async with SearchClient(BASE_URL, transport=httpx.MockTransport(handler), sleep=no_sleep) as client:
        assert await client.report_sync(SOURCE, report) is False
        engine = SyncEngine(client, RepoCache(Path("/nonexistent-cache")))
        assert await engine.report(SOURCE, synced(), None, synced_at="2026-11-24T10:00:00Z") is False


async def test_a_report_that_keeps_failing_is_logged_and_tried_twice_at_most(
    service: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    transport = flaky(service, [unavailable() for _ in range(5)])
    async with SearchClient(BASE_URL, transport=transport, sleep=no_sleep, max_attempts=5) as client:
        engine = SyncEngine(client, RepoCache(Path("/nonexistent-cache")))
        with caplog.at_level(logging.WARNING, logger="kboperator.sync.engine"):
            assert await engine.report(SOURCE, synced(), None, synced_at="2026-11-24T10:00:00Z") is False
    assert "could not report the sync's outcome" in caplog.text
    assert (await sources_seen(service)) == {}
    # Two of the five failures were used: the next call goes straight through.
    async with SearchClient(BASE_URL, transport=transport, sleep=no_sleep, max_attempts=1) as client:
        with pytest.raises(ServiceUnavailableError):
            await client.source_document_count(SOURCE)


async def test_a_report_needs_write_rights_on_the_source(tmp_path: Path) -> None:
    async with running_service("edge", tmp_path / "data", api_token="svc-write-token") as service:
        report = SyncReport.of(synced(), None, synced_at="2026-11-24T10:00:00Z", next_sync_at=None)
        async with SearchClient(BASE_URL, "wrong", transport=asgi(service), sleep=no_sleep) as client:
            with pytest.raises(ServiceAuthError):
                await client.report_sync(SOURCE, report)
        async with SearchClient(BASE_URL, "svc-write-token", transport=asgi(service), sleep=no_sleep) as client:
            assert await client.report_sync(SOURCE, report) is True
