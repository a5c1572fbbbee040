"""GET /api/v1/sources with versions and ?query=, and searches naming a version no source holds.

Two tenants (test_scoped_access's tokens): team a never learns of team b's sources, versions or words.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbsearch.services.sources import MAX_QUERY_TOKENS, tokens
from tests.support.scoped_access import ADMIN, TEAM_A, TOKENS, assert_no_b, bearer, content
from tests.support.service import STORE_KINDS, running_service

A_VERSIONS = {"2.20": "team-a/docs", "2.21": "team-a/docs", "9.9": "team-b/docs"}


@pytest.fixture(params=STORE_KINDS)
async def service(request, tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS)
    async with running_service(request.param, tmp_path / "data", tokens_file=path) as client:
        documents = [
            (f"https://git.example/{source[5]}/docs/{version}/install.md", source, version)
            for version, source in A_VERSIONS.items()
        ]
        documents.append(("https://git.example/a/guide.md", "team-a/guide", None))
        for uri, source, version in documents:
            metadata = {"sourceIdentifier": source} | ({"version": version} if version else {})
            body = {"uri": uri, "content": content(uri, source), "metadata": metadata}
            response = await client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))
            assert response.status_code == 200, response.text
        yield client


async def sources(client, token: str, **params) -> list[dict]:
    response = await client.get("/api/v1/sources", params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()["sources"]


async def test_sources_list_their_versions_newest_first_and_a_null_quality(service):
    by_id = {s["sourceIdentifier"]: s for s in await sources(service, ADMIN)}
    docs = by_id["team-a/docs"]
    assert [v["version"] for v in docs["versions"]] == ["2.21", "2.20"]
    assert sum(v["chunks"] for v in docs["versions"]) == docs["chunks"] and docs["unversionedChunks"] == 0
    assert by_id["team-a/guide"]["versions"] == [] and by_id["team-a/guide"]["unversionedChunks"] > 0
    assert docs["quality"] is None and docs["match"] is None and docs["lastSyncedAt"] is None


async def test_a_query_names_the_sources_that_fit_best_first_with_why(service):
    found = await sources(service, ADMIN, query="team-b docs 9.9")
    assert found[0]["sourceIdentifier"] == "team-b/docs"
    assert found[0]["match"]["nameTokens"] == ["team", "b", "docs"] and found[0]["match"]["version"] == "9.9"
    assert all(s["match"]["score"] >= t["match"]["score"] for s, t in itertools.pairwise(found))
    # A task alone: the documents' words find the source. (Words every page holds alike would not: the
    # calibrated relevance cannot single out a page among identical ones.)
    by_task = await sources(service, ADMIN, query="who keeps its secrets here")
    assert [s["sourceIdentifier"] for s in by_task] == ["team-b/docs"] and by_task[0]["match"]["relevance"] > 0


@pytest.mark.parametrize("query", ["team-b docs 9.9", "zebrafish team secrets", "docs"])
async def test_a_scoped_caller_never_learns_of_another_teams_sources(service, query):
    found = await sources(service, TEAM_A, query=query)
    assert {s["sourceIdentifier"] for s in found} <= {"team-a/docs", "team-a/guide"}
    assert_no_b(json.dumps(found))
    assert_no_b(json.dumps(await sources(service, TEAM_A)))


async def test_a_search_for_an_absent_version_says_so_and_lists_the_callers_versions(service):
    for token in (ADMIN, TEAM_A):
        response = await service.post(
            "/api/v1/search",
            json={"query": "install", "filter": {"sourceIdentifier": "team-a/docs", "version": "3.0"}},
            headers=bearer(token),
        )
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert error["code"] == "VERSION_NOT_FOUND"
        assert error["details"] == {"version": "3.0", "available": ["2.21", "2.20"]}
    # Team b's version exists, but not for team a: the same answer as any absent version, naming only a's.
    response = await service.get("/api/v1/search", params={"q": "install", "version": "9.9"}, headers=bearer(TEAM_A))
    assert response.status_code == 404 and response.json()["error"]["details"]["available"] == ["2.21", "2.20"]
    assert_no_b(json.dumps(response.json()))


async def test_source_at_version_searches_that_version_of_that_source(service):
    response = await service.post(
        "/api/v1/search", json={"query": "install", "filter": {"version": "team-a/docs@2.20"}}, headers=bearer(ADMIN)
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results and {(r["sourceIdentifier"], r["version"]) for r in results} == {("team-a/docs", "2.20")}
    refused = await service.post(
        "/api/v1/search",
        json={"query": "x", "filter": {"version": "team-a/docs@2.20", "sourceIdentifier": "team-a/guide"}},
        headers=bearer(ADMIN),
    )
    assert refused.status_code == 422 and "team-a/docs" in refused.json()["error"]["message"]


async def test_an_ask_for_an_absent_version_fails_with_the_same_code(service):
    response = await service.post(
        "/api/v1/ask", json={"question": "how do I install it?", "filter": {"version": "3.0"}}, headers=bearer(TEAM_A)
    )
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "VERSION_NOT_FOUND"


@given(st.text(max_size=5000))
def test_a_query_is_read_as_a_bounded_list_of_words(text):
    words = tokens(text)
    assert len(words) <= MAX_QUERY_TOKENS
    assert all(w and w == w.lower() and not w.startswith(".") for w in words)
