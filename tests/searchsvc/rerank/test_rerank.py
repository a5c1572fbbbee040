"""The reranking stage on every path: a local ONNX cross-encoder, a remote /rerank endpoint, the chat model.

The cross-encoder here is a graph the test builds: its logit counts how often the word "quokka"
appears in the passage half of each (query, passage) pair. Its weights prove the plumbing
(tokenizer pairs, token types, the graph's inputs and outputs, the reorder), not quality: no real
cross-encoder weights can be fetched on this machine, so reranking quality is not measured here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing

from tests.support.chatstub import Answer, chat_stub
from tests.support.localhttp import local_http, url_of
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.service import running_service, scraped

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "quokka", "rolling", "deploys", "deploy", "strategy", "the", "a"]
MARKER = WORDS.index("quokka")
QUERY = "rolling deploys strategy"
# Four pages about the query, and one that says less about it but is full of the marker word: the
# first stage ranks it last, the cross-encoder first.
PAGES = {
    f"https://git.example/r/blob/main/deploy-{i}.md": f"# Rolling deploys {i}\n\n"
    + "Rolling deploys strategy: replace pods one by one, rolling deploys keep capacity. " * 6
    for i in range(4)
}
MARKED = "https://git.example/r/blob/main/marked.md"
PAGES[MARKED] = "# Field notes\n\n" + "The quokka smiles at a deploy. " * 6


def write_cross_encoder(directory: Path) -> Path:
    """A real ONNX cross-encoder graph and tokenizer.json: logit = count of MARKER in the passage."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", WORDS.index("[CLS]")), ("[SEP]", WORDS.index("[SEP]"))],
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    weights = np.zeros((len(WORDS), 1), dtype=np.float32)
    weights[MARKER, 0] = 1.0
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["per_token"]),  # [B, S, 1]
        helper.make_node("Squeeze", ["per_token", "last_axis"], ["token_scores"]),  # [B, S]
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["passage"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["token_scores", "mask"], ["masked"]),
        helper.make_node("Mul", ["masked", "passage"], ["in_passage"]),
        helper.make_node("ReduceSum", ["in_passage", "seq_axis"], ["logits"], keepdims=1),  # [B, 1]
    ]
    ids = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    graph = helper.make_graph(
        nodes,
        "quokka-counter",
        ids,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            numpy_helper.from_array(weights, "weights"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "seq_axis"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(directory / "model.onnx"))
    return directory


async def _index(client) -> None:
    for uri, content in PAGES.items():
        body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": "r"}}
        response = await client.put("/api/v1/documents", json=body)
        assert response.status_code == 200, response.text


async def _search(client) -> list[dict[str, Any]]:
    response = await client.get("/api/v1/search", params={"q": QUERY, "limit": 5})
    assert response.status_code == 200, response.text
    return response.json()["results"]


async def _first_stage(tmp_path: Path) -> dict[str, float]:
    """Index the pages with no reranker; the marked page must rank last, as the test intends."""
    async with running_service("edge", tmp_path / "data") as client:
        await _index(client)
        results = await _search(client)
    assert [r["uri"] for r in results][-1] == MARKED, "the first stage should rank the marked page last"
    return {r["uri"]: r["relevance"] for r in results}


def _metric(text: str, backend: str, outcome: str) -> float:
    for line in text.splitlines():
        if (
            line.startswith("searchsvc_reranks_total{")
            and f'backend="{backend}"' in line
            and f'outcome="{outcome}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_local_cross_encoder_reorders_every_face_and_keeps_the_relevance(tmp_path):
    first = await _first_stage(tmp_path)
    model = write_cross_encoder(tmp_path / "reranker")
    async with running_service("edge", tmp_path / "data", rerank="local", rerank_model_dir=model) as client:
        results = await _search(client)
        assert results[0]["uri"] == MARKED
        # Only the order changed: each page keeps the relevance the first stage gave it.
        assert {r["uri"]: r["relevance"] for r in results} == first
        arguments = {"query": QUERY, "limit": 5}
        response = await client.post(
            "/mcp",
            json=rpc("tools/call", {"name": "search_knowledge", "arguments": arguments}),
            headers={"accept": ACCEPT, "host": "127.0.0.1"},
        )
        assert response.json()["result"]["structuredContent"]["results"][0]["uri"] == MARKED
        console = await client.get("/ui/", params={"q": QUERY})
        assert console.text.index(MARKED) < min(console.text.index(uri) for uri in PAGES if uri != MARKED)
        metrics = scraped(client)
    assert _metric(metrics, "local", "ok") == 3


@dataclass
class RerankServer:
    """A real /rerank endpoint on 127.0.0.1, answering as `answer` says; it keeps every request."""

    url: str
    requests: list[tuple[str, dict[str, str], dict[str, Any]]]


@contextmanager
def rerank_server(answer: Callable[[dict[str, Any]], tuple[int, Any]]) -> Iterator[RerankServer]:
    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, payload = answer(body)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except ConnectionError:
                pass  # the service gave up waiting (the slow case)

    with local_http(Handler) as server:
        yield RerankServer(url_of(server, "/v1/rerank"), requests)


def by_marker(body: dict[str, Any]) -> tuple[int, Any]:
    texts = body.get("documents") or body.get("texts")
    scored = [{"index": i, "score": t.count("quokka")} for i, t in enumerate(texts)]
    if "documents" in body:
        return 200, {"results": [{"index": s["index"], "relevance_score": s["score"]} for s in scored]}
    return 200, scored


@pytest.mark.parametrize("protocol", ["cohere", "tei"])
async def test_a_remote_rerank_endpoint_reorders_with_its_key_in_the_header_only(tmp_path, protocol):
    first = await _first_stage(tmp_path)
    key = "rk-remote-secret-123"
    with rerank_server(by_marker) as server:
        settings = {"rerank": "remote", "rerank_url": server.url, "rerank_protocol": protocol, "rerank_api_key": key}
        async with running_service("edge", tmp_path / "data", rerank_model="mini", **settings) as client:
            results = await _search(client)
    assert results[0]["uri"] == MARKED
    assert {r["uri"]: r["relevance"] for r in results} == first
    path, headers, body = server.requests[0]
    assert path == "/v1/rerank" and key not in path
    assert headers["authorization"] == f"Bearer {key}"
    assert body["query"] == QUERY
    if protocol == "cohere":
        assert body["model"] == "mini" and len(body["documents"]) == 5
    else:
        assert len(body["texts"]) == 5


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (lambda body: (time.sleep(3), by_marker(body))[1], "timeout"),
        (lambda body: (500, {"error": "boom"}), "error"),
        (lambda body: (200, {"results": [{"index": 99, "relevance_score": 1.0}]}), "error"),
        (lambda body: (200, {"results": [{"index": 0, "relevance_score": "high"}]}), "error"),
        (lambda body: (200, ["not", "results"]), "error"),
    ],
    ids=["slow", "http-500", "index-out-of-range", "score-not-a-number", "wrong-shape"],
)
async def test_a_failing_reranker_serves_the_first_stage_order(tmp_path, answer, outcome):
    first = await _first_stage(tmp_path)
    with rerank_server(answer) as server:
        settings = {"rerank": "remote", "rerank_url": server.url, "rerank_timeout_ms": 300}
        async with running_service("edge", tmp_path / "data", **settings) as client:
            started = time.monotonic()
            results = await _search(client)
            took = time.monotonic() - started
            metrics = scraped(client)
    assert [r["uri"] for r in results][-1] == MARKED  # the first stage's order, unchanged
    assert {r["uri"]: r["relevance"] for r in results} == first
    assert _metric(metrics, "remote", outcome) == 1
    if outcome == "timeout":
        assert took < 2.5  # the budget, not the endpoint's 3 s, decided


