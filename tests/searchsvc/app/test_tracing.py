"""Traces (kbsearch.tracing): off builds nothing; on, a real service exports its span tree over OTLP/HTTP
to a real receiver, joins a caller's traceparent (HTTP header, MCP _meta) and carries no text or token."""

from __future__ import annotations

import sys

import pytest

from kbsearch import tracing
from kbsearch.settings import TracingSettings
from tests.searchsvc.ask_support import DOCS, put_docs
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.otlp import attributes, otlp_receiver
from tests.support.service import running_service

TOKEN = "s3cret-token-value-for-tracing"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
MCP_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
QUERY = "how is a failed deployment rolled back"
QUESTION = "what keeps a canary release safe"


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-00f067aa0ba902b7-01"


async def test_off_builds_no_sdk_object_and_exports_nothing(tmp_path):
    with otlp_receiver() as receiver:
        async with running_service("edge", tmp_path, api_token=TOKEN, tracing_endpoint=receiver.url) as client:
            await put_docs(client, Authorization=f"Bearer {TOKEN}")
            found = await client.post(
                "/api/v1/search", json={"query": QUERY}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert found.status_code == 200
            assert not tracing.enabled()
            with tracing.span("anything") as span, tracing.retrieval("local", 5, "hybrid") as other:
                assert span is other  # the one shared no-op
        assert receiver.spans == []
        assert receiver.paths == []
    # Nothing of the SDK or the exporter was imported, so none of their objects could be built.
    if not any(name.startswith("opentelemetry.sdk") for name in sys.modules):
        assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" not in sys.modules


def test_tracing_is_off_by_default():
    assert TracingSettings().tracing is False


@pytest.mark.slow
async def test_spans_of_a_search_an_ask_and_an_mcp_call_reach_a_real_receiver(tmp_path):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with otlp_receiver() as receiver:
        async with running_service(
            "edge", tmp_path, api_token=TOKEN, tracing=True, tracing_endpoint=receiver.url
        ) as client:
            await put_docs(client, **headers)
            found = await client.post(
                "/api/v1/search",
                json={"query": QUERY, "limit": 3},
                headers={**headers, "traceparent": traceparent(TRACE_ID)},
            )
            assert found.status_code == 200
            answered = await client.post("/api/v1/ask", json={"question": QUESTION}, headers=headers)
            assert answered.status_code == 200, answered.text
            call = rpc("tools/call", {"name": "search", "arguments": {"query": QUERY}})
            call["params"]["_meta"] = {"traceparent": traceparent(MCP_TRACE_ID)}
            mcp = await client.post("/mcp", json=call, headers={**headers, "accept": ACCEPT})
            assert mcp.status_code == 200, mcp.text
        # The lifespan's end flushed every span to the receiver.
    spans = receiver.spans
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    by_id = {s.span_id: s for s in spans}

    def children(parent, name_start: str):
        """The spans named so below `parent`, through FastAPI's own spans (fastapi.endpoint...)."""
        found, below = [], [s for s in spans if s.parent_span_id == parent.span_id]
        while below:
            span = below.pop()
            if span.name.startswith(name_start):
                found.append(span)
            elif span.name.startswith("fastapi."):
                below += [s for s in spans if s.parent_span_id == span.span_id]
        return found

    # The search: HTTP server span from the caller's traceparent, then retrieval, scope, embedding, engine.
    (http,) = [s for s in spans if s.name == "POST /api/v1/search"]  # FastAPI's own server span
    assert http.trace_id.hex() == TRACE_ID
    assert http.parent_span_id.hex() == "00f067aa0ba902b7"
    (retrieval,) = children(http, "retrieval ")
    found_attributes = attributes(retrieval)
    assert found_attributes["gen_ai.operation.name"] == "retrieval"
    assert found_attributes["gen_ai.request.top_k"] == 3
    ids = [hit["id"] for hit in found.json()["results"]]
    assert all(i in found_attributes["gen_ai.retrieval.documents"] for i in ids)
    assert children(retrieval, "scope resolution")
    (embedding,) = children(retrieval, "embeddings ")
    assert attributes(embedding)["gen_ai.operation.name"] == "embeddings"
    (engine,) = children(retrieval, "search ")
    assert attributes(engine)["db.operation.name"] == "search"

    # The ask: its own trace, the ask span over the searches it made.
    (ask_http,) = [s for s in spans if s.name == "POST /api/v1/ask"]
    (ask,) = children(ask_http, "ask")
    assert attributes(ask)["kb.ask.mode"] == "extractive"
    assert children(ask, "retrieval ")

    # The MCP call: the MCP SDK's server span, in the trace its _meta named, over the same retrieval span.
    tool = next(s for s in spans if s.name == "tools/call search")
    assert tool.trace_id.hex() == MCP_TRACE_ID
    assert attributes(tool)["mcp.method.name"] == "tools/call"
    assert attributes(tool)["gen_ai.tool.name"] == "search"
    assert tool.parent_span_id.hex() == "00f067aa0ba902b7"
    # Every span's parent was exported too, but for the callers' own (the traceparents' parent id).
    assert all(s.parent_span_id in (b"", bytes.fromhex("00f067aa0ba902b7")) or s.parent_span_id in by_id for s in spans)

    # No token, no query or question, no document text in any attribute.
    words = {w for text in DOCS.values() for w in text.split(". ")}
    for s in spans:
        for value in attributes(s).values():
            text = str(value)
            assert TOKEN not in text
            assert QUERY not in text and QUESTION not in text
            assert not any(len(w) > 20 and w in text for w in words)
