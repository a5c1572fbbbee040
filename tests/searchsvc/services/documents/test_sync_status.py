"""PUT /api/v1/sources/{id}/status: a source's last sync, validated, scoped, shown by GET /sources, on both stores."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from kbsearch.schemas.sources import MAX_REPORTED_FILES
from tests.searchsvc.api_fixtures import put
from tests.support.scoped_access import bearer, entry, tokens_yaml
from tests.support.service import STORE_KINDS, running_service
from tests.support.sync_reports import SOURCE, report, status_path

ADMIN, A_WRITER, A_READER, B_WRITER = "admin-tok-1", "a-writer-tok-2", "a-reader-tok-3", "b-writer-tok-4"
TOKENS = tokens_yaml(
    entry("admin", ADMIN, '["*"]', write=True),
    entry("team-a-writer", A_WRITER, '["team-a/*"]', write=True),
    entry("team-a-reader", A_READER, '["team-a/*"]'),
    entry("team-b-writer", B_WRITER, '["team-b/*"]', write=True),
)


async def sources(client: httpx.AsyncClient, token: str | None = None) -> dict[str, dict]:
    response = await client.get("/api/v1/sources", headers=bearer(token) if token else {})
    assert response.status_code == 200, response.text
    return {s["sourceIdentifier"]: s for s in response.json()["sources"]}


async def test_a_report_is_stored_and_listed_with_the_source(api: httpx.AsyncClient) -> None:
    await put(api, "https://x/a.md", "# A\n\nalpha", sourceIdentifier=SOURCE)
    response = await api.put(status_path(), json=report())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["stored"] is True and body["sourceIdentifier"] == SOURCE
    sync = body["sync"]
    assert sync["phase"] == "partial" and sync["failed"] == 1 and sync["skipped"] == 1 and sync["added"] == 2
    assert sync["syncedAt"] == "2026-11-24T10:00:00.000Z"
    assert sync["nextSyncAt"] == "2026-11-24T10:00:00.000Z"  # normalised to UTC
    assert sync["skippedFiles"] == [
        {"path": "big.md", "reason": "refused by the search service", "code": "DOCUMENT_TOO_LARGE"}
    ]
    assert sync["failedFiles"][0]["code"] is None

    listed = (await sources(api))[SOURCE]
    assert listed["documents"] == 1 and listed["sync"] == sync
    one = (await api.get(f"/api/v1/sources/{quote(SOURCE, safe='')}")).json()
    assert one["documents"] == 1 and one["sync"] == sync


async def test_a_source_whose_every_file_failed_is_still_listed(api: httpx.AsyncClient) -> None:
    failed = [{"path": f"f{i}.md", "reason": "not ingested"} for i in range(3)]
    response = await api.put(status_path(), json=report(documents=0, failedFiles=failed, failed=7, phase="error"))
    assert response.status_code == 200, response.text
    listed = await sources(api)
    assert list(listed) == [SOURCE]
    assert (listed[SOURCE]["documents"], listed[SOURCE]["chunks"], listed[SOURCE]["lastIngestedAt"]) == (0, 0, None)
    assert listed[SOURCE]["sync"]["failed"] == 7 and len(listed[SOURCE]["sync"]["failedFiles"]) == 3
    # A source without a report has none.
    await put(api, "https://x/b.md", "beta", sourceIdentifier="team-a/other")
    assert (await sources(api))["team-a/other"]["sync"] is None


async def test_the_latest_report_wins_and_an_older_one_never_replaces_it(api: httpx.AsyncClient) -> None:
    assert (await api.put(status_path(), json=report(syncedAt="2026-11-24T10:00:00Z"))).json()["stored"]
    newer = report(syncedAt="2026-11-24T12:00:00Z", phase="ok", failedFiles=[], commit="feedface")
    assert (await api.put(status_path(), json=newer)).json()["stored"]
    late = await api.put(status_path(), json=report(syncedAt="2026-11-24T11:00:00Z"))
    assert late.status_code == 200 and late.json()["stored"] is False
    assert late.json()["sync"]["commit"] == "feedface"  # what is stored, and stays
    assert (await sources(api))[SOURCE]["sync"]["phase"] == "ok"


async def test_deleting_the_source_removes_its_status(api: httpx.AsyncClient) -> None:
    await put(api, "https://x/a.md", "alpha", sourceIdentifier=SOURCE)
    await put(api, "https://x/b.md", "beta", sourceIdentifier="team-a/keep")
    await api.put(status_path(), json=report())
    await api.put(status_path("team-a/keep"), json=report())
    deleted = await api.delete(f"/api/v1/sources/{quote(SOURCE, safe='')}")
    assert deleted.json()["documentsDeleted"] == 1
    listed = await sources(api)
    assert list(listed) == ["team-a/keep"] and listed["team-a/keep"]["sync"] is not None
    assert (await api.get(f"/api/v1/sources/{quote(SOURCE, safe='')}")).json()["sync"] is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"phase": "done"}, "body.phase"),
        ({"syncedAt": "2026-11-24T10:00:00"}, "body.syncedAt"),  # no timezone
        ({"syncedAt": None}, "body: Value error, a report needs phase and syncedAt"),  # or progress alone
        ({"documents": -1}, "body.documents"),
        ({"documents": "3"}, "body.documents"),
        ({"failedFiles": [{"path": "", "reason": "x"}]}, "body.failedFiles.0.path"),
        ({"failedFiles": [{"path": "a\nb.md", "reason": "x"}]}, "body.failedFiles.0.path"),
        ({"failedFiles": [{"path": "a.md", "reason": "r" * 1001}]}, "body.failedFiles.0.reason"),
        ({"skippedFiles": [{"path": "a.md", "reason": "x", "code": "not a code"}]}, "body.skippedFiles.0.code"),
        ({"failedFiles": [{"path": "a.md", "reason": "x", "extra": 1}]}, "body.failedFiles.0.extra"),
        ({"message": "m" * 2001}, "body.message"),
        ({"commit": "c" * 129}, "body.commit"),
        ({"unknown": True}, "body.unknown"),
    ],
)
async def test_invalid_reports_get_a_422_naming_the_field(api: httpx.AsyncClient, changes, field) -> None:
    response = await api.put(status_path(), json=report(**changes))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and error["message"].startswith(field)
    assert await sources(api) == {}  # nothing stored


async def test_bounded_lists_and_counts_that_contradict_them_are_refused(api: httpx.AsyncClient) -> None:
    many = [{"path": f"f{i}.md", "reason": "x"} for i in range(MAX_REPORTED_FILES + 1)]
    response = await api.put(status_path(), json=report(failedFiles=many))
    assert response.status_code == 422
    assert "failedFiles" in response.json()["error"]["message"] and str(MAX_REPORTED_FILES) in response.text
    # The full count may exceed the listed files, never fall below them.
    two = [{"path": "a.md", "reason": "x"}, {"path": "b.md", "reason": "y"}]
    short = await api.put(status_path(), json=report(failedFiles=two, failed=1))
    assert short.status_code == 422 and "failed is 1 but failedFiles lists 2" in short.json()["error"]["message"]
    ok_with_failures = await api.put(status_path(), json=report(phase="ok"))
    assert ok_with_failures.status_code == 422 and "phase is ok" in ok_with_failures.json()["error"]["message"]
    exact = await api.put(status_path(), json=report(failedFiles=many[:MAX_REPORTED_FILES], failed=5000))
    assert exact.status_code == 200 and exact.json()["sync"]["failed"] == 5000


async def test_an_invalid_source_identifier_is_a_422(api: httpx.AsyncClient) -> None:
    response = await api.put(f"/api/v1/sources/{'s' * 600}/status", json=report())
    assert response.status_code == 422 and "sourceIdentifier" in response.json()["error"]["message"]


@pytest.fixture(params=STORE_KINDS)
async def scoped(request, tmp_path: Path):
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS)
    async with running_service(request.param, tmp_path / "data", tokens_file=path) as client:
        yield client


async def test_writing_a_status_needs_write_rights_on_that_source(scoped: httpx.AsyncClient) -> None:
    assert (await scoped.put(status_path(), json=report())).status_code == 401
    reader = await scoped.put(status_path(), json=report(), headers=bearer(A_READER))
    assert reader.status_code == 403 and reader.json()["error"]["code"] == "FORBIDDEN"
    other = await scoped.put(status_path(), json=report(), headers=bearer(B_WRITER))
    assert other.status_code == 403 and other.json()["error"]["code"] == "SOURCE_FORBIDDEN"
    assert (await scoped.put(status_path(), json=report(), headers=bearer(A_WRITER))).status_code == 200
    assert (await scoped.put(status_path("team-b/docs"), json=report(), headers=bearer(B_WRITER))).status_code == 200


async def test_a_team_never_sees_another_teams_status(scoped: httpx.AsyncClient) -> None:
    secret = "team-b-secret-path.md"
    b_report = report(failedFiles=[{"path": secret, "reason": "x"}], documents=0)
    assert (await scoped.put(status_path("team-b/docs"), json=b_report, headers=bearer(B_WRITER))).status_code == 200
    assert (await scoped.put(status_path(), json=report(), headers=bearer(A_WRITER))).status_code == 200

    # team-b/docs has no documents at all: only its status makes it a source, and a's glob must not reach it.
    seen_by_a = await scoped.get("/api/v1/sources", headers=bearer(A_READER))
    assert [s["sourceIdentifier"] for s in seen_by_a.json()["sources"]] == [SOURCE]
    assert secret not in seen_by_a.text and "team-b" not in seen_by_a.text
    one = await scoped.get(f"/api/v1/sources/{quote('team-b/docs', safe='')}", headers=bearer(A_READER))
    assert one.status_code == 200 and one.json()["sync"] is None and secret not in one.text
    assert set(await sources(scoped, ADMIN)) == {SOURCE, "team-b/docs"}
