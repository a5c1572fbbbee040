"""Traces through the stdio bridge: an agent's `_meta.traceparent` reaches the service's spans, exported
by a real service process over OTLP/HTTP to a real receiver.

The bridge traces nothing itself (no OpenTelemetry SDK in its process); the MCP SDK's server keeps the
request's trace context current while the bridge's own SDK client calls the service, and that client
puts it into the outgoing `_meta`, so the service's spans are parented by the agent's span."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.client import Client

from tests.searchsvc.mcp.stdio_support import A_URI, bridge
from tests.support.otlp import attributes, otlp_receiver
from tests.support.scoped_access import ADMIN, TEAM_A, TOKENS, bearer, content
from tests.support.service_process import ServiceProcess

pytestmark = pytest.mark.slow

AGENT_TRACE, AGENT_SPAN = "5af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7"


async def test_an_agents_traceparent_crosses_the_bridge_to_the_services_spans(tmp_path: Path):
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    with otlp_receiver() as receiver:
        env = {
            "SEARCHSVC_DATA_DIR": str(tmp_path / "data"),
            "SEARCHSVC_TOKENS_FILE": str(tmp_path / "tokens.yaml"),
            "SEARCHSVC_TRACING": "true",
            "SEARCHSVC_TRACING_ENDPOINT": receiver.url,
        }
        process = ServiceProcess(tmp_path / "service.log", env).start()
        try:
            process.wait_ready()
            body = {
                "uri": A_URI,
                "content": content(A_URI, "team-a/docs"),
                "metadata": {"sourceIdentifier": "team-a/docs"},
            }
            assert process.client.put("/api/v1/documents", json=body, headers=bearer(ADMIN)).status_code == 200
            meta = {"traceparent": f"00-{AGENT_TRACE}-{AGENT_SPAN}-01"}
            async with Client(bridge(f"http://127.0.0.1:{process.port}", TEAM_A)) as client:
                result = await client.call_tool("search_knowledge", {"query": "shared words deploys"}, meta=meta)
                assert not result.is_error
                assert (await client.read_resource("kb://sources", meta=meta)).contents
        finally:
            assert process.stop()  # the lifespan's end flushes the spans
    spans = receiver.spans
    (tool,) = [s for s in spans if s.name == "tools/call search_knowledge"]
    (read,) = [s for s in spans if s.name == "resources/read"]
    for span in (tool, read):
        assert (span.trace_id.hex(), span.parent_span_id.hex()) == (AGENT_TRACE, AGENT_SPAN)
    assert attributes(read)["mcp.resource.uri"] == "kb://sources"
    (retrieval,) = [s for s in spans if s.name.startswith("retrieval ")]
    assert retrieval.trace_id.hex() == AGENT_TRACE and retrieval.parent_span_id == tool.span_id
