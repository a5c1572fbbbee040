"""One team's burst of searches against another team's search latency, with and without fair turns.

The real service as its own process (`python -m kbsearch`: uvicorn, Qdrant Edge, the bundled
MiniLM on onnx-int8) with a tokens file of two scoped readers. Team b searches one query at a
time; its p50/p95 are measured:

- baseline:  team b alone;
- fair:      team a (a process of its own) keeps `--burst` searches in flight the whole time,
             honouring Retry-After on a 429 (the service's defaults: two searches per CPU at once,
             32 per caller);
- unbounded: the same burst against a service whose bounds are set out of reach, as the service
             was before fair turns (every search ran at once).

Every query text is new, so the embedding cache never answers one. Both clients run on the same
cores as the service, as an attacker on the same node would.

    python -m bench.fairness [--docs 200] [--queries 60] [--burst 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import CACHE_DIR, load_text, print_table, summary_ms, write_result

NAME = "fairness"
A_TOKEN, B_TOKEN, ADMIN = "bench-team-a-0001", "bench-team-b-0002", "bench-admin-0003"
TOKENS = (
    "tokens:\n"
    f'  - {{name: admin, token: "{ADMIN}", write: true, sources: ["*"]}}\n'
    f'  - {{name: team-a, token: "{A_TOKEN}", sources: ["team-a/*"]}}\n'
    f'  - {{name: team-b, token: "{B_TOKEN}", sources: ["team-b/*"]}}\n'
)
WORDS = [
    "deploy",
    "restart",
    "rollback",
    "pager",
    "dashboard",
    "latency",
    "quota",
    "backup",
    "restore",
    "certificate",
    "ingress",
]


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def start(root: Path, port: int, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCHSVC_")}
    env |= {
        "SEARCHSVC_PORT": str(port),
        "SEARCHSVC_DATA_DIR": str(root / "data"),
        "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml"),
        "SEARCHSVC_ONNX_DIR": str(CACHE_DIR / "onnx"),
        "SEARCHSVC_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        **extra,
    }
    log = open(root / f"service-{port}.log", "wb")  # noqa: SIM115 - the child writes it until it ends
    return subprocess.Popen([sys.executable, "-m", "kbsearch"], env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(url: str, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the service exited with {child.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the service did not become ready")


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

    async def measure(count: int, label: str) -> list[float]:
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            return await team_b(client, count, label)

    asyncio.run(measure(5, f"warm-{tag}"))
    attacker = None
    if workers:
        command = [sys.executable, "-m", "bench.fairness", "--burst-from", url, "--burst", str(workers)]
        attacker = subprocess.Popen(command)
        time.sleep(5)  # the burst is in full swing before b starts
    try:
        latencies = asyncio.run(measure(queries, tag))
    finally:
        if attacker is not None:
            attacker.terminate()
            attacker.wait(timeout=60)
    return {"b": summary_ms(latencies)}


def run_service_arm(root: Path, port: int, extra: dict[str, str], docs: int, fn) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    child = start(root, port, extra)
    try:
        wait_ready(url, child)
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
    parser.add_argument("--burst-from", help=argparse.SUPPRESS)  # the attacker's own process
    args = parser.parse_args()
    if args.burst_from:
        asyncio.run(burst(args.burst_from, args.burst))
        return
    results: dict[str, Any] = {
        "docs": args.docs, "queries": args.queries, "burst": args.burst, "slots": args.slots,
        "perCaller": args.per_caller, "cpus": os.cpu_count()
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kb-fairness-") as tmp:
        root = Path(tmp)
        (root / "tokens.yaml").write_text(TOKENS)

        def fair(url: str) -> dict[str, Any]:
            for name, workers in (("baseline", 0), ("fair", args.burst)):
                results[name] = arm(url, args.queries, workers, name)
                print(name, results[name], flush=True)  # each arm as it ends: a long run shows progress
                write_result(NAME, results)
            return results

        fair_env = {"SEARCHSVC_MAX_CONCURRENT_SEARCHES": str(args.slots)}
        if args.per_caller:
            fair_env["SEARCHSVC_MAX_SEARCHES_PER_CALLER"] = str(args.per_caller)
        run_service_arm(root, args.port, fair_env, args.docs, fair)
        unbounded = {"SEARCHSVC_MAX_CONCURRENT_SEARCHES": "100000", "SEARCHSVC_MAX_SEARCHES_PER_CALLER": "100000"}
        results["unbounded"] = run_service_arm(
            root, args.port + 1, unbounded, args.docs, lambda url: arm(url, args.queries, args.burst, "u")
        )
        print("unbounded", results["unbounded"], flush=True)
    base = results["baseline"]["b"]["p95"]
    rows = [
        [name, results[name]["b"]["p50"], results[name]["b"]["p95"], round(results[name]["b"]["p95"] / base, 2)]
        for name in ("baseline", "fair", "unbounded")
    ]
    print_table(["arm", "b p50 ms", "b p95 ms", "p95 / baseline"], rows)
    results["load"] = load_text()
    print(results["load"])
    print(write_result(NAME, results))


if __name__ == "__main__":
    main()
