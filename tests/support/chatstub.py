"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests of the ask path.

It speaks the real wire format over real HTTP: `POST /v1/chat/completions`, answered as SSE
`chat.completion.chunk` events when the request streams (text deltas, tool_calls deltas split
across chunks, a usage chunk, `data: [DONE]`) or as one `chat.completion` JSON otherwise. Each
request takes the next step of the script; a step may be a function of the request body, so an
answer can cite what the service's searches returned. Every request body is kept for assertions.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    """A final answer, streamed in pieces of `piece` characters (small: markers get split)."""

    text: str
    piece: int = 3
    prompt_tokens: int = 100
    completion_tokens: int = 20


@dataclass
class CallTools:
    """A turn that calls tools: (name, arguments) pairs; arguments may be a dict or raw JSON text."""

    calls: list[tuple[str, dict[str, Any] | str]]
    prompt_tokens: int = 50
    completion_tokens: int = 10
    text: str = ""  # said before the calls, in the same turn


@dataclass
class Fail:
    """An HTTP error answer, like a 429 with its Retry-After."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Hang:
    """Wait this long before answering (a model slower than the client's timeout)."""

    seconds: float
    then: Answer | None = None


@dataclass
class Garbage:
    """A 200 whose stream is not chat-completions chunks."""


Step = Answer | CallTools | Fail | Hang | Garbage
Script = list[Step | Callable[[dict[str, Any]], Step]]


def cite_everything(extra: str = "") -> Callable[[dict[str, Any]], Step]:
    """A step that answers citing every chunk number the tool results of the conversation hold."""

    def step(body: dict[str, Any]) -> Step:
        numbers = sorted(
            {int(n) for m in body["messages"] if m["role"] == "tool" for n in _NUMBERED.findall(m["content"])}
        )
        return Answer("The deploys are described here " + "".join(f"[{n}]" for n in numbers) + extra + ".")

    return step


_NUMBERED = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


class ChatStub:
    def __init__(self, script: Script) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with stub._lock:
                    stub.requests.append(body)
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if not stub.script:
                        raise AssertionError("the chat stub's script is used up")
                    step = stub.script.pop(0)
                if callable(step):
                    step = step(body)
                stub._answer(self, body, step)

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], step: Step) -> None:
        if isinstance(step, Hang):
            time.sleep(step.seconds)
            step = step.then or Answer("late")
        if isinstance(step, Fail):
            payload = json.dumps({"error": {"message": f"stub says {step.status}", "type": "stub"}}).encode()
            handler.send_response(step.status)
            for name, value in {"content-type": "application/json", **step.headers}.items():
                handler.send_header(name, value)
            handler.send_header("content-length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        if isinstance(step, Garbage):
            handler.send_response(200)
            handler.send_header("content-type", "text/event-stream")
            handler.end_headers()
            handler.wfile.write(b'data: {"this": "is not a chunk", "choices": 7}\n\ndata: [DONE]\n\n')
            return
        if not body.get("stream"):
            self._whole(handler, body, step)
            return
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        for chunk in _chunks(body["model"], step):
            handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            handler.wfile.flush()
        handler.wfile.write(b"data: [DONE]\n\n")

    def _whole(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], step: Step) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if isinstance(step, Answer):
            message["content"] = step.text
        elif isinstance(step, CallTools):
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": _text(arguments)}}
                for i, (name, arguments) in enumerate(step.calls)
            ]
        payload = json.dumps(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                "usage": _usage(step),
            }
        ).encode()
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def tool_results(self, request: int) -> list[str]:
        """The tool messages the service sent with request number `request` (0-based)."""
        return [m["content"] for m in self.requests[request]["messages"] if m["role"] == "tool"]


def _text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _usage(step: Step) -> dict[str, int]:
    prompt = getattr(step, "prompt_tokens", 0)
    completion = getattr(step, "completion_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chunks(model: str, step: Step) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if isinstance(step, Answer):
        for i in range(0, len(step.text), step.piece):
            yield chunk({"content": step.text[i : i + step.piece]})
        yield chunk({}, "stop")
    elif isinstance(step, CallTools):
        if step.text:
            yield chunk({"content": step.text})
        for index, (name, arguments) in enumerate(step.calls):
            text = _text(arguments)
            head = {
                "index": index,
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            yield chunk({"tool_calls": [head]})
            half = len(text) // 2  # arguments arrive in slices, as real servers send them
            for part in (text[:half], text[half:]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        yield chunk({}, "tool_calls")
    yield {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [],
        "usage": _usage(step),
    }


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and left (the Hang step) is expected; anything else is reported.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def chat_stub(script: Script) -> Iterator[ChatStub]:
    """A running stub; stopped on exit."""
    stub = ChatStub(script)
    thread = threading.Thread(target=stub.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.server.shutdown()
        stub.server.server_close()
        thread.join(timeout=10)
