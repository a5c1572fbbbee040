"""Insights over a large query log, and what the query log costs a search.

1. Insights latency: `--entries` (default 100,000) logged queries are written straight into the
   query-log collection through the store (not through searches), spread over 30 days, 4
   origins, 10 team sources and a Zipf-like mix of 5,000 distinct queries. Then the real
   service (uvicorn on 127.0.0.1, Qdrant Edge) answers GET /api/v1/insights for each window,
   for an unrestricted caller and for a team's token (one source in ten), `--repeats` times each.
2. Overhead: two services on the same corpus, one with SEARCHSVC_QUERY_LOG=on and one with off,
   queried alternately (`--queries` each, after a warm-up), with the tests' hashing embedder so
   that the query embedding does not drown the difference.

    python -m bench.insights [--entries 100000] [--repeats 5] [--queries 300] [--docs 300]
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import SCIFACT_UNUSED, http_client, load_text, print_table, run_service, summary_ms, write_result
from bench.common import parser as common_parser

NAME = "insights"
WINDOWS = ("24h", "7d", "30d")
ORIGINS = ("api", "mcp", "ui", "ask")
TEAMS = 10
DISTINCT = 5000
WARMUP = 10
WORDS = ["deploy", "restart", "rollback", "pager", "dashboard", "latency", "quota", "backup", "restore", "certificate"]


def tokens_file(folder: Path) -> Path:
    path = folder / "tokens.yaml"
    path.write_text(
        "tokens:\n"
        '  - {name: admin, token: "bench-admin", write: true, sources: ["*"]}\n'
        '  - {name: team-03, token: "bench-team", sources: ["team-03/docs"]}\n'
    )
    return path


def fill_log(data_dir: Path, collection: str, entries: int, seed: int = 11) -> float:
    """Write `entries` log entries directly through the query-log store; returns the seconds it took."""
    from kbsearch.models import QueryLogEntry
    from kbsearch.store.edge.querylog import EdgeQueryLog
    from kbsearch.store.querylog import querylog_collection

    rng = random.Random(seed)
    now = time.time()
    log = EdgeQueryLog(data_dir, querylog_collection(collection))
    log.open()
    started = time.perf_counter()
    try:
        batch: list[QueryLogEntry] = []
        for _ in range(entries):
            rank = min(int(rng.paretovariate(1.1)), DISTINCT)  # a few queries are very frequent
            results = 0 if rng.random() < 0.05 else rng.randint(1, 10)
            team = rng.randrange(TEAMS)
            batch.append(
                QueryLogEntry(
                    at=now - rng.random() * 30 * 86_400,
                    origin=rng.choice(ORIGINS),  # type: ignore[arg-type]
                    query=f"{WORDS[rank % len(WORDS)]} question {rank}",
                    results=results,
                    top_score=rng.random() if results else None,
                    latency_ms=rng.lognormvariate(2.0, 0.5),
                    caller=f"team-{team:02d}-agent",
                    sources=[f"team-{team:02d}/docs"] if rng.random() < 0.9 else None,
                )
            )
            if len(batch) == 2000:
                log.append(batch)
                batch = []
        if batch:
            log.append(batch)
    finally:
        log.close()
    return time.perf_counter() - started


def measure_insights(base_url: str, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with http_client(base_url) as client:
        for caller, token in (("unrestricted", "bench-admin"), ("team", "bench-team")):
            headers = {"authorization": f"Bearer {token}"}
            for window in WINDOWS:
                times, total = [], 0
                for _ in range(repeats + 1):  # the first call warms the page cache; not counted
                    t0 = time.perf_counter()
                    response = client.get("/api/v1/insights", params={"window": window}, headers=headers)
                    times.append((time.perf_counter() - t0) * 1000)
                    response.raise_for_status()
                    total = response.json()["total"]
                out[f"{caller}/{window}"] = {"entriesCounted": total, **summary_ms(times[1:])}
    return out


def document(n: int) -> str:
    words = [WORDS[(n + k) % len(WORDS)] for k in range(60)]
    return f"# Runbook {n}\n\n" + " ".join(words) + f" doc{n}.\n"


def measure_overhead(folder: Path, docs: int, queries: int) -> dict[str, Any]:
    from kbsearch.settings import Settings
    from tests.support.hashing import HashingEmbedder
    from tests.support.service_process import free_port

    on = Settings(data_dir=folder / "on", query_log="on", metrics_port=free_port())
    off = Settings(data_dir=folder / "off", query_log="off")
    times: dict[str, list[float]] = {"on": [], "off": []}
    with run_service(on, embedder=HashingEmbedder()) as s_on, run_service(off, embedder=HashingEmbedder()) as s_off:
        urls = {"on": s_on.base_url, "off": s_off.base_url}
        for url in urls.values():
            with http_client(url) as client:
                for n in range(docs):
                    body = {"uri": f"https://x/{n}.md", "content": document(n), "metadata": {"sourceIdentifier": "s"}}
                    client.put("/api/v1/documents", json=body).raise_for_status()
        with http_client(urls["on"]) as c_on, http_client(urls["off"]) as c_off:
            clients = {"on": c_on, "off": c_off}
            for n in range(queries + WARMUP):
                query = {"query": f"{WORDS[n % len(WORDS)]} {WORDS[(n * 7) % len(WORDS)]}", "limit": 10}
                for arm in ("on", "off") if n % 2 else ("off", "on"):  # alternate who goes first
                    t0 = time.perf_counter()
                    clients[arm].post("/api/v1/search", json=query).raise_for_status()
                    if n >= WARMUP:
                        times[arm].append((time.perf_counter() - t0) * 1000)
            metrics = c_on.get(f"http://127.0.0.1:{on.http.metrics_port}/metrics").text
    dropped = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("searchsvc_query_log_dropped_total{")
    )
    summaries = {arm: summary_ms(values) for arm, values in times.items()}
    return {
        "searches": summaries,
        "p50OverheadMs": round(summaries["on"]["p50"] - summaries["off"]["p50"], 3),
        "p95OverheadMs": round(summaries["on"]["p95"] - summaries["off"]["p95"], 3),
        "droppedEntries": dropped,
        "documents": docs,
    }


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    month = result["insights"]["unrestricted/30d"]
    figure = (
        f"insights over {result['entries']} logged queries: 30d p50 {month['p50']} ms, 24h p50 "
        f"{result['insights']['unrestricted/24h']['p50']} ms; search overhead of the log p50 "
        f"{result['overhead']['p50OverheadMs']} ms"
    )
    return figure, "reported (no target)", ""


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("insights", __doc__, SCIFACT_UNUSED)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--docs", type=int, default=300)
    args = parser.parse_args(argv)

    from kbsearch.settings import Settings
    from tests.support.hashing import HashingEmbedder

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        settings = Settings(
            data_dir=folder / "data", tokens_file=tokens_file(folder), query_log_max_entries=max(args.entries, 1)
        )
        fill_s = fill_log(settings.storage.data_dir, settings.storage.collection, args.entries)
        load_insights = load_text()
        with run_service(settings, embedder=HashingEmbedder()) as service:  # insights embed nothing
            insights = measure_insights(service.base_url, args.repeats)
        overhead = measure_overhead(folder, args.docs, args.queries)
    result: dict[str, Any] = {
        "entries": args.entries,
        "fillSeconds": round(fill_s, 1),
        "insights": insights,
        "insightsLoad": load_insights,
        "overhead": overhead,
        "load": load_text(),
    }
    rows = [[key, v["entriesCounted"], v["p50"], v["p95"], v["n"]] for key, v in insights.items()]
    print(f"insights over {args.entries} logged entries (written in {fill_s:.1f} s; {load_insights})")
    print_table(["caller/window", "entries", "p50 ms", "p95 ms", "n"], rows)
    rows = [[arm, s["p50"], s["p95"], s["n"]] for arm, s in overhead["searches"].items()]
    print(f"search with the query log on vs off ({result['load']})")
    print_table(["log", "p50 ms", "p95 ms", "n"], rows)
    print(
        f"overhead p50 {overhead['p50OverheadMs']} ms, p95 {overhead['p95OverheadMs']} ms; "
        f"{overhead['droppedEntries']:.0f} entries dropped"
    )
    write_result(NAME, result)
    return result


if __name__ == "__main__":
    main()
