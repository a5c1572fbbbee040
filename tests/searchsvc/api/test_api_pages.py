"""One page per hit: versions of a page collapse to the newest, chunks of a document to its best, on both stores."""

from __future__ import annotations

from tests.searchsvc.api_fixtures import put

SOURCE = "keda/docs"
PAGE = "# Scaling Jobs\n\nA ScaledJob runs one Kubernetes Job per event of the queue it watches. {extra}\n"


async def search(client, query: str, **body) -> dict:
    response = await client.post("/api/v1/search", json={"query": query, **body})
    assert response.status_code == 200, response.text
    return response.json()


async def load_versions(client) -> None:
    for version, extra in (("2.9", "Old field name."), ("2.21", "Current field name."), ("2.10", "Middle.")):
        path = f"content/docs/{version}/concepts/scaling-jobs.md"
        await put(client, f"https://git.example/keda/{path}", PAGE.format(extra=extra),
                  sourceIdentifier=SOURCE, path=path)  # fmt: skip
    other = "content/docs/2.21/concepts/troubleshooting.md"
    await put(client, f"https://git.example/keda/{other}", "# Troubleshooting\n\nCheck the operator logs first.\n",
              sourceIdentifier=SOURCE, path=other)  # fmt: skip


async def test_the_versions_of_a_page_collapse_into_the_newest(api):
    await load_versions(api)
    body = await search(api, "ScaledJob runs one Kubernetes Job per event")
    pages = [r for r in body["results"] if "scaling-jobs" in r["uri"]]
    assert len(pages) == 1
    [page] = pages
    # 2.21 is newer than 2.9 and 2.10 (versions, not strings), whichever copy scored best.
    assert page["version"] == "2.21" and "/2.21/" in page["uri"]
    assert page["otherVersions"] == ["2.10", "2.9"]
    assert "Current field name." in page["content"]


async def test_a_version_filter_gives_that_version_only(api):
    await load_versions(api)
    body = await search(api, "ScaledJob runs one Kubernetes Job per event", filter={"version": "2.9"})
    assert [r["version"] for r in body["results"]] == ["2.9"]
    assert body["results"][0]["otherVersions"] == []
    get = await api.get("/api/v1/search", params={"q": "ScaledJob Kubernetes Job", "version": "2.10"})
    assert [r["version"] for r in get.json()["results"]] == ["2.10"]
    bad = await api.post("/api/v1/search", json={"query": "jobs", "filter": {"version": "2.9; drop"}})
    assert bad.status_code == 422 and "version" in bad.text


async def test_chunk_level_results_on_request(api):
    await load_versions(api)
    body = await search(api, "ScaledJob runs one Kubernetes Job per event", collapse=False, limit=10)
    versions = sorted(r["version"] for r in body["results"] if "scaling-jobs" in r["uri"])
    assert versions == ["2.10", "2.21", "2.9"]


async def test_several_chunks_of_one_document_are_one_result(api):
    sections = "\n\n".join(
        f"## Step {i}\n\n" + " ".join(f"Rotate the signing key step {i} sentence {j}." for j in range(14))
        for i in range(5)
    )
    await put(api, "https://git.example/ops/rotate.md", "# Key rotation\n\n" + sections, sourceIdentifier="ops")
    await put(api, "https://git.example/ops/other.md", "# Other\n\nRotate nothing here at all, ever.\n",
              sourceIdentifier="ops")  # fmt: skip
    body = await search(api, "rotate the signing key step", mode="keyword")
    uris = [r["uri"] for r in body["results"]]
    assert len(uris) == len(set(uris))
    rotate = next(r for r in body["results"] if r["uri"].endswith("rotate.md"))
    assert rotate["moreMatches"] >= 3
    chunks = await search(api, "rotate the signing key step", mode="keyword", collapse=False)
    assert sum(r["uri"].endswith("rotate.md") for r in chunks["results"]) == rotate["moreMatches"] + 1


async def test_relevance_tells_an_answer_from_nonsense(api):
    await load_versions(api)
    good = await search(api, "ScaledJob runs one Kubernetes Job per event of the queue")
    nonsense = await search(api, "zqxj vbnm plok")
    assert good["results"] and not good["nothingRelevant"]
    assert good["results"][0]["relevance"] > 0.5
    assert nonsense["nothingRelevant"] is True
    assert all(r["relevance"] < 0.5 for r in nonsense["results"])


async def test_an_answer_is_grounded_only_on_relevant_passages(api):
    await load_versions(api)
    answered = await api.post("/api/v1/ask", json={"question": "Does a ScaledJob run one Kubernetes Job per event?"})
    off_topic = await api.post("/api/v1/ask", json={"question": "zqxj vbnm plok"})
    assert answered.json()["grounded"] is True and answered.json()["citations"]
    body = off_topic.json()
    assert body["grounded"] is False and body["citations"] == []
    assert body["answer"].startswith("I found nothing")
