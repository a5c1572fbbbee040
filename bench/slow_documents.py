"""Another team's search and /readyz latency while one team's slow documents run; the cost of front-matter tags.

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

Two more arms (issue 37), each on a service of its own:

- tags:     one 1 MB markdown document (1,800 sections) with 6,500 front-matter tags (64 KB), the
            same with the budget's 100 tags, and without tags: the answer, its seconds and the
            service's peak memory growth while it is written. Before the budget counted them the
            6,500 tags were copied into every chunk: +766 MiB and 177 s, against +237 MiB and 67 s.
- chunking: team b's keyword search alone, then while team a writes a document of 250,000 list
            items (1 MB) over and over; the service allows 50 chunks, so each is refused once
            chunked and what runs meanwhile is its chunking alone. With the chunker in a thread of
            the service (holding the GIL), b's median went from 39 ms to 133 ms.

    python -m bench.slow_documents [--arms conversions,tags,chunking] [--slow 50] [--wall 10] [--queries 60]
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


def team_b(url: str, queries: int, tag: str, mode: str = "hybrid") -> dict[str, Any]:
    searches, probes = [], []
    with httpx.Client(base_url=url, timeout=900) as client:
        for i in range(queries):
            query = f"how to {WORDS[i % len(WORDS)]} the service {tag} {i}"
            started = time.perf_counter()
            body = {"query": query, "mode": mode}
            client.post("/api/v1/search", json=body, headers=bearer(B_TOKEN)).raise_for_status()
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


def tagged(tags: int) -> str:
    """About 1 MB of markdown in 1,800 sections, naming `tags` tags in its front matter."""
    sections = "".join(f"## Section {i}\n\n" + f"alpha{i} beta gamma " * 24 + "\n\n" for i in range(1800))
    names = ", ".join(f"tag{i:05d}" for i in range(tags))
    return f"---\ntitle: Tagged\ntags: [{names}]\n---\n{sections}" if tags else sections


def stopped(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a graceful stop waits for queued writes: minutes
        child.kill()
        child.wait()


def answer_of(response: httpx.Response) -> str:
    if response.status_code == 200:
        return f"200 {response.json()['chunks']} chunks"
    error = response.json().get("error", {})
    return f"{response.status_code} {error.get('code', '')} {error.get('details', {}).get('limit', '')}".strip()


def tags_arm(root: Path, port: int) -> dict[str, Any]:
    """Each tagged document written once: its answer, seconds and the service's peak memory growth."""
    url = f"http://127.0.0.1:{port}"
    child = start(root, port, {})
    sampler = Sampler(child.pid)
    arms: dict[str, Any] = {}
    try:
        wait_ready(url, child)
        sampler.start()
        with httpx.Client(base_url=url, headers=bearer(ADMIN), timeout=3600) as client:
            for n, tags in enumerate((6500, 100, 0)):
                time.sleep(2)  # a sample of the settled memory
                before = sampler.peak_kib = sampler.last_kib
                body = {"uri": f"https://git.example/a/tagged{n}.md", "content": tagged(tags),
                        "metadata": {"sourceIdentifier": "team-a/docs"}}  # fmt: skip
                started = time.monotonic()
                response = client.put("/api/v1/documents", json=body)
                seconds = round(time.monotonic() - started, 1)
                time.sleep(1)
                arms[f"{tags} tags"] = {"answer": answer_of(response), "seconds": seconds,
                                        "growthMiB": round((sampler.peak_kib - before) / 1024)}  # fmt: skip
                print(f"{tags} tags", arms[f"{tags} tags"], flush=True)
    finally:
        sampler.stop.set()
        stopped(child)
    return arms


