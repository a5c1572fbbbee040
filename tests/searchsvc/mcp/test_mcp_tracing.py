"""MCP traces: the SDK's server span per request, parented from `params._meta.traceparent`, with the
service's retrieval span below a tool call, exported over OTLP/HTTP to a real receiver; no text in any."""

from __future__ import annotations

import json

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.searchsvc.ask_support import DOCS, put_docs
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.otlp import attributes, otlp_receiver
from tests.support.service import BASE_URL, running_service

pytestmark = pytest.mark.slow

TOKEN = "s3cret-token-value-for-mcp-tracing"
CALLER_SPAN = "00f067aa0ba902b7"
TOOL_TRACE, READ_TRACE, PROMPT_TRACE = (
    "1af7651916cd43dd8448eb211c80319c",
    "2af7651916cd43dd8448eb211c80319c",
    "3af7651916cd43dd8448eb211c80319c",
)
QUERY = "how is a failed deployment rolled back"
QUESTION = "what keeps a canary release safe"
DOC = next(iter(DOCS))


def with_traceparent(message: dict, trace_id: str) -> dict:
    message["params"]["_meta"] = {"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}
    return message


def descendants(spans: list, parent) -> list:
    found, below = [], [s for s in spans if s.parent_span_id == parent.span_id]
    while below:
        span = below.pop()
        found.append(span)
        below += [s for s in spans if s.parent_span_id == span.span_id]
    return found


async def test_tool_call_resource_read_and_prompt_spans_join_the_callers_trace(tmp_path):
    headers = {"Authorization": f"Bearer {TOKEN}", "accept": ACCEPT}
    with otlp_receiver() as receiver:
        async with running_service(
            "edge", tmp_path, api_token=TOKEN, tracing=True, tracing_endpoint=receiver.url
        ) as client:
            await put_docs(client, Authorization=f"Bearer {TOKEN}")
            messages = [
                with_traceparent(
                    rpc("tools/call", {"name": "search_knowledge", "arguments": {"query": QUERY}}), TOOL_TRACE
                ),
                with_traceparent(rpc("resources/read", {"uri": f"kb://documents/{DOC}"}), READ_TRACE),
                with_traceparent(
                    rpc("prompts/get", {"name": "answer_with_citations", "arguments": {"question": QUESTION}}),
                    PROMPT_TRACE,
                ),
            ]
            answers = []
            for message in messages:
                answered = await client.post("/mcp", json=message, headers=headers)
                assert answered.status_code == 200 and "error" not in answered.json(), answered.text
                answers.append(answered.json()["result"])
    spans = receiver.spans

    # tools/call: the SDK's server span in the caller's trace, the service's retrieval below it.
    (tool,) = [s for s in spans if s.name == "tools/call search_knowledge"]
    assert (tool.trace_id.hex(), tool.parent_span_id.hex()) == (TOOL_TRACE, CALLER_SPAN)
    found = attributes(tool)
    assert found["mcp.method.name"] == "tools/call" and found["gen_ai.tool.name"] == "search_knowledge"
    assert found["gen_ai.operation.name"] == "execute_tool"
    (retrieval,) = [s for s in descendants(spans, tool) if s.name.startswith("retrieval ")]
    assert retrieval.trace_id.hex() == TOOL_TRACE
    shown = json.loads(attributes(retrieval)["gen_ai.retrieval.documents"])
    results = answers[0]["structuredContent"]["results"]
    assert [d["id"] for d in shown] == [r["id"] for r in results][: len(shown)] and shown
    assert all(isinstance(d["score"], float) and set(d) == {"id", "score"} for d in shown)

    # resources/read: its span names the URI it read (an identifier), in the caller's trace.
    (read,) = [s for s in spans if s.name == "resources/read"]
    assert (read.trace_id.hex(), read.parent_span_id.hex()) == (READ_TRACE, CALLER_SPAN)
    assert attributes(read)["mcp.method.name"] == "resources/read"
    assert attributes(read)["mcp.resource.uri"] == f"kb://documents/{DOC}"

    # prompts/get: the prompt by name.
    (prompt,) = [s for s in spans if s.name == "prompts/get answer_with_citations"]
    assert prompt.trace_id.hex() == PROMPT_TRACE
    assert attributes(prompt)["gen_ai.prompt.name"] == "answer_with_citations"

    # No token, no query, no question, no document text in any span.
    sentences = {w for text in DOCS.values() for w in text.split(". ") if len(w) > 20}
    for span in spans:
        for value in attributes(span).values():
            text = str(value)
            assert TOKEN not in text and QUERY not in text and QUESTION not in text
            assert not any(sentence in text for sentence in sentences)


async def test_the_sdk_clients_own_span_is_the_parent_of_the_servers(tmp_path):
    """The real SDK client, in a process whose tracing is on, puts its span's traceparent in `_meta`."""
    with otlp_receiver() as receiver:
        async with running_service(
            "edge", tmp_path, api_token=TOKEN, tracing=True, tracing_endpoint=receiver.url
        ) as client:
            await put_docs(client, Authorization=f"Bearer {TOKEN}")
            transport = httpx2.ASGITransport(app=client.app)  # type: ignore[attr-defined]
            async with (
                httpx2.AsyncClient(transport=transport, headers={"authorization": f"Bearer {TOKEN}"}) as http,
                Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=http), cache=None) as mcp,
            ):
                result = await mcp.call_tool("search_knowledge", {"query": QUERY})
                assert not result.is_error
    spans = receiver.spans
    (server,) = [s for s in spans if s.name == "tools/call search_knowledge" and s.kind == s.SPAN_KIND_SERVER]
    (caller,) = [s for s in spans if s.span_id == server.parent_span_id]
    assert caller.kind == caller.SPAN_KIND_CLIENT and caller.trace_id == server.trace_id
    assert any(s.name.startswith("retrieval ") for s in descendants(spans, server))
