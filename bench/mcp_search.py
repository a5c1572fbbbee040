"""What MCP costs a search: `search_knowledge` over /mcp against REST `POST /api/v1/search`, same queries, one run.

The real service as a process (`python -m kbsearch` on 127.0.0.1, Qdrant Edge, a tokens file), with
the tests' hashing embedder so the query embedding costs the same in every arm and the difference is the
face alone. Three arms, interleaved query by query so that load drift hits them alike:

- rest:    `POST /api/v1/search` with a JSON body;
- mcp-rpc: a raw JSON-RPC `tools/call` of search_knowledge to `POST /mcp` (the server side
           of MCP: auth, transport, argument validation, rendering the text and structured output);
- mcp:     the MCP SDK's own client (`mcp.Client`, streamable HTTP), `call_tool("search_knowledge")`:
           what an agent's round trip costs, client-side parsing and output validation included.

The overhead is the p50 of the per-query differences against rest (target: mcp <= 5 ms).

    python -m bench.mcp_search [--docs 500] [--queries 300]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import SCIFACT_UNUSED, load_text, print_table, summary_ms, verdict, write_result
from bench.common import parser as common_parser

NAME = "mcp_search"
WARMUP = 20
TARGET_MS = 5.0
TOKEN = "bench-mcp-token"
WORDS = ["deploy", "restart", "rollback", "pager", "dashboard", "latency", "quota", "backup", "restore", "certificate"]


def agree(rest: list[dict[str, Any]], mcp: list[dict[str, Any]]) -> None:
    """The same hits: the same scores, and the same chunks above the last place (RRF ties there may differ)."""
    scores = lambda hits: sorted(round(h["score"], 6) for h in hits)  # noqa: E731
    assert scores(rest) == scores(mcp), ("MCP and REST disagree", scores(rest), scores(mcp))
    floor = min(scores(rest), default=0.0)
    above = lambda hits: {h["id"] for h in hits if round(h["score"], 6) > floor}  # noqa: E731
    assert above(rest) == above(mcp), "MCP and REST disagree"


def document(n: int) -> str:
    sections = []
    for s in range(3):
        words = " ".join(WORDS[(n + s + k) % len(WORDS)] for k in range(60))
        sections.append(f"## Part {s}\n\n{words} doc{n} part{s}.")
    return f"# Runbook {n}\n\n" + "\n\n".join(sections) + "\n"


async def measure(base_url: str, docs: int, queries: int) -> dict[str, Any]:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {TOKEN}"}
    # One HTTP client library for every arm: the SDK's own.
    async with httpx2.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
        started = time.perf_counter()
        for n in range(docs):
            body = {"uri": f"https://git.example/runbooks/{n}.md", "content": document(n)}
            body["metadata"] = {"sourceIdentifier": f"team-{n % 10}/runbooks"}
            (await http.put("/api/v1/documents", json=body)).raise_for_status()
        ingest_s = time.perf_counter() - started
        chunks = (await http.get("/api/v1/status")).json()["store"]["chunks"]
        times: dict[str, list[float]] = {"rest": [], "mcp-rpc": [], "mcp": []}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as mcp_http,
            Client(streamable_http_client(f"{base_url}/mcp", http_client=mcp_http), cache=None) as agent,
        ):
            rpc_headers = {"accept": "application/json, text/event-stream"}
            for n in range(queries + WARMUP):
                query = f"{WORDS[n % len(WORDS)]} {WORDS[(n * 7) % len(WORDS)]}"
                arguments = {"query": query, "limit": 10}
                rpc = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
                rpc["params"] = {"name": "search_knowledge", "arguments": arguments}

                t0 = time.perf_counter()
                rest = await http.post("/api/v1/search", json=arguments)
                t1 = time.perf_counter()
                raw = await http.post("/mcp", json=rpc, headers=rpc_headers)
                t2 = time.perf_counter()
                result = await agent.call_tool("search_knowledge", arguments)
                t3 = time.perf_counter()

                rest.raise_for_status()
                raw.raise_for_status()
                assert not result.is_error, result.content
                agree(rest.json()["results"], result.structured_content["results"])
                agree(rest.json()["results"], raw.json()["result"]["structuredContent"]["results"])
                if n >= WARMUP:
                    times["rest"].append((t1 - t0) * 1000)
                    times["mcp-rpc"].append((t2 - t1) * 1000)
                    times["mcp"].append((t3 - t2) * 1000)
    summaries = {arm: summary_ms(values) for arm, values in times.items()}
    overhead = {
        arm: round(statistics.median(a - r for a, r in zip(times[arm], times["rest"], strict=True)), 3)
        for arm in ("mcp-rpc", "mcp")
    }
    return {
        "searches": summaries,
        "p50OverheadMs": overhead,
        "ingestSeconds": round(ingest_s, 1),
        "chunks": chunks,
        "target": {"p50OverheadMs": TARGET_MS, "met": overhead["mcp"] <= TARGET_MS},
    }


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    s, o = result["searches"], result["p50OverheadMs"]
    figure = (
        f"MCP search_knowledge p50 {s['mcp']['p50']} ms vs REST {s['rest']['p50']} ms: +{o['mcp']} ms "
        f"(server side +{o['mcp-rpc']} ms)"
    )
    return figure, "MCP overhead p50 <= 5 ms", verdict(result["target"]["met"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("mcp_search", __doc__, SCIFACT_UNUSED)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args(argv)

    from tests.support.service_process import ServiceProcess

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tokens = folder / "tokens.yaml"
        tokens.write_text(f'tokens:\n  - {{name: agent, token: "{TOKEN}", write: true, sources: ["*"]}}\n')
        env = {"SEARCHSVC_DATA_DIR": str(folder / "data"), "SEARCHSVC_TOKENS_FILE": str(tokens)}
        # A process of its own (`python -m kbsearch` with the hashing embedder): a server in a thread
        # of the client's process adds a constant ~40 ms to every loopback round trip here.
        service = ServiceProcess(folder / "service.log", env).start()
        try:
            service.wait_ready()
            load_before = load_text()
            result = asyncio.run(measure(f"http://127.0.0.1:{service.port}", args.docs, args.queries))
        finally:
            service.stop()
    result.update(documents=args.docs, queries=args.queries, loadBefore=load_before, load=load_text())
    rows = [
        [arm, s["p50"], s["p95"], result["p50OverheadMs"].get(arm, 0.0), s["n"]]
        for arm, s in result["searches"].items()
    ]
    print_table(["arm", "p50 ms", "p95 ms", "p50 overhead ms", "n"], rows)
    verdict = "met" if result["target"]["met"] else "NOT met"
    print(
        f"MCP search_knowledge round trip (SDK client) over REST: p50 +{result['p50OverheadMs']['mcp']} ms "
        f"(target <= {TARGET_MS} ms: {verdict}); server side alone (raw JSON-RPC): "
        f"+{result['p50OverheadMs']['mcp-rpc']} ms; {args.docs} documents, {result['chunks']} chunks ({result['load']})"
    )
    write_result(NAME, result)
    return result


if __name__ == "__main__":
    main()
