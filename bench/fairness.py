"""Another team's search latency under one team's burst of searches, and under one team's large write.

The real service as its own process (`python -m kbsearch`: uvicorn, Qdrant Edge, the bundled
MiniLM on onnx-int8) with a tokens file of two scoped readers. Team b searches one query at a
time; its p50/p95 are measured:

- baseline:  team b alone;
- fair:      team a (a process of its own) keeps `--burst` searches in flight the whole time,
             honouring Retry-After on a 429 (the service's defaults: two searches per CPU at once,
             32 per caller);
- unbounded: the same burst against a service whose bounds are set out of reach, as the service
             was before fair turns (every search ran at once);
- write:     team a PUTs one `--write-bytes` markdown of ordinary words (~2,000 chunks a MB) while
             b searches, one at a time, for as long as the write lasts; b also PUTs one tiny
             document. Before query embedding had a lane of its own and documents were embedded
             in bounded turns (services/documents/batching.py), b's every search waited for a's whole document.

Every query text is new, so the embedding cache never answers one. Both clients run on the same
cores as the service, as an attacker on the same node would. `--no-burst` runs only the baseline
and write arms (run it against an older tree with PYTHONPATH=<tree>/searchsvc).

    python -m bench.fairness [--docs 200] [--queries 60] [--burst 200] [--write-bytes 1000000] [--no-burst]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    RUNBOOK_WORDS,
    load_text,
    print_table,
    start_process,
    summary_ms,
    wait_process_ready,
    write_result,
)
from tests.support.ordinary import ordinary_markdown

NAME = "fairness"
A_TOKEN, B_TOKEN, ADMIN = "bench-team-a-0001", "bench-team-b-0002", "bench-admin-0003"
TOKENS = (
    "tokens:\n"
    f'  - {{name: admin, token: "{ADMIN}", write: true, sources: ["*"]}}\n'
    f'  - {{name: team-a, token: "{A_TOKEN}", write: true, sources: ["team-a/*"]}}\n'
    f'  - {{name: team-b, token: "{B_TOKEN}", write: true, sources: ["team-b/*"]}}\n'
)
WORDS = list(RUNBOOK_WORDS)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def start(root: Path, port: int, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {"SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml"), **extra}
    return start_process(root, port, f"service-{port}.log", env)


def ingest(url: str, docs: int) -> None:
    with httpx.Client(base_url=url, headers=bearer(ADMIN), timeout=300) as client:
        for i in range(docs):
            team = "a" if i % 2 else "b"
            words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(40))
            body = {
                "uri": f"https://git.example/{team}/doc{i}.md",
                "content": f"# Doc {i}\n\n{words}. Runbook {i} explains how to {WORDS[i % len(WORDS)]}.",
                "metadata": {"sourceIdentifier": f"team-{team}/docs"},
            }
            client.put("/api/v1/documents", json=body).raise_for_status()


async def team_b(client: httpx.AsyncClient, queries: int, tag: str) -> list[float]:
    latencies = []
    for i in range(queries):
        query = f"how to {WORDS[i % len(WORDS)]} the service {tag} {i}"
        started = time.perf_counter()
        response = await client.post("/api/v1/search", json={"query": query}, headers=bearer(B_TOKEN))
        latencies.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return latencies


async def team_a(client: httpx.AsyncClient, worker: int, stop: asyncio.Event, counts: dict[str, int]) -> None:
    i = 0
    while not stop.is_set():
        query = f"burst {worker} {i} {WORDS[i % len(WORDS)]}"
        i += 1
        try:
            response = await client.post("/api/v1/search", json={"query": query}, headers=bearer(A_TOKEN))
        except httpx.TransportError:
            counts["errors"] += 1
            continue
        if response.status_code == 429:
            counts["refused"] += 1
            await asyncio.sleep(float(response.headers.get("retry-after", "1")))
        else:
            counts["served"] += 1


async def burst(url: str, workers: int) -> None:
    """Team a's burst, in a process of its own (`--burst-from`), until it is terminated."""
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    counts = {"served": 0, "refused": 0, "errors": 0}
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await asyncio.gather(*(team_a(client, w, asyncio.Event(), counts) for w in range(workers)))


def arm(url: str, queries: int, workers: int, tag: str) -> dict[str, Any]:
    """Team b's latencies while (with `workers`) another process keeps team a's burst going."""

    asyncio.run(_measure_b(url, 5, f"warm-{tag}"))
    attacker = None
    if workers:
        command = [sys.executable, "-m", "bench.fairness", "--burst-from", url, "--burst", str(workers)]
        attacker = subprocess.Popen(command)
        time.sleep(5)  # the burst is in full swing before b starts
    try:
        latencies = asyncio.run(_measure_b(url, queries, tag))
    finally:
        if attacker is not None:
            attacker.terminate()
            attacker.wait(timeout=60)
    return {"b": summary_ms(latencies)}