def chunking_arm(root: Path, port: int, docs: int, queries: int, items: int) -> dict[str, Any]:
    """Team b's keyword search alone, then while team a's pathological document is chunked again and again."""
    url = f"http://127.0.0.1:{port}"
    child = start(root, port, {"SEARCHSVC_MAX_DOCUMENT_CHUNKS": "50"})
    results: dict[str, Any] = {"listItems": items}
    stop = threading.Event()
    answers: list[str] = []

    def team_a() -> None:
        body = {"uri": "https://git.example/a/list.md", "content": "- a\n" * items,
                "metadata": {"sourceIdentifier": "team-a/docs"}}  # fmt: skip
        with httpx.Client(base_url=url, headers=bearer(ADMIN), timeout=3600) as client:
            while not stop.is_set():
                started = time.monotonic()
                answer = answer_of(client.put("/api/v1/documents", json=body))
                answers.append(f"{answer} in {time.monotonic() - started:.1f} s")

    try:
        wait_ready(url, child)
        ingest(url, docs)
        team_b(url, 5, "warm", "keyword")
        results["alone"] = team_b(url, queries, "alone", "keyword")
        print("alone", results["alone"], flush=True)
        writer = threading.Thread(target=team_a, daemon=True)
        writer.start()
        time.sleep(1)  # a's first document is being chunked
        results["duringChunking"] = team_b(url, queries, "during", "keyword")
        stop.set()
        writer.join()
        results["aAnswers"] = answers
        print("during", results["duringChunking"], answers, flush=True)
    finally:
        stop.set()
        stopped(child)
    return results


def conversions_arm(root: Path, port: int, args: argparse.Namespace) -> dict[str, Any]:
    pdf = base64.b64encode(long_pdf(args.pages)).decode()
    results: dict[str, Any] = {"slow": args.slow, "wall": args.wall, "pages": args.pages}
    url = f"http://127.0.0.1:{port}"
    child = start(root, port, {"SEARCHSVC_CONVERT_WALL_SECONDS": str(args.wall)})
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
        stopped(child)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default="conversions,tags,chunking", help="which arms, comma-separated")
    parser.add_argument("--docs", type=int, default=200, help="documents to search (both teams)")
    parser.add_argument("--slow", type=int, default=50, help="team a's slow conversions sent at once")
    parser.add_argument("--wall", type=float, default=10.0, help="SEARCHSVC_CONVERT_WALL_SECONDS")
    parser.add_argument("--pages", type=int, default=1500, help="pages of each slow PDF")
    parser.add_argument("--items", type=int, default=250_000, help="list items of team a's document (chunking arm)")
    parser.add_argument("--queries", type=int, default=60, help="team b's searches per arm")
    parser.add_argument("--port", type=int, default=18751)
    args = parser.parse_args()
    arms = args.arms.split(",")
    results: dict[str, Any] = {"queries": args.queries, "loadAtStart": load_text()}
    rows = []
    for n, arm in enumerate(arms):
        with tempfile.TemporaryDirectory(prefix="kb-slow-docs-") as tmp:
            root = Path(tmp)
            (root / "tokens.yaml").write_text(TOKENS)
            port = args.port + n
            if arm == "conversions":
                got = results["conversions"] = conversions_arm(root, port, args)
                for name, key in (("baseline", "baseline"), (f"{args.slow} slow conversions", "slowArm")):
                    rows.append([name, got[key]["search"], got[key]["readyz"]["p95"]])
                print(f"peak RSS {got['peakMiB']} MiB (baseline {got['baselinePeakMiB']} MiB)")
            elif arm == "tags":
                results["tags"] = tags_arm(root, port)
            elif arm == "chunking":
                got = results["chunking"] = chunking_arm(root, port, args.docs, args.queries, args.items)
                for name, key in (
                    ("keyword alone", "alone"),
                    (f"keyword, {args.items} items chunked", "duringChunking"),
                ):
                    rows.append([name, got[key]["search"], got[key]["readyz"]["p95"]])
            else:
                parser.error(f"no arm {arm!r}")
    if rows:
        print_table(["arm", "b search p50 ms", "b search p95 ms", "b search max ms", "readyz p95 ms"],
                    [[name, s["p50"], s["p95"], s["max"], probe] for name, s, probe in rows])  # fmt: skip
    for name, got in results.get("tags", {}).items():
        print(f"  {name}: {got['answer']}, {got['seconds']} s, +{got['growthMiB']} MiB")
    results["load"] = load_text()
    print(results["load"])
    print(write_result(NAME, results))


if __name__ == "__main__":
    main()
