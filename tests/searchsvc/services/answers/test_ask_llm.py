"""Ask in llm mode, against a scripted OpenAI-compatible server on 127.0.0.1.

The service uses the real `openai` client over real HTTP: streamed chunks, tool calls, usage.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kbsearch.llm.chat import ChatClient
from kbsearch.metrics import Metrics
from tests.searchsvc.ask_support import DOCS, put_docs, server_sent_events, tool_result_uris
from tests.support.chatstub import Answer, CallTools, Fail, Garbage, Hang, chat_stub
from tests.support.service import running_service, scraped
from tests.support.service_process import free_port

ROLLBACK, CANARY, _ = DOCS
ANSWER = (
    "A failed deployment is rolled back with kubectl rollout undo [{rollback}]. "
    "A canary release shifts a small share of traffic first [{canary}, 42]. "
    "Nothing else is known [99]."
)
VERIFIED = (
    "A failed deployment is rolled back with kubectl rollout undo [{rollback}]. "
    "A canary release shifts a small share of traffic first [{canary}]. "
    "Nothing else is known."
)


def numbers_shown(body: dict) -> dict[str, int]:
    """The number the service gave each document's chunk, from the tool results it sent the model."""
    shown = tool_result_uris([m["content"] for m in body["messages"] if m["role"] == "tool"])
    return {uri: n for n, uri in sorted(shown.items(), reverse=True)}


def two_searches_then_answer() -> list:
    """Search twice, then answer citing the rollback and canary chunks, plus [42] and [99] (never retrieved)."""
    return [
        CallTools([("search", {"query": "roll back a failed deployment"})]),
        CallTools([("search", {"query": "canary release traffic"})]),
        lambda body: Answer(ANSWER.format(rollback=numbers_shown(body)[ROLLBACK], canary=numbers_shown(body)[CANARY])),
    ]


def llm_settings(stub_url: str, **extra: object) -> dict[str, object]:
    return {"llm_model": "stub-model", "llm_base_url": stub_url, "llm_api_key": "sk-test-secret", **extra}


