"""Console page load times: the search page at 20,000 chunks, and the insights page over 100,000 logged queries.

The real service over HTTP (uvicorn on 127.0.0.1, Qdrant Edge, open access), with the tests'
hashing embedder at MiniLM's 384 dimensions: query embedding is measured by `search_latency`,
and leaving MiniLM out keeps this figure about the page (the search plus Jinja2 rendering).
Corpus: generated runbooks, one ~650-character section per chunk, ingested through
`PUT /api/v1/documents`. Each page load is a full GET of the HTML, timed at the client, with
the same query sent to REST (`GET /api/v1/search`) right after it, so the console's own cost
is the difference. The insights page reads a query log filled with `--log-entries` entries
(written straight into the log's store, spread over 30 days) and is loaded for each window.

    python -m bench.console [--chunks 20000] [--queries 200] [--log-entries 100000]
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    SCIFACT_UNUSED,
    http_client,
    load_average,
    load_text,
    print_table,
    run_service,
    summary_ms,
    write_result,
)
from bench.common import parser as common_parser

NAME = "console"
WARMUP = 10
SECTIONS_PER_DOC = 10
SOURCES = 8
_VOCABULARY = """deploy restart rollback pager dashboard latency quota backup restore certificate ingress node pod
volume secret token rotation alert incident postmortem canary migration schema index replica cache queue retry
timeout budget cluster namespace helm chart operator sync commit branch review release freeze"""
WORDS = _VOCABULARY.split()


def document(rng: random.Random, number: int) -> str:
    parts = [f"# Runbook {number}\n"]
    for section in range(SECTIONS_PER_DOC):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(8)]
        parts.append(f"## Step {section}\n\n" + " ".join(sentences) + "\n")
    return "\n".join(parts)


def ingest(base_url: str, chunks: int) -> tuple[float, int]:
    rng = random.Random(7)
    documents = max(1, chunks // SECTIONS_PER_DOC)
    started = time.perf_counter()
    with http_client(base_url) as client:
        for number in range(documents):
            body = {
                "uri": f"https://git.example.com/team-{number % SOURCES}/runbooks/-/blob/main/rb-{number}.md",
                "content": document(rng, number),
                "metadata": {"sourceIdentifier": f"team-{number % SOURCES}/runbooks"},
            }
            client.put("/api/v1/documents", json=body).raise_for_status()
        stored = client.get("/api/v1/status").json()["store"]["chunks"]
    return time.perf_counter() - started, stored


def search_pages(base_url: str, queries: int) -> dict[str, Any]:
    timed: dict[str, Any]
    rng = random.Random(11)
    page_ms, rest_ms, sizes = [], [], []
    with http_client(base_url) as client:
        for n in range(queries + WARMUP):
            query = " ".join(rng.choice(WORDS) for _ in range(3))
            # Each query twice, page and REST, the first of the pair alternating: whichever
            # runs second finds the engine's caches warm for that query.
            timed = {}
            for kind in ("page", "rest") if n % 2 else ("rest", "page"):
                t0 = time.perf_counter()
                if kind == "page":
                    timed[kind] = client.get("/ui/", params={"q": query})
                else:
                    timed[kind] = client.get("/api/v1/search", params={"q": query})
                timed[kind + "Ms"] = (time.perf_counter() - t0) * 1000
            page, rest = timed["page"], timed["rest"]
            page.raise_for_status()
            rest.raise_for_status()
            assert page.text.count('class="hit"') == len(rest.json()["results"]) == 10
            if n >= WARMUP:
                page_ms.append(timed["pageMs"])
                rest_ms.append(timed["restMs"])
                sizes.append(len(page.content))
    page_summary, rest_summary = summary_ms(page_ms), summary_ms(rest_ms)
    return {
        "pageMs": page_summary,
        "restMs": rest_summary,
        "consoleOverheadP50Ms": round(page_summary["p50"] - rest_summary["p50"], 3),
        "pageBytes": round(sum(sizes) / len(sizes)),
        "load": load_average(),
    }


def fill_query_log(app: Any, entries: int) -> float:
    """`entries` log entries over the last 30 days, written straight into the log's store."""
    from kbsearch.deps import context_of
    from kbsearch.models import QueryLogEntry

    store = context_of(app).query_log.store
    rng = random.Random(5)
    now = time.time()
    vocabulary = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for _ in range(5000)]
    origins = ("api", "mcp", "ui", "ask")
    started = time.perf_counter()
    batch: list[QueryLogEntry] = []
    for n in range(entries):
        results = 0 if n % 17 == 0 else rng.randint(1, 10)
        batch.append(
            QueryLogEntry(
                at=now - rng.random() * 30 * 86_400,
                origin=origins[n % 4],
                query=rng.choice(vocabulary),
                results=results,
                top_score=None if results == 0 else rng.random(),
                latency_ms=rng.uniform(3, 60),
                caller="anonymous",
                sources=None,
            )
        )
        if len(batch) == 1000:
            store.append(batch)
            batch = []
    if batch:
        store.append(batch)
    return time.perf_counter() - started


