"""Literal search through the HTTP API on both stores: the query as written, its case, its bounds."""

from __future__ import annotations

import pytest

from kbsearch.schemas.search import MAX_LITERAL_CHARS
from tests.searchsvc.api_fixtures import put

DOCS = {
    "https://git.example/k/dry-run.md": (
        "# Dry runs\n\nCheck a manifest with `kubectl apply --dry-run=server -f app.yaml` first.\n",
        "k/docs",
    ),
    "https://git.example/k/server.md": (
        "# Servers\n\nA dry run of the server: the server runs dry, as dry-run servers do.\n",
        "k/docs",
    ),
    "https://git.example/k/errors.md": (
        "# Errors\n\nThe proxy logs ERR_CONN_RESET when the peer hangs up; ERR_CONN_RESET again on retry, "
        "and ERR_CONN_RESET a third time.\n",
        "k/docs",
    ),
    "https://git.example/k/lower.md": (
        "# Lower\n\nSome clients print err_conn_reset in lower case.\n",
        "k/docs",
    ),
    "https://git.example/other/errors.md": (
        "# Other\n\nAnother team's ERR_CONN_RESET page.\n",
        "other/docs",
    ),
}


@pytest.fixture
async def loaded(api):
    for uri, (content, source) in DOCS.items():
        await put(api, uri, content, sourceIdentifier=source)
    return api


async def literal(client, query: str, **body) -> list[str]:
    response = await client.post("/api/v1/search", json={"query": query, "mode": "literal", **body})
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["mode"] == "literal"
    return [r["uri"].rsplit("git.example/", 1)[1] for r in payload["results"]]


async def test_a_flag_is_found_as_written_and_not_as_its_words(loaded):
    assert await literal(loaded, "--dry-run=server") == ["k/dry-run.md"]
    # The stemmed keyword lane finds the page of the words too: literal is what tells them apart.
    keyword = await loaded.post("/api/v1/search", json={"query": "--dry-run=server", "mode": "keyword"})
    assert "https://git.example/k/server.md" in [r["uri"] for r in keyword.json()["results"]]


async def test_case_is_folded_unless_case_sensitive(loaded):
    folded = await literal(loaded, "ERR_CONN_RESET")
    # Three occurrences rank first; the others hold it once.
    assert folded[0] == "k/errors.md"
    assert set(folded) == {"k/errors.md", "k/lower.md", "other/errors.md"}
    assert set(await literal(loaded, "ERR_CONN_RESET", caseSensitive=True)) == {"k/errors.md", "other/errors.md"}
    assert await literal(loaded, "err_conn_reset", caseSensitive=True) == ["k/lower.md"]


async def test_filters_apply_as_in_every_mode(loaded):
    assert await literal(loaded, "ERR_CONN_RESET", filter={"sourceIdentifier": "other/docs"}) == ["other/errors.md"]
    assert await literal(loaded, "ERR_CONN_RESET", filter={"uriPrefix": "https://git.example/k/l"}) == ["k/lower.md"]


async def test_every_chunk_and_the_response_shape(loaded):
    response = await loaded.post(
        "/api/v1/search", json={"query": "ERR_CONN_RESET", "mode": "literal", "collapse": False, "limit": 1}
    )
    body = response.json()
    assert set(body) == {"query", "mode", "results", "tookMs", "nothingRelevant", "partial", "unansweredPeers"}
    [top] = body["results"]
    assert top["uri"].endswith("k/errors.md") and "ERR_CONN_RESET" in top["content"]
    assert top["score"] == 3.0 and 0.0 <= top["relevance"] <= 1.0


async def test_get_search_takes_literal_and_case_sensitive(loaded):
    response = await loaded.get(
        "/api/v1/search", params={"q": "err_conn_reset", "mode": "literal", "caseSensitive": True}
    )
    assert response.status_code == 200, response.text
    assert [r["uri"] for r in response.json()["results"]] == ["https://git.example/k/lower.md"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"query": "x" * (MAX_LITERAL_CHARS + 1), "mode": "literal"}, f"at most {MAX_LITERAL_CHARS}"),
        ({"query": "--> ==", "mode": "literal"}, "letter or digit"),
        ({"query": "helm", "caseSensitive": True}, "mode literal only"),
    ],
)
async def test_a_literal_query_out_of_bounds_is_refused(loaded, body, message):
    response = await loaded.post("/api/v1/search", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and message in error["message"]
