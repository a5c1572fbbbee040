"""Scope on ask: every search an ask makes runs with the caller's scope, in both modes.

The setup is test_scoped_access's: team b's documents carry a word no team-a document has, and
the model is scripted to cite every chunk number it was shown, and numbers it was never shown.
"""

from __future__ import annotations

import json

from tests.support.chatstub import Answer, CallTools, chat_stub, cite_everything
from tests.support.scoped_access import (
    A_DOCS,
    ADMIN,
    B_DOCS,
    B_WORD,
    ORPHAN,
    TEAM_A,
    TOKENS,
    assert_no_b,
    bearer,
    content,
)
from tests.support.service import running_service

NEVER_SHOWN = "".join(f"[{n}]" for n in range(7, 30))


async def put_all(client) -> None:
    for uri, source in {**A_DOCS, **B_DOCS}.items():
        body = {"uri": uri, "content": content(uri, source), "metadata": {"sourceIdentifier": source}}
        assert (await client.put("/api/v1/documents", json=body, headers=bearer(ADMIN))).status_code == 200
    orphan = {"uri": ORPHAN, "content": content(ORPHAN, "none"), "metadata": {}}
    assert (await client.put("/api/v1/documents", json=orphan, headers=bearer(ADMIN))).status_code == 200


def without_queries(body: dict) -> str:
    """The response as JSON, minus the search queries: those echo what the model asked for."""
    return json.dumps({k: v for k, v in body.items() if k != "searches"})


def search_for_b_then_cite_everything() -> list:
    return [
        CallTools([("search", {"query": f"{B_WORD} secrets"})]),
        CallTools([("search", {"query": "shared words about deploys"})]),
        cite_everything(extra=NEVER_SHOWN),
    ]


async def test_team_a_ask_never_cites_or_shows_team_b(tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    script = [
        *search_for_b_then_cite_everything(),  # team a
        CallTools([("search", {"query": f"{B_WORD} secrets"})]),  # team a, narrowed to b's source
        Answer("The zebrafish secrets are [1]."),
        *search_for_b_then_cite_everything(),  # the admin, who sees everything
    ]
    with chat_stub(script) as stub:
        # Every retrieved chunk counts as relevant: the test is about whose chunks are cited, and
        # team a's chunks sit near the calibrated threshold for these questions.
        settings = {
            "llm_model": "stub-model",
            "llm_base_url": stub.url,
            "relevance_threshold": 0.0,
            "ask_min_relevance": 0.0,
        }
        async with running_service("edge", tmp_path / "data", tokens_file=tokens, **settings) as client:
            await put_all(client)
            ask = {"question": f"What are the {B_WORD} secrets?"}
            team_a = await client.post("/api/v1/ask", json=ask, headers=bearer(TEAM_A))
            narrowed = await client.post(
                "/api/v1/ask", json={**ask, "sources": ["team-b/docs"]}, headers=bearer(TEAM_A)
            )
            admin = await client.post("/api/v1/ask", json=ask, headers=bearer(ADMIN))

    body = team_a.json()
    assert team_a.status_code == 200, team_a.text
    assert body["grounded"] is True and body["citations"]
    assert {c["sourceIdentifier"] for c in body["citations"]} == {"team-a/docs"}
    assert body["droppedCitations"] >= len(range(7, 30)) - len(A_DOCS) * 3
    assert_no_b(without_queries(body))
    for request in stub.requests[:3]:  # what the model was shown for team a
        for message in request["messages"]:
            if message["role"] == "tool":
                assert_no_b(message["content"])

    # `sources` narrows within the scope; it never opens another team's source.
    assert narrowed.status_code == 200
    assert narrowed.json()["grounded"] is False and narrowed.json()["citations"] == []
    assert narrowed.json()["searches"][0]["results"] == 0

    # The same script as the admin cites team b: the check above could fail.
    assert any(c["sourceIdentifier"] == "team-b/docs" for c in admin.json()["citations"])


async def test_team_a_extractive_ask_never_cites_team_b(tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    # Every retrieved chunk counts as relevant here: the test is about whose chunks are cited.
    settings = {"ask_min_similarity": 0.0, "relevance_threshold": 0.0, "ask_min_relevance": 0.0}
    async with running_service("edge", tmp_path / "data", tokens_file=tokens, **settings) as client:
        await put_all(client)
        ask = {"question": f"Where does the {B_WORD} team keep its secrets?"}
        team_a = await client.post("/api/v1/ask", json=ask, headers=bearer(TEAM_A))
        admin = await client.post("/api/v1/ask", json=ask, headers=bearer(ADMIN))
    body = team_a.json()
    assert body["mode"] == "extractive" and body["citations"]
    assert {c["sourceIdentifier"] for c in body["citations"]} == {"team-a/docs"}
    assert_no_b(without_queries(body))
    assert admin.json()["citations"][0]["sourceIdentifier"] == "team-b/docs"
    assert B_WORD in admin.json()["answer"]