def insights_pages(base_url: str, loads: int) -> dict[str, Any]:
    """Each window's page `loads` times, with GET /api/v1/insights right after each: the page's own cost apart."""
    out: dict[str, Any] = {}
    with http_client(base_url) as client:
        for window in ("24h", "7d", "30d"):
            page_ms, rest_ms = [], []
            for n in range(loads + 2):
                t0 = time.perf_counter()
                page = client.get("/ui/insights", params={"window": window})
                t1 = time.perf_counter()
                rest = client.get("/api/v1/insights", params={"window": window})
                t2 = time.perf_counter()
                page.raise_for_status()
                rest.raise_for_status()
                assert 'id="zero-result"' in page.text, "the insights page shows no zero-result queries"
                if n >= 2:  # the log is re-read on every request: no cache favours the second
                    page_ms.append((t1 - t0) * 1000)
                    rest_ms.append((t2 - t1) * 1000)
            out[window] = summary_ms(page_ms)
            out[window + "Rest"] = summary_ms(rest_ms)
            out[window + "Load"] = load_average()
    return out


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    page, insights = result["search"]["pageMs"], result["insights"]["30d"]
    figure = (
        f"/ui/?q= p50 {page['p50']:.0f} ms at {result['chunks']} chunks "
        f"(REST {result['search']['restMs']['p50']:.0f} ms); "
        f"insights 30d p50 {insights['p50']:.0f} ms over {result['logEntries']} logged queries"
    )
    return figure, "measured (no target)", "-"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("console", __doc__, SCIFACT_UNUSED)
    parser.add_argument("--chunks", type=int, default=20_000, help="collection size in chunks (default 20000)")
    parser.add_argument("--queries", type=int, default=200, help="search page loads (default 200, plus 10 warm-up)")
    parser.add_argument("--log-entries", type=int, default=100_000, help="query log entries (default 100000)")
    parser.add_argument("--insights-loads", type=int, default=20, help="insights page loads per window (default 20)")
    args = parser.parse_args(argv)

    from kbsearch.settings import Settings
    from tests.support.hashing import HashingEmbedder

    for noisy in ("httpx", "kbsearch", "mcp"):  # one line per request would bury the figures and slow the service
        logging.getLogger(noisy).setLevel(logging.WARNING)
    print(f"[console] {args.chunks} chunks, {args.queries} searches, {args.log_entries} log entries ({load_text()})")
    result: dict[str, Any] = {"embedder": "hashing, 384 dimensions (query embedding excluded; see search_latency)"}
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        settings = Settings(data_dir=Path(tmp), collection="bench", api_token=None, read_token=None)
        with run_service(settings, embedder=HashingEmbedder(dimensions=384)) as svc:
            ingest_s, stored = ingest(svc.base_url, args.chunks)
            print(f"  ingested {stored} chunks in {ingest_s:.0f} s ({load_text()})", flush=True)
            result["chunks"], result["ingestSeconds"] = stored, round(ingest_s, 1)
            result["search"] = search = search_pages(svc.base_url, args.queries)
            print(
                f"  /ui/?q= p50 {search['pageMs']['p50']:.1f} ms p95 {search['pageMs']['p95']:.1f} ms; REST p50 "
                f"{search['restMs']['p50']:.1f} ms; {search['pageBytes']} bytes ({load_text(search['load'])})",
                flush=True,
            )
            fill_s = fill_query_log(svc.app, args.log_entries)
            print(f"  wrote {args.log_entries} query log entries in {fill_s:.0f} s", flush=True)
            result["logEntries"], result["logFillSeconds"] = args.log_entries, round(fill_s, 1)
            result["insights"] = insights = insights_pages(svc.base_url, args.insights_loads)
    rows = [["/ui/?q=<3 words>", stored, search["pageMs"]["p50"], search["pageMs"]["p95"], load_text(search["load"])]]
    rows[0].insert(4, search["restMs"]["p50"])
    rows.extend(
        [
            f"/ui/insights?window={w}",
            args.log_entries,
            insights[w]["p50"],
            insights[w]["p95"],
            insights[w + "Rest"]["p50"],
            load_text(insights[w + "Load"]),
        ]
        for w in ("24h", "7d", "30d")
    )
    print_table(["page", "size", "p50 ms", "p95 ms", "REST p50 ms", "load"], rows)
    write_result(NAME, result)
    return result


if __name__ == "__main__":
    main()