def write_arm(url: str, size: int) -> dict[str, Any]:
    """Team b's searches (and one tiny PUT) for as long as team a's one large PUT lasts."""
    asyncio.run(_measure_b(url, 5, "warm-write"))
    done: dict[str, Any] = {}

    def put(token: str, name: str, content: str) -> None:
        team = name.split("/")[0]
        body = {
            "uri": f"https://git.example/{name}.md",
            "content": content,
            "metadata": {"sourceIdentifier": f"{team}/docs"},
        }
        started = time.perf_counter()
        with httpx.Client(base_url=url, headers=bearer(token), timeout=1800) as client:
            response = client.put("/api/v1/documents", json=body)
        response.raise_for_status()
        done[team] = {"seconds": round(time.perf_counter() - started, 2), "chunks": response.json()["chunks"]}

    large = ordinary_markdown(size, seed=int(time.time()))  # new text each run: nothing stored or cached
    writer = threading.Thread(target=put, args=(A_TOKEN, "team-a/handbook", large))
    tiny = threading.Thread(target=put, args=(B_TOKEN, "team-b/tiny", "# Tiny\n\nTeam b feeds the fish at nine.\n"))
    writer.start()
    time.sleep(3)  # a's document is chunked and being embedded
    tiny.start()

    async def searches() -> list[float]:
        latencies: list[float] = []
        async with httpx.AsyncClient(base_url=url, timeout=1800) as client:
            while writer.is_alive():
                latencies += await team_b(client, 1, f"write {len(latencies)}")
        return latencies

    latencies = asyncio.run(searches())
    writer.join()
    tiny.join()
    return {"b": summary_ms(latencies), "aPut": done["team-a"], "bTinyPut": done["team-b"], "bytes": len(large)}


async def _measure_b(url: str, count: int, label: str) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        return await team_b(client, count, label)


def run_service_arm(root: Path, port: int, extra: dict[str, str], docs: int, fn) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    child = start(root, port, extra)
    try:
        wait_process_ready(url, child, timeout_s=300)
        if not (root / "ingested").exists():
            ingest(url, docs)
            (root / "ingested").touch()
        return fn(url)
    finally:
        child.terminate()
        child.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--queries", type=int, default=60, help="team b's searches per arm")
    parser.add_argument("--burst", type=int, default=200, help="team a's searches in flight")
    parser.add_argument("--port", type=int, default=18731)
    parser.add_argument("--slots", type=int, default=0, help="SEARCHSVC_MAX_CONCURRENT_SEARCHES of the fair arm")
    parser.add_argument("--per-caller", type=int, help="SEARCHSVC_MAX_SEARCHES_PER_CALLER of the fair arm")
    parser.add_argument("--write-bytes", type=int, default=1_000_000, help="team a's large write (0: no write arm)")
    parser.add_argument("--no-burst", action="store_true", help="only the baseline and write arms")
    parser.add_argument("--burst-from", help=argparse.SUPPRESS)  # the attacker's own process
    args = parser.parse_args()
    if args.burst_from:
        asyncio.run(burst(args.burst_from, args.burst))
        return
    results: dict[str, Any] = {
        "docs": args.docs, "queries": args.queries, "burst": args.burst, "slots": args.slots,
        "perCaller": args.per_caller, "writeBytes": args.write_bytes, "cpus": os.cpu_count()
    }  # fmt: skip
    arms = ["baseline"] if args.no_burst else ["baseline", "fair"]
    with tempfile.TemporaryDirectory(prefix="kb-fairness-") as tmp:
        root = Path(tmp)
        (root / "tokens.yaml").write_text(TOKENS)

        def fair(url: str) -> dict[str, Any]:
            for name in arms:
                results[name] = arm(url, args.queries, args.burst if name == "fair" else 0, name)
                print(name, results[name], flush=True)  # each arm as it ends: a long run shows progress
                write_result(NAME, results)
            if args.write_bytes:
                results["write"] = write_arm(url, args.write_bytes)
                print("write", results["write"], flush=True)
                write_result(NAME, results)
            return results

        fair_env = {"SEARCHSVC_MAX_CONCURRENT_SEARCHES": str(args.slots)}
        if args.per_caller:
            fair_env["SEARCHSVC_MAX_SEARCHES_PER_CALLER"] = str(args.per_caller)
        run_service_arm(root, args.port, fair_env, args.docs, fair)
        if not args.no_burst:
            unbounded = {"SEARCHSVC_MAX_CONCURRENT_SEARCHES": "100000", "SEARCHSVC_MAX_SEARCHES_PER_CALLER": "100000"}
            results["unbounded"] = run_service_arm(
                root, args.port + 1, unbounded, args.docs, lambda url: arm(url, args.queries, args.burst, "u")
            )
            print("unbounded", results["unbounded"], flush=True)
            arms.append("unbounded")
    if args.write_bytes:
        arms.append("write")
        write = results["write"]
        print(f"a's write: {write['aPut']}; b's tiny write: {write['bTinyPut']}")
    base = results["baseline"]["b"]["p95"]
    rows = [
        [name, *(results[name]["b"][k] for k in ("n", "p50", "p95", "max")), round(results[name]["b"]["p95"] / base, 2)]
        for name in arms
    ]
    print_table(["arm", "b searches", "b p50 ms", "b p95 ms", "b max ms", "p95 / baseline"], rows)
    results["load"] = load_text()
    print(results["load"])
    print(write_result(NAME, results))


if __name__ == "__main__":
    main()