async def test_two_searches_then_an_answer_keeps_only_verified_citations(tmp_path):
    with chat_stub(two_searches_then_answer()) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url)) as client:
            await put_docs(client)
            response = await client.post("/api/v1/ask", json={"question": "How do I undo a bad rollout?"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["mode"] == "llm" and body["grounded"] is True
    shown = tool_result_uris(stub.tool_results(2))
    n = numbers_shown(stub.requests[2])
    rollback, canary = n[ROLLBACK], n[CANARY]
    assert body["answer"] == VERIFIED.format(rollback=rollback, canary=canary)
    assert body["droppedCitations"] == 2  # [42] and [99]
    assert [s["query"] for s in body["searches"]] == ["roll back a failed deployment", "canary release traffic"]
    assert body["usage"] == {"promptTokens": 50 + 50 + 100, "completionTokens": 10 + 10 + 20}

    # The citations are the chunks the model was shown under the numbers it cited, and only those.
    assert [c["n"] for c in body["citations"]] == [rollback, canary]
    assert [c["uri"] for c in body["citations"]] == [ROLLBACK, CANARY]
    assert "kubectl rollout undo" in body["citations"][0]["quote"]  # the cited chunk's closest sentence
    assert "canary release" in body["citations"][1]["quote"].lower()
    assert body["citations"][0]["headings"][0] == "Rollbacks"
    assert body["citations"][0]["chunkIndex"] == 0
    retrieved = [s["n"] for s in body["sourcesRetrieved"]]
    assert retrieved == sorted(set(shown) - {rollback, canary})  # the rest, each once
    assert len(shown) == len(DOCS)  # two searches over three one-chunk documents: deduplicated

    # The wire: the search tool offered, the key sent as a bearer header, the tool results paired.
    first = stub.requests[0]
    assert first["model"] == "stub-model" and first["stream"] is True
    assert [t["function"]["name"] for t in first["tools"]] == ["search"]
    assert stub.headers[0]["authorization"] == "Bearer sk-test-secret"
    tool_messages = [m for m in stub.requests[2]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_0"]


async def test_streaming_sends_events_in_order_and_never_a_dropped_marker(tmp_path):
    with chat_stub(two_searches_then_answer()) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url)) as client:
            await put_docs(client)
            response = await client.post(
                "/api/v1/ask", json={"question": "How do I undo a bad rollout?", "stream": True}
            )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = server_sent_events(response.text)
    names = [name for name, _ in events]
    assert names[:2] == ["search", "search"]
    deltas = [data["text"] for name, data in events if name == "delta"]
    assert names == ["search", "search"] + ["delta"] * len(deltas) + ["citation", "citation", "done"]
    assert len(deltas) > 10  # streamed in pieces (3 characters at a time from the stub)
    done = events[-1][1]
    n = numbers_shown(stub.requests[2])
    assert "".join(deltas) == done["answer"] == VERIFIED.format(rollback=n[ROLLBACK], canary=n[CANARY])
    assert not any(bad in delta for delta in deltas for bad in ("4", "9"))  # not even part of [42] or [99]
    assert [data for name, data in events if name == "citation"] == done["citations"]
    assert done["droppedCitations"] == 2
    search = events[0][1]
    assert search["query"] == "roll back a failed deployment" and search["refs"] == [s["n"] for s in search["sources"]]


async def test_rate_limits_and_server_errors_are_retried_then_answered(tmp_path):
    script = [
        Fail(429, {"retry-after-ms": "10"}),
        Fail(503),
        CallTools([("search", {"query": "rollback"})]),
        Answer("Use kubectl rollout undo [1]."),
    ]
    with chat_stub(script) as stub:
        # The model's one-word search scores low under the test embedder; relevance is not what this tests.
        settings = llm_settings(stub.url) | {"relevance_threshold": 0.0, "ask_min_relevance": 0.0}
        async with running_service("edge", tmp_path / "data", chat=fast_retrying_chat(stub.url), **settings) as client:
            await put_docs(client)
            response = await client.post("/api/v1/ask", json={"question": "How do I roll back?"})
            metrics = scraped(client)
    assert response.status_code == 200, response.text
    assert response.json()["grounded"] is True
    assert len(stub.requests) == 4
    assert 'searchsvc_llm_errors_total{reason="http_429"} 1.0' in metrics
    assert 'searchsvc_llm_errors_total{reason="http_5xx"} 1.0' in metrics
    assert 'searchsvc_llm_tokens_total{kind="prompt"} 150.0' in metrics
    assert 'searchsvc_asks_total{mode="llm",outcome="grounded"} 1.0' in metrics
    assert 'searchsvc_ask_duration_seconds_count{mode="llm"} 1.0' in metrics


async def test_server_errors_past_the_retries_are_a_502(tmp_path):
    with chat_stub([Fail(500), Fail(502), Fail(503)]) as stub:
        async with running_service(
            "edge", tmp_path / "data", chat=fast_retrying_chat(stub.url, max_retries=2), **llm_settings(stub.url)
        ) as client:
            response = await client.post("/api/v1/ask", json={"question": "anything"})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "LLM_UNAVAILABLE"
    assert response.json()["error"]["details"] == {"status": 503, "attempts": 3}
    assert len(stub.requests) == 3


async def test_a_retry_after_beyond_the_longest_wait_is_not_retried(tmp_path):
    with chat_stub([Fail(429, {"retry-after": "120"}), Answer("never read")]) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url, llm_max_wait_s=5)) as client:
            response = await client.post("/api/v1/ask", json={"question": "anything"})
    assert response.status_code == 502
    assert response.json()["error"]["details"]["retryAfterSeconds"] == 120
    assert len(stub.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_chat_endpoint_that_is_down_is_a_502(tmp_path, stream):
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    async with running_service("edge", tmp_path / "data", **llm_settings(down, llm_max_retries=0)) as client:
        await put_docs(client)
        response = await client.post("/api/v1/ask", json={"question": "How do I roll back?", "stream": stream})
        metrics = scraped(client)
    assert response.status_code == 502, response.text  # streamed too: nothing was sent yet
    error = response.json()["error"]
    assert error["code"] == "LLM_UNAVAILABLE" and "cannot reach the chat endpoint" in error["message"]
    assert "sk-test-secret" not in response.text
    assert 'searchsvc_llm_errors_total{reason="connection"} 1.0' in metrics
    assert 'searchsvc_asks_total{mode="llm",outcome="LLM_UNAVAILABLE"} 1.0' in metrics


async def test_a_model_slower_than_the_timeout_is_a_504(tmp_path):
    with chat_stub([Hang(3.0)]) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url, llm_timeout_s=0.3)) as client:
            response = await client.post("/api/v1/ask", json={"question": "anything"})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "LLM_TIMEOUT"


async def test_a_reply_that_is_not_chat_completions_is_a_502(tmp_path):
    with chat_stub([Garbage()]) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url)) as client:
            response = await client.post("/api/v1/ask", json={"question": "anything"})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "LLM_UNAVAILABLE"


async def test_a_failure_after_the_stream_started_is_its_last_event(tmp_path):
    script = [CallTools([("search", {"query": "rollback"})]), Fail(500)]
    with chat_stub(script) as stub:
        async with running_service(
            "edge", tmp_path / "data", chat=fast_retrying_chat(stub.url, max_retries=0), **llm_settings(stub.url)
        ) as client:
            await put_docs(client)
            response = await client.post("/api/v1/ask", json={"question": "How do I roll back?", "stream": True})
    assert response.status_code == 200
    events = server_sent_events(response.text)
    assert [name for name, _ in events] == ["search", "error"]
    assert events[-1][1]["error"]["code"] == "LLM_UNAVAILABLE"


