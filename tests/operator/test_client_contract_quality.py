"""SearchClient against the real search service in-process: what the judged questions rely on.

POST /api/v1/search and POST /api/v1/ask within one source, and the `quality` block of
PUT /api/v1/sources/{sourceIdentifier}/status (bounded by the client as the service bounds it; an
older service that refuses the block gets the report without it). The rest of the contract is
in test_client_contract.py.
"""

from __future__ import annotations

import json

import httpx

from kboperator.models import Quality, QuestionOutcome, SyncReport
from kboperator.searchclient import SearchClient
from tests.operator.contract_support import SOURCE, synced
from tests.operator.search_service import BASE_URL, no_sleep, search_client, service  # noqa: F401 - fixtures

OTHER = "team/other"


async def put(client: SearchClient, source: str, path: str, text: str) -> None:
    await client.put_document(f"https://x/{source}/{path}", text, {"sourceIdentifier": source, "path": path})


async def test_search_pages_and_ask_stay_within_the_source(search_client: SearchClient) -> None:  # noqa: F811
    await put(search_client, SOURCE, "docs/install.md", "# Install\n\nRun helm install kb-operator to install it.\n")
    await put(search_client, SOURCE, "docs/tokens.md", "# Tokens\n\nBearer tokens live in a Secret.\n")
    await put(search_client, OTHER, "docs/install.md", "# Install elsewhere\n\nRun helm install other-thing.\n")
    pages = await search_client.search_pages("helm install", SOURCE, 5)
    assert pages and pages[0].path == "docs/install.md" and pages[0].uri == f"https://x/{SOURCE}/docs/install.md"
    assert all(page.uri.startswith(f"https://x/{SOURCE}/") for page in pages)
    assert len(await search_client.search_pages("install tokens", SOURCE, 1)) == 1
    answer = await search_client.ask("How do I run helm install?", SOURCE)
    assert "helm install kb-operator" in answer and "other-thing" not in answer


def quality() -> Quality:
    outcomes = [
        QuestionOutcome(
            f"question {i}\nwith a second line " + "w" * 600, (f"docs/p{i}.md",), None, ("x" * 300,), ("x" * 300,)
        )
        for i in range(30)
    ]
    return Quality((QuestionOutcome("found?", ("docs/a.md",), 1), *outcomes))


async def test_a_quality_block_is_bounded_and_listed(search_client: SearchClient, service: httpx.AsyncClient) -> None:  # noqa: F811
    report = SyncReport.of(synced(quality=quality()), None, synced_at="2026-11-24T10:00:00Z", next_sync_at=None)
    assert await search_client.report_sync(SOURCE, report) is True
    listed = {s["sourceIdentifier"]: s for s in (await service.get("/api/v1/sources")).json()["sources"]}[SOURCE]
    shown = listed["sync"]["quality"]
    assert (shown["questions"], shown["failed"], len(shown["failedQuestions"])) == (31, 30, 20)
    assert (shown["hitAt1"], shown["hitAt5"], shown["withFacts"], shown["factsShare"]) == (0.0323, 0.0323, 30, 0.0)
    first = shown["failedQuestions"][0]
    assert first["question"].startswith("question 0 with a second line") and len(first["question"]) == 500
    assert first["rank"] is None and first["missingFacts"] == ["x" * 200] and first["expected"] == ["docs/p0.md"]
    assert listed["quality"] == 0.0323


async def test_an_older_service_gets_the_report_without_its_quality() -> None:
    bodies: list[dict] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "quality" in body:  # what a service older than the block answers: an unknown key
            error = {"code": "VALIDATION_ERROR", "message": "quality: Extra inputs are not permitted", "details": {}}
            return httpx.Response(422, json={"error": error})
        return httpx.Response(
            200, json={"sourceIdentifier": SOURCE, "stored": True, "sync": {"syncedAt": body["syncedAt"]}}
        )

    report = SyncReport.of(synced(quality=quality()), None, synced_at="2026-11-24T10:00:00Z", next_sync_at=None)
    async with SearchClient(BASE_URL, transport=httpx.MockTransport(handler), sleep=no_sleep) as client:
        assert await client.report_sync(SOURCE, report) is True
    assert ["quality" in body for body in bodies] == [True, False]
    assert bodies[1] == {k: v for k, v in bodies[0].items() if k != "quality"}
