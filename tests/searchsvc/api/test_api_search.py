"""Search through the HTTP API on both stores: modes, filters, result shape, GET twin."""

from __future__ import annotations

import pytest

from tests.searchsvc.api_fixtures import put

DOCS = {
    "https://git.example/team/blob/main/install.md": (
        "---\ntitle: Installing\ntags: [setup, helm]\n---\n"
        "# Install\n\n## Helm\n\nRun helm install to deploy the chart.\n",
        {"sourceIdentifier": "team/docs", "lang": "en"},
    ),
    "https://git.example/team/blob/main/backup.md": (
        "# Backups\n\nSnapshots of volumes are taken nightly and kept for a week.\n",
        {"sourceIdentifier": "team/docs", "lang": "de"},
    ),
    "https://git.example/ops/blob/main/runbook.md": (
        "# Runbook\n\nWhen the pager fires, check the dashboards, then the logs.\n",
        {"sourceIdentifier": "ops", "lang": "en", "tier": 1},
    ),
}


@pytest.fixture
async def loaded(api):
    for uri, (content, metadata) in DOCS.items():
        await put(api, uri, content, **metadata)
    return api


async def search(client, query: str, **body) -> list[dict]:
    response = await client.post("/api/v1/search", json={"query": query, **body})
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["query"] == query and payload["mode"] == body.get("mode", "hybrid")
    assert payload["tookMs"] >= 0
    return payload["results"]


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
async def test_each_mode_finds_the_matching_document_first(loaded, mode):
    results = await search(loaded, "snapshots of volumes nightly", mode=mode)
    assert results[0]["uri"].endswith("backup.md")


async def test_without_peers_the_response_is_whole_and_names_no_peer(loaded):
    response = await loaded.post("/api/v1/search", json={"query": "helm install chart"})
    body = response.json()
    assert set(body) == {"query", "mode", "results", "tookMs", "nothingRelevant", "partial", "unansweredPeers"}
    assert (body["partial"], body["unansweredPeers"]) == (False, [])
    got = await loaded.get("/api/v1/search", params={"q": "helm install chart"})
    assert (got.json()["partial"], got.json()["unansweredPeers"]) == (False, [])


async def test_result_carries_every_field(loaded):
    [top, *_] = await search(loaded, "helm install chart", limit=1)
    assert set(top) == {
        "id",
        "uri",
        "chunkIndex",
        "totalChunks",
        "content",
        "score",
        "relevance",
        "title",
        "headings",
        "metadata",
        "sourceIdentifier",
        "version",
        "otherVersions",
        "moreMatches",
        "page",
        "cell",
        "stores",
    }
    assert top["stores"] == ["local"]  # SEARCHSVC_STORE_NAME; a peer's hits name the peer
    assert 0 <= top["relevance"] <= 1
    assert (top["version"], top["otherVersions"], top["moreMatches"]) == (None, [], 0)
    assert top["uri"].endswith("install.md")
    assert top["title"] == "Installing"
    assert top["headings"] == ["Install", "Helm"]  # the heading path of the text it holds
    assert top["sourceIdentifier"] == "team/docs"
    assert top["metadata"]["lang"] == "en"
    assert "title: Installing" not in top["content"]  # front matter is never body text
    assert (top["chunkIndex"], top["totalChunks"]) == (0, 1)


async def test_front_matter_tags_are_searchable(loaded):
    results = await search(loaded, "setup", mode="keyword")
    assert [r["uri"] for r in results][:1] == ["https://git.example/team/blob/main/install.md"]


async def test_filters_by_source_prefix_and_metadata(loaded):
    by_source = await search(loaded, "the", mode="dense", filter={"sourceIdentifier": "ops"})
    assert {r["sourceIdentifier"] for r in by_source} == {"ops"}
    by_list = await search(loaded, "the", mode="dense", filter={"sourceIdentifier": ["ops", "team/docs"]})
    assert len({r["uri"] for r in by_list}) == 3
    by_prefix = await search(loaded, "the", mode="dense", filter={"uriPrefix": "https://git.example/team/"})
    assert {r["uri"].split("/")[3] for r in by_prefix} == {"team"}
    assert by_prefix and all(r["uri"].startswith("https://git.example/team/") for r in by_prefix)
    by_meta = await search(loaded, "the", mode="dense", filter={"metadata": {"lang": "de"}})
    assert [r["uri"] for r in by_meta] == ["https://git.example/team/blob/main/backup.md"]
    by_number = await search(loaded, "the", mode="dense", filter={"metadata": {"tier": 1}})
    assert [r["uri"] for r in by_number] == ["https://git.example/ops/blob/main/runbook.md"]
    nothing = await search(loaded, "the", mode="dense", filter={"sourceIdentifier": "nobody"})
    assert nothing == []


async def test_prefix_filter_is_a_prefix_not_an_exact_match(loaded):
    results = await search(loaded, "runbook", filter={"uriPrefix": "https://git.example/ops"})
    assert [r["uri"] for r in results] == ["https://git.example/ops/blob/main/runbook.md"]


async def test_keyword_mode_with_only_stopwords_returns_nothing(loaded):
    assert await search(loaded, "the of and", mode="keyword") == []


async def test_limit_is_respected(loaded):
    assert len(await search(loaded, "the", mode="dense", limit=2)) == 2


async def test_get_search_matches_post(loaded):
    post = await search(loaded, "pager dashboards", limit=2)
    response = await loaded.get("/api/v1/search", params={"q": "pager dashboards", "limit": 2})
    assert response.status_code == 200
    assert [r["id"] for r in response.json()["results"]] == [r["id"] for r in post]
    assert "engine;dur=" in response.headers["server-timing"]
    scoped = await loaded.get("/api/v1/search", params=[("q", "the"), ("mode", "dense"), ("sourceIdentifier", "ops")])
    assert {r["sourceIdentifier"] for r in scoped.json()["results"]} == {"ops"}
    bad = await loaded.get("/api/v1/search", params={"q": "x", "limit": 0})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_ERROR"


async def test_reingesting_never_duplicates_results(loaded):
    for uri, (content, metadata) in DOCS.items():
        await put(loaded, uri, content + "\nMore text.\n", **metadata)
    results = await search(loaded, "the", mode="dense", limit=50)
    assert len(results) == len({r["id"] for r in results}) == 3


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
async def test_a_query_with_ligatures_is_read_as_its_letters(loaded, mode):
    """NFKC on the query, as on PDF text and in the keyword lane: "ﬁ" asks for "fi"."""
    plain = await search(loaded, "deploy the chart with helm configuration files", mode=mode)
    ligatured = await search(loaded, "deploy the chart with helm conﬁguration ﬁles", mode=mode)
    assert [(r["uri"], r["relevance"]) for r in ligatured] == [(r["uri"], r["relevance"]) for r in plain]
