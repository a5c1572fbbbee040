"""Another team's search and /readyz latency while one team's 50 slow conversions run.

The real service as its own process (`python -m kbsearch`: uvicorn, Qdrant Edge, the bundled
MiniLM on onnx-int8) with the tokens file of bench/fairness.py. Team b (a scoped reader) searches
one query at a time and /readyz is polled between its searches; their p50/p95 are measured:

- baseline: nothing else runs;
- slow:     team a sends --slow long PDFs at once (default 50; the all-sources token writing
            `team-a/*`, retrying on 429 as the operator does). Each holds a conversion until the
            conversion time limit ends it (--wall, lowered from 60 s so the run stays short; the
            PDF takes longer than that to extract on any machine).

Before the budget (issue 27), conversions waited in the shared thread pool and another team's
search took 356 s, /readyz 235 s. The service's memory (with its conversion children) is sampled
too: waiting PDFs used to raise it from 379 MiB to 1.5 GiB.

    python -m bench.slow_documents [--slow 50] [--wall 10] [--queries 60]
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.common import load_text, print_table, summary_ms, write_result
from bench.fairness import ADMIN, B_TOKEN, TOKENS, WORDS, bearer, ingest, start, wait_ready
from bench.sync_memory import Sampler
from tests.support.formatfiles import long_pdf

NAME = "slow_documents"


def team_b(url: str, queries: int, tag: str) -> dict[str, Any]:
    searches, probes = [], []
    with httpx.Client(base_url=url, timeout=900) as client:
        for i in range(queries):
            query = f"how to {WORDS[i % len(WORDS)]} the service {tag} {i}"
            started = time.perf_counter()
            client.post("/api/v1/search", json={"query": query}, headers=bearer(B_TOKEN)).raise_for_status()
            searches.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            client.get("/readyz").raise_for_status()
            probes.append((time.perf_counter() - started) * 1000)
    return {"search": summary_ms(searches), "readyz": summary_ms(probes)}


def team_a(url: str, pdf: str, count: int, stop: threading.Event, outcomes: dict[str, int]) -> None:
    """`count` slow PDFs at once, each retried on 429 until answered or `stop`."""

    def one(n: int) -> None:
        body = {
            "uri": f"https://git.example/a/slow{n}.pdf",
            "content": pdf,
            "contentEncoding": "base64",
            "metadata": {"sourceIdentifier": "team-a/docs"},
        }
        with httpx.Client(base_url=url, headers=bearer(ADMIN), timeout=3600) as client:
            while not stop.is_set():
                try:
                    response = client.put("/api/v1/documents", json=body)
                except httpx.TransportError:
                    return  # the service was stopped at the end of the run
                if response.status_code != 429:
                    code = response.json().get("error", {}).get("code", "") if response.status_code != 200 else ""
                    key = f"{response.status_code} {code}".strip()
                    outcomes[key] = outcomes.get(key, 0) + 1
                    return
                outcomes["429 retried"] = outcomes.get("429 retried", 0) + 1
                time.sleep(float(response.headers.get("retry-after", "1")))

    with ThreadPoolExecutor(count) as pool:
        list(pool.map(one, range(count)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200, help="documents to search (both teams)")
    parser.add_argument("--slow", type=int, default=50, help="team a's slow conversions sent at once")
    parser.add_argument("--wall", type=float, default=10.0, help="SEARCHSVC_CONVERT_WALL_SECONDS")
    parser.add_argument("--pages", type=int, default=1500, help="pages of each slow PDF")
    parser.add_argument("--queries", type=int, default=60, help="team b's searches per arm")
    parser.add_argument("--port", type=int, default=18751)
    args = parser.parse_args()
    pdf = base64.b64encode(long_pdf(args.pages)).decode()
    results: dict[str, Any] = {"slow": args.slow, "wall": args.wall, "pages": args.pages, "queries": args.queries}
    with tempfile.TemporaryDirectory(prefix="kb-slow-docs-") as tmp:
        root = Path(tmp)
        (root / "tokens.yaml").write_text(TOKENS)
        url = f"http://127.0.0.1:{args.port}"
        child = start(root, args.port, {"SEARCHSVC_CONVERT_WALL_SECONDS": str(args.wall)})
        sampler = Sampler(child.pid)
        stop = threading.Event()
        try:
            wait_ready(url, child)
            ingest(url, args.docs)
            team_b(url, 5, "warm")
            sampler.start()
            results["baseline"] = team_b(url, args.queries, "baseline")
            results["baselinePeakMiB"] = round(sampler.peak_kib / 1024)
            print("baseline", results["baseline"], flush=True)
            outcomes: dict[str, int] = {}
            attacker = threading.Thread(target=team_a, args=(url, pdf, args.slow, stop, outcomes), daemon=True)
            started = time.monotonic()
            attacker.start()
            time.sleep(args.wall)  # a's queue has formed and its first conversions run
            results["slowArm"] = team_b(url, args.queries, "slow")
            results["slowArmSeconds"] = round(time.monotonic() - started, 1)
            results["aOutcomesDuringArm"] = dict(outcomes)
            results["peakMiB"] = round(sampler.peak_kib / 1024)
            print("slow", results["slowArm"], outcomes, flush=True)
        finally:
            stop.set()
            sampler.stop.set()
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a graceful stop waits for a's queued writes: minutes
                child.kill()
                child.wait()
    rows = [
        [arm, results[key]["search"]["p50"], results[key]["search"]["p95"], results[key]["readyz"]["p95"]]
        for arm, key in (("baseline", "baseline"), (f"{args.slow} slow conversions", "slowArm"))
    ]
    print_table(["arm", "b search p50 ms", "b search p95 ms", "readyz p95 ms"], rows)
    results["load"] = load_text()
    print(f"peak RSS {results['peakMiB']} MiB (baseline {results['baselinePeakMiB']} MiB); {results['load']}")
    print(write_result(NAME, results))


if __name__ == "__main__":
    main()
