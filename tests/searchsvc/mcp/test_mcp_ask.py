"""The MCP `ask_knowledge` tool over real HTTP, with the SDK's own client, against real service processes:
one in extractive mode, one whose chat model is the scripted stub on 127.0.0.1. Scope as in REST."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kbsearch.services.answers.ask import NOTHING_FOUND
from tests.searchsvc.ask_support import DOCS
from tests.support.chatstub import Answer, CallTools, Fail, chat_stub
from tests.support.mcpclient import everything, mcp_client, text_of
from tests.support.scoped_access import ADMIN, B_WORD, TEAM_A, TOKENS, assert_no_b, bearer
from tests.support.service_process import ServiceProcess

ROLLBACK, CANARY, _ = DOCS
B_DOC = "https://git.example/b/zebrafish.md"
B_CONTENT = f"# Zebrafish\n\n## Secrets\n\nThe {B_WORD} team rolls back a failed deployment with a secret script.\n"


def start(root: Path, **env: str) -> ServiceProcess:
    (root / "tokens.yaml").write_text(TOKENS)
    settings = {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml"), **env}
    process = ServiceProcess(root / "service.log", settings).start()
    process.wait_ready()
    documents = {uri: ("team-a/docs", text) for uri, text in DOCS.items()} | {B_DOC: ("team-b/docs", B_CONTENT)}
    for uri, (source, text) in documents.items():
        body = {"uri": uri, "content": text, "metadata": {"sourceIdentifier": source}}
        assert process.client.put("/api/v1/documents", json=body, headers=bearer(ADMIN)).status_code == 200
    return process


@pytest.fixture(scope="module")
def extractive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = start(tmp_path_factory.mktemp("mcp-ask"))
    try:
        yield f"http://127.0.0.1:{process.port}"
    finally:
        process.stop()


async def ask(base_url: str, token: str, **arguments):
    async with mcp_client(base_url, token) as client:
        return await client.call_tool("ask_knowledge", arguments)


async def test_ask_knowledge_is_listed_with_its_schemas_as_a_read_only_tool(extractive):
    async with mcp_client(extractive, TEAM_A) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    tool = tools["ask_knowledge"]
    assert tool.input_schema["required"] == ["question"]
    assert set(tool.input_schema["properties"]) == {"question", "sources", "uri_prefix", "version"}
    assert {"answer", "grounded", "citations", "sourcesRetrieved", "droppedCitations"} <= set(
        tool.output_schema["properties"]
    )
    assert tool.annotations.read_only_hint is True and tool.annotations.destructive_hint is False


async def test_ask_knowledge_answers_with_numbered_citations_in_text_and_records(extractive):
    result = await ask(extractive, TEAM_A, question="How is a failed deployment rolled back?")
    assert not result.is_error, text_of(result)
    answer = result.structured_content
    assert answer["mode"] == "extractive" and answer["grounded"] is True
    assert answer["citations"][0]["uri"] == ROLLBACK
    text = text_of(result)
    # The answer, then each citation: "[n] title > headings - uri (chunk i)" and the quoted sentence.
    assert text.startswith(answer["answer"] + "\n\nCitations:\n")
    first = answer["citations"][0]
    assert f"[{first['n']}] Rollbacks \u203a Rolling back a deployment \u2014 {ROLLBACK} (chunk 0)" in text
    assert f'    "{first["quote"]}"' in text
    assert '"sourcesRetrieved"' not in text and "{" not in text  # compact, not a second copy of the JSON


async def test_team_a_never_gets_team_b_through_ask_knowledge(extractive):
    for arguments in ({}, {"sources": ["team-b/docs"]}):
        result = await ask(extractive, TEAM_A, question=f"How does the {B_WORD} team roll back?", **arguments)
        assert not result.is_error, text_of(result)
        record = result.structured_content
        record.pop("searches")  # they echo the question, which names team b's word
        assert_no_b(text_of(result).replace(f"How does the {B_WORD} team roll back?", "") + str(record))
    narrowed = await ask(
        extractive, TEAM_A, question="How is a failed deployment rolled back?", sources=["team-b/docs"]
    )
    assert text_of(narrowed) == NOTHING_FOUND and narrowed.structured_content["grounded"] is False
    admin = await ask(extractive, ADMIN, question=f"How does the {B_WORD} team roll back?")
    assert B_DOC in {c["uri"] for c in admin.structured_content["citations"]}  # the check above could fail


async def test_ask_knowledge_with_a_uri_prefix_reads_only_documents_under_it(extractive):
    question = "How is a failed deployment rolled back?"
    everywhere = await ask(extractive, TEAM_A, question=question)
    narrowed = await ask(extractive, TEAM_A, question=question, uri_prefix="https://git.example/ops/canary")
    assert not narrowed.is_error, text_of(narrowed)
    assert everywhere.structured_content["citations"][0]["uri"] == ROLLBACK
    record = narrowed.structured_content
    assert {s["uri"] for s in record["sourcesRetrieved"]} | {c["uri"] for c in record["citations"]} == {CANARY}
    assert ROLLBACK not in text_of(narrowed)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"question": " "}, "question"),
        ({"question": "x" * 2001}, "question"),
        ({"question": "q", "sources": []}, "sources"),
        ({"question": "q", "uri_prefix": ""}, "uri_prefix"),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_argument(extractive, arguments, named):
    result = await ask(extractive, TEAM_A, **arguments)
    assert result.is_error and f"INVALID_ARGUMENT: {named}" in text_of(result)
    assert "x" * 100 not in everything(result)


async def test_ask_knowledge_in_llm_mode_drops_unverified_citations_and_reports_llm_failures(tmp_path):
    script = [
        CallTools([("search", {"query": "roll back deployment"})]),
        Answer("Roll back with kubectl rollout undo [1]. Also see [12]."),
        Fail(400),
    ]
    with chat_stub(script) as stub:
        process = start(
            tmp_path, SEARCHSVC_LLM_MODEL="stub-model", SEARCHSVC_LLM_BASE_URL=stub.url, SEARCHSVC_LLM_MAX_RETRIES="0"
        )
        base_url = f"http://127.0.0.1:{process.port}"
        try:
            answered = await ask(base_url, TEAM_A, question="How do I roll back?")
            failed = await ask(base_url, TEAM_A, question="How do I roll back?")
        finally:
            process.stop()
    assert not answered.is_error, text_of(answered)
    record = answered.structured_content
    assert record["mode"] == "llm" and record["droppedCitations"] == 1
    assert record["answer"] == "Roll back with kubectl rollout undo [1]. Also see."
    assert [c["n"] for c in record["citations"]] == [1]
    assert "[12]" not in text_of(answered) and "Citations:\n[1] " in text_of(answered)
    assert failed.is_error and "LLM_UNAVAILABLE: the chat endpoint answered HTTP 400" in text_of(failed)
    # The model's search ran in team a's scope: no team b chunk was shown to it.
    for request in stub.requests:
        for message in request["messages"]:
            if message["role"] == "tool":
                assert_no_b(message["content"])
