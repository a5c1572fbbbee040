"""Ask streaming through a real service process (uvicorn, real sockets) and a real chat stub: the events
arrive as they are produced, as server-sent events any SSE client can read."""

from __future__ import annotations

import httpx

from tests.searchsvc.ask_support import DOCS, server_sent_events
from tests.support.chatstub import Answer, CallTools, chat_stub
from tests.support.service_process import ServiceProcess

ROLLBACK, _, _ = DOCS


def test_a_streamed_ask_arrives_as_server_sent_events_over_real_http(tmp_path):
    script = [
        CallTools([("search", {"query": "roll back a failed deployment"})]),
        Answer("Use kubectl rollout undo [1][7]."),
    ]
    with chat_stub(script) as stub:
        env = {
            "SEARCHSVC_DATA_DIR": str(tmp_path / "data"),
            "SEARCHSVC_LLM_MODEL": "stub-model",
            "SEARCHSVC_LLM_BASE_URL": stub.url,
            "SEARCHSVC_LLM_API_KEY": "sk-process-secret",
            "SEARCHSVC_ASK_RESULTS_PER_SEARCH": "1",
        }
        process = ServiceProcess(tmp_path / "service.log", env, metrics=True).start()
        try:
            process.wait_ready()
            for uri, content in DOCS.items():
                assert process.client.put("/api/v1/documents", json={"uri": uri, "content": content}).status_code == 200
            frames = []
            body = {"question": "How do I roll back?", "stream": True}
            with process.client.stream("POST", "/api/v1/ask", json=body) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.headers["cache-control"] == "no-cache"
                assert "content-length" not in response.headers  # streamed, not buffered
                frames = list(response.iter_text())
            metrics = httpx.get(process.metrics_url).text
        finally:
            process.stop()
        log = process.log_text()
    events = server_sent_events("".join(frames))
    assert [name for name, _ in events] == ["search"] + ["delta"] * (len(events) - 3) + ["citation", "done"]
    done = events[-1][1]
    assert done["answer"] == "Use kubectl rollout undo [1]." and done["droppedCitations"] == 1
    assert done["citations"][0]["uri"] == ROLLBACK
    assert 'searchsvc_asks_total{mode="llm",outcome="grounded"} 1.0' in metrics
    assert "sk-process-secret" not in log  # the key is never logged


def test_an_ask_without_a_token_is_refused_before_its_body_is_read(tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('tokens:\n  - name: reader\n    token: "reader-token-123"\n    sources: ["*"]\n')
    env = {"SEARCHSVC_DATA_DIR": str(tmp_path / "data"), "SEARCHSVC_TOKENS_FILE": str(tokens)}
    process = ServiceProcess(tmp_path / "service.log", env).start()
    try:
        process.wait_ready()
        refused = process.client.post("/api/v1/ask", json={"question": "anything"})
        allowed = process.client.post(
            "/api/v1/ask", json={"question": "anything"}, headers={"authorization": "Bearer reader-token-123"}
        )
    finally:
        process.stop()
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith(
        'Bearer resource_metadata="http://127.0.0.1:'
    )
    assert allowed.status_code == 200 and allowed.json()["grounded"] is False