async def test_the_chat_model_reranks_listwise(tmp_path):
    first = await _first_stage(tmp_path)

    def rank(body: dict[str, Any]) -> Answer:
        prompt = body["messages"][-1]["content"]
        numbered = prompt.split("\n\n[")[1:]
        marked = next(int(block.split("]", 1)[0]) for block in numbered if "quokka" in block)
        others = [n for n in range(1, len(numbered) + 1) if n != marked]
        return Answer(json.dumps([marked, *others]))

    with chat_stub([rank]) as stub:
        settings = {"llm_model": "ranker", "llm_base_url": stub.url, "llm_api_key": "k", "rerank": "llm"}
        async with running_service("edge", tmp_path / "data", **settings) as client:
            results = await _search(client)
    assert results[0]["uri"] == MARKED
    assert {r["uri"]: r["relevance"] for r in results} == first
    assert "rank passages" in stub.requests[0]["messages"][0]["content"]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"rerank": "local"}, "SEARCHSVC_RERANK_MODEL_DIR"),
        ({"rerank": "remote"}, "SEARCHSVC_RERANK_URL"),
        ({"rerank": "llm"}, "SEARCHSVC_LLM_MODEL"),
    ],
)
def test_a_reranker_without_what_it_needs_is_refused_at_start(settings, named):
    from pydantic import ValidationError

    from kbsearch.settings import Settings

    with pytest.raises(ValidationError, match=named):
        Settings(**settings)


async def test_a_model_directory_without_a_graph_stops_start_up(tmp_path):
    from kbsearch.errors import ConfigurationError

    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="cannot load the cross-encoder"):
        async with running_service("edge", tmp_path / "data", rerank="local", rerank_model_dir=tmp_path / "empty"):
            pass
