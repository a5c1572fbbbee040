"""The chat client: the only module that speaks an OpenAI-compatible chat-completions API.

Services hand it plain messages and tool specs and get back, per model turn, the answer text as
it streams (TextPiece) and then one TurnEnd with the tool calls the model asked for and the
tokens it used. Every turn is streamed, whether the face that asked streams or not, so that one
code path reads the wire.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import openai
import tenacity

from kbsearch.apikey import client_api_key
from kbsearch.errors import LLMTimeoutError, LLMUnavailableError
from kbsearch.metrics import Metrics
from kbsearch.retrying import Transient, backoff, retry_after, retryable_status

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; `parameters` is its JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as the model wrote it: the caller validates it


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # assistant turns that asked for tools
    tool_call_id: str | None = None  # tool results: the call they answer


@dataclass(frozen=True, slots=True)
class TextPiece:
    """A piece of the model's answer text, as it arrived."""

    text: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The end of one model turn: the tools it wants called (none: it has answered) and its usage."""

    tool_calls: tuple[ToolCall, ...]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None


class ChatClient:
    """An OpenAI-compatible chat model through the real `openai` client, with our own retries (tenacity).

    The client's own retries are off (`max_retries=0`): they choose the same statuses and read the
    same Retry-After, but they know nothing of the ask's deadline (a retry would outlive it), cannot
    count each failure by reason in the metrics, cannot refuse at once when the server asks for a
    longer wait than SEARCHSVC_LLM_MAX_WAIT_S, and sleep where a test cannot see it. So they are ours. A
    request that fails before its stream starts is retried on 408, 409, 429, any 5xx and
    connection errors, up to `max_retries` times, after `min(max_wait, backoff_base * 2**attempt)`
    times a jitter factor in [0.5, 1), or after the server's Retry-After when it asks for longer.
    A server asking for more than `max_wait` is not retried: waiting less would only meet another
    429. A timeout is not retried either: it has already spent the time the caller had. Once text
    has streamed nothing is retried (the caller may have shown it).

    Failures become LLMUnavailableError (502: down, refused, 5xx after retries, a reply that is not
    chat-completions) or LLMTimeoutError (504: a request or the caller's deadline ran out).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_wait: float = 10.0,
        max_tokens: int = 1024,
        metrics: Metrics | None = None,
        backoff_base: float = 0.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if timeout <= 0 or max_retries < 0 or max_wait < 0 or max_tokens < 1:
            raise ValueError("need timeout > 0, max_retries >= 0, max_wait >= 0 and max_tokens >= 1")
        api_key = client_api_key(
            api_key, base_url, key_setting="SEARCHSVC_LLM_API_KEY", url_setting="SEARCHSVC_LLM_BASE_URL"
        )
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.max_tokens = max_tokens
        self.backoff_base = backoff_base
        self._metrics = metrics
        self._sleep = sleep
        self._jitter = jitter
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    async def close(self) -> None:
        await self._client.close()

    async def turn(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], *, deadline: float
    ) -> AsyncGenerator[TextPiece | TurnEnd]:
        """One model turn, streamed; `deadline` is a time.monotonic() past which it gives up (504)."""
        stream = await self._open(messages, tools, deadline)
        calls: dict[int, dict[str, str]] = {}
        usage: Any = None
        finish: str | None = None
        text_seen = False
        async with stream:
            try:
                async for chunk in stream:
                    if time.monotonic() > deadline:
                        raise self._failed("timeout", LLMTimeoutError("the chat model did not finish in time"))
                    usage = chunk.usage or usage
                    for choice in chunk.choices[:1]:  # n=1: one choice
                        delta = choice.delta
                        if delta.content:
                            text_seen = True
                            yield TextPiece(delta.content)
                        for call in delta.tool_calls or []:
                            _accumulate(calls, call)
                        finish = choice.finish_reason or finish
            except openai.APITimeoutError as exc:
                raise self._failed("timeout", LLMTimeoutError("the chat model stopped answering in time")) from exc
            except openai.OpenAIError as exc:  # the stream broke, or carried an error
                raise self._failed("stream", LLMUnavailableError(f"the chat stream failed: {_reason(exc)}")) from exc
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                # The client builds chunks without validating them: a malformed one fails when read.
                raise self._failed(
                    "bad_reply", LLMUnavailableError(f"the chat stream is not chat-completions chunks: {exc}"[:300])
                ) from exc
        tool_calls = _tool_calls(calls)
        if not text_seen and not tool_calls:
            raise self._failed("bad_reply", LLMUnavailableError("the chat model returned neither text nor a tool call"))
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        if self._metrics is not None:
            self._metrics.llm_tokens.labels("prompt").inc(prompt_tokens)
            self._metrics.llm_tokens.labels("completion").inc(completion_tokens)
        yield TurnEnd(tool_calls, prompt_tokens, completion_tokens, finish)

    async def _open(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], deadline: float
    ) -> openai.AsyncStream[Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": self.max_tokens,
        }
        if tools:
            request["tools"] = [_wire_tool(t) for t in tools]
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(self._worth_retrying),
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            sleep=self._sleep,
            before_sleep=functools.partial(self._before_sleep, deadline),
            reraise=True,
        )
        try:
            return await retrying(self._request, request, deadline)
        except Transient as exc:
            if not self._worth_retrying(exc):  # waiting less than the server asks would only meet another refusal
                exc.failure.details["retryAfterSeconds"] = exc.retry_after
            else:
                exc.failure.details["attempts"] = retrying.statistics["attempt_number"]
            raise exc.failure from exc.__cause__

    async def _request(self, request: dict[str, Any], deadline: float) -> openai.AsyncStream[Any]:
        """One request: the stream, or Transient for a failure worth another try."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._failed("timeout", LLMTimeoutError("the ask ran out of time waiting for the chat model"))
        try:
            stream = await self._client.chat.completions.create(**request, timeout=min(self.timeout, remaining))
            return cast(openai.AsyncStream[Any], stream)
        except openai.APITimeoutError as exc:
            raise self._failed(
                "timeout", LLMTimeoutError(f"the chat model did not answer within {min(self.timeout, remaining):g} s")
            ) from exc
        except openai.APIConnectionError as exc:
            self._count("connection")
            failure = LLMUnavailableError(
                f"cannot reach the chat endpoint: {_reason(exc)}", details={"reason": "connection"}
            )
            raise Transient(failure, None) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            failure = LLMUnavailableError(
                f"the chat endpoint answered HTTP {status}{_hint(status)}", details={"status": status}
            )
            reason = f"http_{status // 100}xx" if status != 429 else "http_429"
            if not retryable_status(status):
                raise self._failed(reason, failure) from exc
            self._count(reason)
            raise Transient(failure, retry_after(exc.response.headers)) from exc
        except openai.OpenAIError as exc:
            raise self._failed("bad_reply", LLMUnavailableError(f"unusable chat reply: {_reason(exc)}")) from exc

    def _worth_retrying(self, exc: BaseException) -> bool:
        return isinstance(exc, Transient) and (exc.retry_after is None or exc.retry_after <= self.max_wait)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """Exponential backoff with jitter, or the server's Retry-After when longer; capped at max_wait."""
        failure = state.outcome.exception() if state.outcome is not None else None
        asked = failure.retry_after if isinstance(failure, Transient) else None
        return backoff(
            state.attempt_number - 1, base=self.backoff_base, cap=self.max_wait, jitter=self._jitter(), asked=asked
        )

    def _before_sleep(self, deadline: float, state: tenacity.RetryCallState) -> None:
        delay = state.upcoming_sleep
        if time.monotonic() + delay >= deadline:  # a retry would outlive the ask
            raise self._failed("timeout", LLMTimeoutError("the ask ran out of time retrying the chat model"))
        log.info("retrying the chat model", extra={"attempt": state.attempt_number, "delay_s": round(delay, 3)})

    def _count(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.llm_errors.labels(reason).inc()

    def _failed(self, reason: str, error: LLMUnavailableError | LLMTimeoutError) -> Exception:
        self._count(reason)
        return error


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _accumulate(calls: dict[int, dict[str, str]], delta: Any) -> None:
    """Tool calls stream in pieces keyed by index: the id and name once, the arguments in slices."""
    call = calls.setdefault(int(delta.index), {"id": "", "name": "", "arguments": ""})
    if delta.id:
        call["id"] = delta.id
    function = delta.function
    if function is not None:
        if function.name:
            call["name"] += function.name
        if function.arguments:
            call["arguments"] += function.arguments


def _tool_calls(calls: dict[int, dict[str, str]]) -> tuple[ToolCall, ...]:
    result = []
    for index in sorted(calls):
        call = calls[index]
        if not call["name"]:
            raise LLMUnavailableError("the chat model sent a tool call without a function name")
        # Some servers send no id; the next turn must still pair the result with its call.
        result.append(ToolCall(call["id"] or f"call_{index}", call["name"], call["arguments"] or "{}"))
    return tuple(result)


def _hint(status: int) -> str:
    if status in (401, 403):
        return ": the API key was refused; check SEARCHSVC_LLM_API_KEY"
    if status in (400, 404, 422):
        return ": check SEARCHSVC_LLM_MODEL and SEARCHSVC_LLM_BASE_URL"
    return ""


def _reason(exc: openai.OpenAIError) -> str:
    # The class name and the client's message; never the request, which carries the key in a header.
    message = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {message}"[:300]


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as a JSON object; ValueError names what is wrong."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value
