"""A sync report's judged questions (`quality`): validated, stored per commit, listed, in the gauges, on both stores."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kbsearch.deps import parts_of
from kbsearch.schemas.sources import MAX_REPORTED_QUESTIONS
from tests.searchsvc.api_fixtures import api, put  # noqa: F401 - a fixture
from tests.support.sync_reports import SOURCE, report, status_path

COMMIT, OTHER = "0123456789abcdef0123456789abcdef01234567", "f" * 40


def quality(**changes: object) -> dict[str, Any]:
    body: dict[str, Any] = {
        "questions": 4,
        "hitAt1": 0.5,
        "hitAt5": 0.75,
        "withFacts": 2,
        "factsShare": 0.5,
        "failed": 1,
        "failedQuestions": [
            {"question": "Where is the flux setting?", "expected": ["docs/flux.md"], "rank": None,
             "missingFacts": ["1.21 gigawatts"]},
        ],
    }  # fmt: skip
    return body | changes


async def listed(api: httpx.AsyncClient) -> dict[str, Any]:  # noqa: F811
    response = await api.get("/api/v1/sources")
    assert response.status_code == 200, response.text
    return next(s for s in response.json()["sources"] if s["sourceIdentifier"] == SOURCE)


def gauge(api: httpx.AsyncClient, name: str, labels: dict[str, str]) -> float | None:  # noqa: F811
    return parts_of(api.app).metrics.registry.get_sample_value(name, {"source": SOURCE, **labels})  # type: ignore[attr-defined]


async def test_the_quality_is_stored_listed_and_kept_for_its_commit(api: httpx.AsyncClient) -> None:  # noqa: F811
    await put(api, "https://x/a.md", "# A\n\nalpha", sourceIdentifier=SOURCE)
    response = await api.put(status_path(), json=report(phase="ok", failedFiles=[], quality=quality()))
    assert response.status_code == 200, response.text
    stored = response.json()["sync"]["quality"]
    assert stored == quality() | {"error": None}
    source = await listed(api)
    assert source["quality"] == 0.75 and source["sync"]["quality"] == stored
    assert gauge(api, "searchsvc_source_quality", {"figure": "hit_at_5"}) == 0.75
    assert gauge(api, "searchsvc_source_quality", {"figure": "facts"}) == 0.5
    assert gauge(api, "searchsvc_source_questions", {"outcome": "failed"}) == 1
    resolved = (await api.get("/api/v1/sources", params={"query": "alpha"})).json()["sources"]
    assert [(s["sourceIdentifier"], s["quality"]) for s in resolved] == [(SOURCE, 0.75)]  # the resolve's slot

    # A later report of the same commit without quality (a sync that fetched nothing) keeps it.
    same = report(phase="ok", failedFiles=[], syncedAt="2026-11-24T11:00:00Z")
    assert (await api.put(status_path(), json=same)).json()["sync"]["quality"] == stored
    assert (await listed(api))["quality"] == 0.75

    # A report of another commit without it: that commit has no figures, and neither do the gauges.
    other = report(phase="ok", failedFiles=[], commit=OTHER, syncedAt="2026-11-24T12:00:00Z")
    assert (await api.put(status_path(), json=other)).json()["sync"]["quality"] is None
    source = await listed(api)
    assert source["quality"] is None and source["sync"]["quality"] is None
    assert gauge(api, "searchsvc_source_quality", {"figure": "hit_at_5"}) is None

    # A progress report keeps the stored outcome's quality.
    again = report(phase="ok", failedFiles=[], commit=OTHER, syncedAt="2026-11-24T13:00:00Z", quality=quality())
    assert (await api.put(status_path(), json=again)).status_code == 200
    progress = {"progress": {"stage": "fetching", "startedAt": "2026-11-24T14:00:00Z"}}
    assert (await api.put(status_path(), json=progress)).status_code == 200
    assert (await listed(api))["sync"]["quality"]["hitAt5"] == 0.75


async def test_a_quality_without_figures_says_why(api: httpx.AsyncClient) -> None:  # noqa: F811
    refused = {"questions": 0, "error": ".kb/questions.yaml: questions[0].expected: Field required"}
    response = await api.put(status_path(), json=report(phase="ok", failedFiles=[], quality=refused))
    assert response.status_code == 200, response.text
    body = response.json()["sync"]["quality"]
    assert body["error"] == refused["error"] and body["hitAt5"] is None and body["failedQuestions"] == []
    assert (await listed(api))["quality"] is None
    assert gauge(api, "searchsvc_source_questions", {"outcome": "asked"}) is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hitAt5": 1.5}, "quality.hitAt5"),
        ({"hitAt1": -0.1}, "quality.hitAt1"),
        ({"questions": 201}, "quality.questions"),
        ({"failed": 0}, "quality"),  # fewer than it lists
        ({"failed": 9}, "quality"),  # more than were asked
        ({"withFacts": 5}, "quality"),
        ({"failedQuestions": [{"question": "a\nb"}]}, "quality.failedQuestions.0.question"),
        ({"failedQuestions": [{"question": "q", "rank": 6}]}, "quality.failedQuestions.0.rank"),
        (
            {"failedQuestions": [{"question": "q"}] * (MAX_REPORTED_QUESTIONS + 1), "failed": 4},
            "quality.failedQuestions",
        ),
        ({"unknown": 1}, "quality.unknown"),
    ],
)
async def test_an_invalid_quality_is_a_422_naming_the_field(
    api: httpx.AsyncClient,  # noqa: F811
    changes: dict[str, object],
    field: str,
) -> None:
    body = quality(**changes)
    response = await api.put(status_path(), json=report(phase="ok", failedFiles=[], quality=body))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert field in response.text
