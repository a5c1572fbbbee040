"""The chat client alone, against the scripted stub: waits, tool calls, and the API key's discretion."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

import kbsearch
from kbsearch.errors import LLMTimeoutError, LLMUnavailableError
from kbsearch.llm.chat import ChatClient, ChatMessage, TextPiece, ToolCall, TurnEnd
from kbsearch.services.answers.ask import SEARCH_TOOL
from tests.support.chatstub import Answer, CallTools, Fail, chat_stub

KEY = "sk-never-log-me"
MESSAGES = [ChatMessage("user", "hello")]


class Sleeps:
    """Records the waits the client asks for instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def client(url: str, sleeps: Sleeps, **options: object) -> ChatClient:
    return ChatClient("stub-model", api_key=KEY, base_url=url, sleep=sleeps, jitter=lambda: 1.0, **options)


async def collect(chat: ChatClient, tools=()) -> list[TextPiece | TurnEnd]:
    return [piece async for piece in chat.turn(MESSAGES, list(tools), deadline=time.monotonic() + 30)]


@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after": "2"}, 2.0), ({"retry-after-ms": "1500"}, 1.5), ({}, 0.5), ({"retry-after": "soon"}, 0.5)],
)
async def test_a_429_waits_as_long_as_the_server_asks_within_bounds(headers, wait):
    sleeps = Sleeps()
    with chat_stub([Fail(429, headers), Answer("hi")]) as stub:
        chat = client(stub.url, sleeps, backoff_base=0.5, max_wait=10)
        pieces = await collect(chat)
        await chat.close()
    assert sleeps.waits == [wait]
    assert "".join(p.text for p in pieces if isinstance(p, TextPiece)) == "hi"


async def test_backoff_doubles_and_is_capped():
    sleeps = Sleeps()
    with chat_stub([Fail(500)] * 4 + [Answer("hi")]) as stub:
        chat = client(stub.url, sleeps, backoff_base=1.0, max_wait=3.0, max_retries=4)
        await collect(chat)
        await chat.close()
    assert sleeps.waits == [1.0, 2.0, 3.0, 3.0]


async def test_a_refused_request_is_not_retried_and_names_the_setting():
    sleeps = Sleeps()
    with chat_stub([Fail(401)]) as stub:
        chat = client(stub.url, sleeps)
        with pytest.raises(LLMUnavailableError, match="SEARCHSVC_LLM_API_KEY") as caught:
            await collect(chat)
        await chat.close()
    assert sleeps.waits == [] and caught.value.details == {"status": 401}


async def test_tool_calls_arrive_whole_with_the_usage(caplog):
    sleeps = Sleeps()
    calls = [("search", {"query": "rollback of a deployment"}), ("search", {"query": "canary"})]
    with caplog.at_level(logging.DEBUG), chat_stub([CallTools(calls, prompt_tokens=7, completion_tokens=3)]) as stub:
        chat = client(stub.url, sleeps)
        pieces = await collect(chat, [SEARCH_TOOL])
        await chat.close()
    assert pieces == [
        TurnEnd(
            (
                ToolCall("call_0", "search", '{"query": "rollback of a deployment"}'),
                ToolCall("call_1", "search", '{"query": "canary"}'),
            ),
            prompt_tokens=7,
            completion_tokens=3,
            finish_reason="tool_calls",
        )
    ]
    assert stub.headers[0]["authorization"] == f"Bearer {KEY}"
    assert KEY not in caplog.text  # not even at DEBUG, where the client logs its requests


def test_each_openai_api_has_one_owner_module():
    # import-linter lets only these two modules import `openai`; each must call only its own API.
    package = Path(kbsearch.__file__).parent
    embeddings_owner = (package / "embedders" / "openai.py").read_text()
    chat_owner = (package / "llm" / "chat.py").read_text()
    assert ".embeddings." in embeddings_owner and ".chat." not in embeddings_owner
    assert ".chat.completions." in chat_owner and ".embeddings." not in chat_owner


def test_a_chat_model_without_a_key_or_endpoint_stops_start_up_naming_the_setting(tmp_path):
    from tests.support.service_process import run_to_exit

    result = run_to_exit(SEARCHSVC_LLM_MODEL="gpt-4.1-mini", SEARCHSVC_DATA_DIR=str(tmp_path), OPENAI_API_KEY="")
    assert result.returncode != 0
    assert "SEARCHSVC_LLM_API_KEY is required" in result.stdout + result.stderr


def test_an_endpoint_or_key_without_a_model_is_refused():
    from pydantic import ValidationError

    from kbsearch.settings import Settings

    with pytest.raises(ValidationError, match="SEARCHSVC_LLM_MODEL is not"):
        Settings(llm_base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValidationError, match="SEARCHSVC_LLM_MODEL is not") as caught:
        Settings(llm_api_key="sk-secret-value")
    assert "sk-secret-value" not in str(caught.value)


async def test_a_retry_that_would_outlive_the_ask_is_not_made():
    sleeps = Sleeps()
    with chat_stub([Fail(500)] * 4 + [Answer("hi")]) as stub:
        chat = client(stub.url, sleeps, backoff_base=10.0, max_wait=100.0, max_retries=4)
        with pytest.raises(LLMTimeoutError, match="out of time retrying"):
            # Waits of 10, 20 and 40 s each fit the 60 s left (the recorded sleeps take no time); 80 does not.
            await anext(chat.turn(MESSAGES, [], deadline=time.monotonic() + 60))
        await chat.close()
    assert sleeps.waits == [10.0, 20.0, 40.0]
