"""Ask with no chat model configured: extractive answers from the retrieved sentences, offline."""

from __future__ import annotations

import pytest

from kbsearch.deps import context_of
from kbsearch.services.answers.ask import NOTHING_FOUND
from tests.searchsvc.ask_support import DOCS, put_docs, server_sent_events
from tests.support.service import running_service

ROLLBACK, _, _ = DOCS


async def test_the_answer_is_the_closest_sentences_each_citing_its_chunk(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await put_docs(client)
        response = await client.post("/api/v1/ask", json={"question": "How is a failed deployment rolled back?"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["mode"] == "extractive" and body["grounded"] is True
    assert body["answer"].startswith("A failed deployment is rolled back with kubectl rollout undo [1].")
    assert body["citations"][0]["uri"] == ROLLBACK
    assert body["citations"][0]["quote"] == "A failed deployment is rolled back with kubectl rollout undo."
    assert body["searches"] == [{"query": "How is a failed deployment rolled back?", "results": 3, "refs": [1, 2, 3]}]
    cited = {c["n"] for c in body["citations"]}
    assert {s["n"] for s in body["sourcesRetrieved"]} == {1, 2, 3} - cited
    assert body["droppedCitations"] == 0 and body["usage"] == {"promptTokens": 0, "completionTokens": 0}


async def test_the_extractive_stream_has_the_same_events_in_order(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await put_docs(client)
        question = {"question": "How is a failed deployment rolled back?"}
        whole = (await client.post("/api/v1/ask", json=question)).json()
        streamed = await client.post("/api/v1/ask", json={**question, "stream": True})
    events = server_sent_events(streamed.text)
    names = [name for name, _ in events]
    deltas = names.count("delta")
    assert names == ["search"] + ["delta"] * deltas + ["citation"] * len(whole["citations"]) + ["done"]
    assert "".join(data["text"] for name, data in events if name == "delta") == whole["answer"]
    assert events[-1][1] == whole


@pytest.mark.parametrize("store_empty", [True, False])
async def test_nothing_relevant_is_said_plainly_and_cites_nothing(tmp_path, store_empty):
    # Nothing retrieved at all, or retrieved sentences all below the similarity threshold.
    async with running_service("edge", tmp_path / "data", ask_min_similarity=0.95) as client:
        if not store_empty:
            await put_docs(client)
        response = await client.post("/api/v1/ask", json={"question": "What is the airspeed of a swallow?"})
    body = response.json()
    assert body["answer"] == NOTHING_FOUND
    assert body["grounded"] is False and body["citations"] == []
    assert len(body["sourcesRetrieved"]) == (0 if store_empty else 3)


async def test_sources_narrow_the_search(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await put_docs(client)
        other = {"https://git.example/other/rollback.md": DOCS[ROLLBACK]}
        for uri, text in other.items():
            body = {"uri": uri, "content": text, "metadata": {"sourceIdentifier": "other/docs"}}
            assert (await client.put("/api/v1/documents", json=body)).status_code == 200
        response = await client.post(
            "/api/v1/ask", json={"question": "How is a failed deployment rolled back?", "sources": ["other/docs"]}
        )
    body = response.json()
    assert [c["uri"] for c in body["citations"]] == ["https://git.example/other/rollback.md"]
    assert body["sourcesRetrieved"] == []


async def test_every_search_of_an_ask_names_its_origin(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await put_docs(client)
        search = context_of(client.app).search
        origins: list[str] = []
        real_search = search.search

        async def recording(request, caller, *, origin="api"):
            origins.append(origin)
            return await real_search(request, caller, origin=origin)

        search.search = recording  # the query log (issue 11) hooks this same call
        await client.post("/api/v1/ask", json={"question": "How is a failed deployment rolled back?"})
    assert origins == ["ask"]


ARCHIVE = "https://git.example/archive/rollback.md"
ARCHIVE_DOC = (
    "# Archived rollbacks\n\n## Rolling back an old deployment\n\n"
    "An archived deployment is rolled back with kubectl rollout undo as well. "
    "Its previous ReplicaSet is scaled up again while the failed one is scaled down.\n"
)


async def asked_uris(client, **body) -> tuple[set[str], dict]:
    """The URIs an ask cited and retrieved, and its body."""
    response = await client.post("/api/v1/ask", json={"question": "How is a failed deployment rolled back?", **body})
    assert response.status_code == 200, response.text
    answer = response.json()
    return {c["uri"] for c in answer["citations"]} | {s["uri"] for s in answer["sourcesRetrieved"]}, answer


@pytest.mark.parametrize(
    "search_filter",
    [
        {"uriPrefix": "https://git.example/archive/"},
        {"metadata": {"team": "archive"}},
        {"sourceIdentifier": "archive/docs"},
        {"sourceIdentifier": ["archive/docs"], "uriPrefix": "https://git.example/"},
    ],
)
async def test_the_filter_narrows_the_ask_as_it_narrows_a_search(tmp_path, search_filter):
    async with running_service("edge", tmp_path / "data") as client:
        await put_docs(client)
        metadata = {"sourceIdentifier": "archive/docs", "team": "archive"}
        body = {"uri": ARCHIVE, "content": ARCHIVE_DOC, "metadata": metadata}
        assert (await client.put("/api/v1/documents", json=body)).status_code == 200
        everywhere, _ = await asked_uris(client)
        narrowed, answer = await asked_uris(client, filter=search_filter)
    assert {ROLLBACK, ARCHIVE} <= everywhere  # without the filter both rollback pages are found
    assert narrowed == {ARCHIVE}
    assert answer["grounded"] is True and [c["uri"] for c in answer["citations"]] == [ARCHIVE]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"sources": ["ops/docs"], "filter": {"sourceIdentifier": "ops/docs"}}, "not both"),
        ({"filter": {"uriPrefix": ""}}, "filter.uriPrefix"),
        ({"filter": {"metadata": {"bad key!": "x"}}}, "filter.metadata"),
        ({"filter": {"colour": "red"}}, "filter.colour"),
    ],
)
async def test_a_bad_filter_is_refused_naming_the_problem(tmp_path, body, named):
    async with running_service("edge", tmp_path / "data") as client:
        response = await client.post("/api/v1/ask", json={"question": "How do I roll back?", **body})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "VALIDATION_ERROR" and named in response.text


async def test_the_answer_reads_the_first_pages_other_chunks_too(tmp_path):
    # The page ranks first by its overview chunk; the fact asked for sits in another of its chunks.
    overview = " ".join(
        f"A failed deployment is rolled back by the rollback controller, step {i} of the overview." for i in range(8)
    )
    window = " ".join(f"Retention of old revisions, note {i}, is kept in the history table." for i in range(6))
    page = (
        f"# Rollbacks\n\n## Overview\n\n{overview}\n\n## Window\n\n{window} "
        "A failed deployment can be rolled back within fourteen days of its release.\n"
    )
    uri = "https://git.example/ops/rollbacks.md"
    # The hashing embedder is not calibrated: every retrieved chunk counts as relevant here.
    async with running_service("edge", tmp_path / "data", relevance_threshold=0.0, ask_min_relevance=0.0) as client:
        await put_docs(client, {uri: page, **dict(list(DOCS.items())[1:])})
        body = (
            await client.post("/api/v1/ask", json={"question": "How long can a failed deployment be rolled back?"})
        ).json()
    first, within = body["searches"]
    assert within["query"] == first["query"] and within["results"] >= 2
    assert set(within["refs"]) - set(first["refs"])  # chunks of the page the first search did not show
    assert "within fourteen days of its release" in body["answer"]
    assert all(c["uri"] == uri for c in body["citations"] if "fourteen" in c["quote"])


async def test_the_answer_is_gated_by_the_asks_relevance_floor_not_the_searchs_threshold(tmp_path):
    question = "How is a failed deployment rolled back?"
    # Nothing relevant by the search's threshold, yet over the ask's floor: answered, and grounded.
    async with running_service("edge", tmp_path / "a", relevance_threshold=1.0, ask_min_relevance=0.0) as client:
        await put_docs(client)
        search = (await client.post("/api/v1/search", json={"query": question})).json()
        answered = (await client.post("/api/v1/ask", json={"question": question})).json()
    assert search["nothingRelevant"] is True
    assert answered["grounded"] is True and answered["citations"]
    # Relevant by the search's threshold, under the ask's floor: said plainly, nothing cited.
    async with running_service("edge", tmp_path / "b", relevance_threshold=0.0, ask_min_relevance=1.0) as client:
        await put_docs(client)
        search = (await client.post("/api/v1/search", json={"query": question})).json()
        refused = (await client.post("/api/v1/ask", json={"question": question})).json()
    assert search["nothingRelevant"] is False
    assert refused["answer"] == NOTHING_FOUND and refused["grounded"] is False and refused["citations"] == []