async def test_when_nothing_is_retrieved_the_answer_says_so_and_cites_nothing(tmp_path):
    script = [CallTools([("search", {"query": "rollback"})]), Answer("Invented from memory [1].")]
    with chat_stub(script) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url)) as client:
            response = await client.post("/api/v1/ask", json={"question": "How do I roll back?"})
    body = response.json()
    assert body["grounded"] is False and body["citations"] == [] and body["sourcesRetrieved"] == []
    assert body["answer"] == "I found nothing in the knowledge base that answers this question."
    assert body["searches"] == [{"query": "rollback", "results": 0, "refs": []}]
    assert "No results." in stub.tool_results(1)


async def test_the_search_budget_is_kept_and_bad_tool_calls_are_answered_not_run(tmp_path):
    calls = [
        ("search", "{not json"),
        ("fetch", {"id": 1}),
        ("search", {"query": "rollback"}),
        ("search", {"query": "canary"}),
        ("search", {"query": "bread"}),
    ]
    script = [CallTools(calls), Answer("Roll back with kubectl rollout undo [1].")]
    with chat_stub(script) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url)) as client:
            await put_docs(client)
            response = await client.post("/api/v1/ask", json={"question": "How do I roll back?", "maxSearches": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [s["query"] for s in body["searches"]] == ["rollback", "canary"]
    results = stub.tool_results(1)
    assert len(results) == 5  # one reply per call, in order
    assert results[0].startswith("error: invalid search arguments")
    assert results[1].startswith("error: there is no tool 'fetch'")
    assert results[2].startswith("[1] ") and results[3].startswith("[")
    assert results[4].startswith("error: no searches left")
    assert "tools" in stub.requests[0] and "tools" not in stub.requests[1]  # with no searches left it may only answer
    assert body["answer"] == "Roll back with kubectl rollout undo [1]."


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"question": ""}, "body.question"),
        ({"question": "   "}, "body.question"),
        ({"question": "x" * 2001}, "body.question"),
        ({"question": "q", "maxSearches": 0}, "body.maxSearches"),
        ({"question": "q", "maxSearches": 6}, "body.maxSearches"),
        ({"question": "q", "sources": []}, "body.sources"),
        ({"question": "q", "sources": ["bad\nname"]}, "body.sources"),
        ({"question": "q", "stream": "yes"}, "body.stream"),
        ({"question": "q", "temperature": 2}, "body.temperature"),
        ({}, "body.question"),
    ],
)
async def test_bad_requests_are_422_naming_the_field(tmp_path, body, field):
    async with running_service("edge", tmp_path / "data") as client:
        response = await client.post("/api/v1/ask", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["message"].startswith(field), error["message"]
    assert "x" * 100 not in json.dumps(error)  # the input is never echoed


def fast_retrying_chat(url: str, max_retries: int = 3) -> Callable[[Metrics], ChatClient]:
    """The production client with its backoff scaled down: the retries are real, the waits short."""
    return lambda metrics: ChatClient(
        "stub-model",
        api_key="sk-test-secret",
        base_url=url,
        max_retries=max_retries,
        backoff_base=0.001,
        metrics=metrics,
    )


async def test_text_of_several_turns_joins_as_paragraphs_and_text_before_any_retrieval_is_dropped(tmp_path):
    script = [
        CallTools([("search", {"query": "roll back a failed deployment"})], text="Let me look that up."),
        CallTools([("search", {"query": "canary release traffic"})], text="Rollbacks use kubectl rollout undo [1]."),
        Answer("Canaries shift traffic slowly [2]."),
    ]
    with chat_stub(script) as stub:
        async with running_service("edge", tmp_path / "data", ask_results_per_search=1, **llm_settings(stub.url)) as c:
            await put_docs(c)
            body = (await c.post("/api/v1/ask", json={"question": "Rollbacks and canaries?"})).json()
    assert body["answer"] == "Rollbacks use kubectl rollout undo [1].\n\nCanaries shift traffic slowly [2]."
    assert [c["uri"] for c in body["citations"]] == [ROLLBACK, CANARY]
    assert stub.requests[1]["messages"][2]["content"] == "Let me look that up."  # the model keeps its own words


async def test_a_model_that_answers_without_searching_is_not_shown(tmp_path):
    with chat_stub([Answer("From memory, trust me [1].")]) as stub:
        async with running_service("edge", tmp_path / "data", **llm_settings(stub.url)) as client:
            await put_docs(client)
            body = (await client.post("/api/v1/ask", json={"question": "How do I roll back?"})).json()
    assert body["answer"] == "I found nothing in the knowledge base that answers this question."
    assert body["grounded"] is False and body["searches"] == [] and body["droppedCitations"] == 0


async def test_the_whole_ask_has_a_deadline_of_its_own(tmp_path):
    settings = llm_settings("", llm_timeout_s=30, ask_timeout_s=0.5)
    with chat_stub([Hang(3.0)]) as stub:
        async with running_service("edge", tmp_path / "data", **(settings | {"llm_base_url": stub.url})) as client:
            response = await client.post("/api/v1/ask", json={"question": "anything"})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "LLM_TIMEOUT"
