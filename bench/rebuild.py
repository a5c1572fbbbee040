"""Background rebuild after an embedder change, while a client searches and writes.

    python -m bench.rebuild [--chunks 20000] [--pause-ms 5]

A real service process (`python -m kbsearch`, Qdrant Edge, the tests' hashing embedder so the
embedding costs nothing and the figures are the service's own) ingests a generated corpus of about
`--chunks` chunks through PUT /api/v1/documents: the first-ingest throughput. Then search latency
is measured on the idle service (before). The service restarts with another embedder model, which
starts a rebuild; one client thread searches and another writes (an edit every 0.2 s, every tenth
a delete) until the rebuilt collection is swapped in. Reported: rebuild throughput against the
first ingest, search p50/p95 during the rebuild against before, failed requests, and the load
average. No SciFact needed.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import load_text, print_table, summary_ms, verdict, write_result
from bench.common import parser as common_parser

NAME = "rebuild"
QUIET_S = 15.0  # seconds of searches on the idle service, before the rebuild and after the swap
WORDS = [
    "scaler",
    "trigger",
    "queue",
    "lag",
    "partition",
    "replica",
    "deployment",
    "metric",
    "threshold",
    "cooldown",
    "namespace",
    "operator",
    "secret",
    "credential",
    "polling",
    "interval",
    "target",
    "workload",
    "job",
    "cron",
    "schedule",
    "broker",
    "topic",
    "consumer",
    "group",
    "stream",
    "bucket",
    "latency",
    "throughput",
    "window",
    "average",
    "maximum",
    "minimum",
    "pod",
    "node",
    "cluster",
    "helm",
    "chart",
    "value",
    "authentication",
    "identity",
    "token",
    "certificate",
    "ingress",
    "service",
    "endpoint",
    "port",
    "protocol",
    "timeout",
    "retry",
]
QUERIES = [
    "kafka consumer lag threshold",
    "how do I scale to zero",
    "cron schedule for a job",
    "authentication with a certificate",
    "retry timeout for the endpoint",
    "helm chart value for replicas",
]


def document(i: int, sections: int, rng: random.Random, edit: str = "") -> str:
    parts = [f"---\ntitle: Page {i} about {rng.choice(WORDS)} {rng.choice(WORDS)}\n---\n# Page {i}\n", edit]
    for s in range(sections):
        parts.append(f"## Section {s} on {rng.choice(WORDS)} {rng.choice(WORDS)}\n")
        for _ in range(2):
            sentence = " ".join(rng.choice(WORDS) for _ in range(48))
            parts.append(sentence.capitalize() + ".\n")
    return "\n".join(parts)


def ingest(client: httpx.Client, documents: int, sections: int) -> tuple[float, int]:
    rng = random.Random(7)
    started, chunks = time.perf_counter(), 0
    for i in range(documents):
        body = {"uri": f"bench://doc/{i}", "content": document(i, sections, rng), "metadata": {}}
        response = client.put("/api/v1/documents", json=body)
        response.raise_for_status()
        chunks += response.json()["chunks"]
    return time.perf_counter() - started, chunks


def search_loop(client: httpx.Client, stop: threading.Event, latencies: list[float], failures: list[str]) -> None:
    n = 0
    while not stop.is_set():
        query = QUERIES[n % len(QUERIES)]
        n += 1
        started = time.perf_counter()
        try:
            response = client.post("/api/v1/search", json={"query": query, "limit": 10})
            if response.status_code != 200:
                failures.append(f"search {response.status_code}")
                continue
        except httpx.HTTPError as exc:
            failures.append(f"search {type(exc).__name__}")
            continue
        latencies.append((time.perf_counter() - started) * 1000)


def write_loop(client: httpx.Client, stop: threading.Event, documents: int, sections: int, log: dict[str, Any]) -> None:
    rng = random.Random(11)
    n = 0
    while not stop.wait(0.2):
        n += 1
        i = rng.randrange(documents)
        try:
            if n % 10 == 0:
                response = client.delete("/api/v1/documents", params={"uri": f"bench://doc/{i}"})
                log["deletes"] += 1
            else:
                content = document(i, sections, rng, edit=f"Edited {n} during the rebuild.")
                response = client.put("/api/v1/documents", json={"uri": f"bench://doc/{i}", "content": content})
                log["writes"] += 1
            if response.status_code != 200:
                log["failures"].append(f"write {response.status_code}")
        except httpx.HTTPError as exc:
            log["failures"].append(f"write {type(exc).__name__}")


def quiet_searches(client: httpx.Client, seconds: float) -> tuple[list[float], list[str]]:
    """Searches one after another for `seconds`, nothing else running."""
    latencies: list[float] = []
    failures: list[str] = []
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    search_loop(client, stop, latencies, failures)
    return latencies, failures


def measure(folder: Path, chunks_wanted: int, pause_ms: float) -> dict[str, Any]:
    from tests.support.service_process import ServiceProcess

    sections = 8  # about 10 chunks per document at the default chunk sizes
    data = {"SEARCHSVC_DATA_DIR": str(folder / "data"), "SEARCHSVC_QUERY_LOG": "off"}
    first = ServiceProcess(folder / "first.log", data).start()
    try:
        first.wait_ready()
        _, probe_chunks = ingest(first.client, 1, sections)
        per_doc = max(probe_chunks, 1)
        documents = max(2, chunks_wanted // per_doc)
        ingest_s, chunks = ingest(first.client, documents, sections)
        before, before_failures = quiet_searches(first.client, QUIET_S)
    finally:
        first.stop()

    changed = {**data, "KB_TEST_HASHING_MODEL": "hashing-v2", "SEARCHSVC_REBUILD_PAUSE_MS": str(pause_ms)}
    second = ServiceProcess(folder / "second.log", changed).start()
    result: dict[str, Any] = {"documents": documents, "chunks": chunks, "pauseMs": pause_ms}
    try:
        second.wait_ready()
        client = second.client
        during: list[float] = []
        failures: list[str] = []
        writes: dict[str, Any] = {"writes": 0, "deletes": 0, "failures": []}
        stop = threading.Event()
        search_client = httpx.Client(base_url=str(client.base_url), timeout=60)
        write_client = httpx.Client(base_url=str(client.base_url), timeout=60)
        threads = [
            threading.Thread(target=search_loop, args=(search_client, stop, during, failures)),
            threading.Thread(target=write_loop, args=(write_client, stop, documents, sections, writes)),
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        status: dict[str, Any] = {}
        while True:
            status = client.get("/api/v1/status").json()["rebuild"]
            if status["state"] in ("failed", "refused") or (status["state"] == "idle" and status["finishedAt"]):
                break
            time.sleep(0.5)
        rebuild_s = time.perf_counter() - started
        stop.set()
        for thread in threads:
            thread.join()
        search_client.close()
        write_client.close()
        after, after_failures = quiet_searches(client, QUIET_S)
        final = client.get("/api/v1/status").json()
    finally:
        second.stop()
    result.update(
        rebuild={
            "state": status["state"],
            "message": status["message"],
            "seconds": round(rebuild_s, 1),
            "documentsPerSecond": round(documents / rebuild_s, 2),
            "chunksPerSecond": round(chunks / rebuild_s, 1),
            "copySeconds": status["copySeconds"],
            "copyChunksPerSecond": round(chunks / status["copySeconds"], 1) if status["copySeconds"] else None,
            "checkSeconds": status["checkSeconds"],
            "check": status["check"],
        },
        firstIngest={
            "seconds": round(ingest_s, 1),
            "documentsPerSecond": round(documents / ingest_s, 2),
            "chunksPerSecond": round(chunks / ingest_s, 1),
        },
        searchBefore=summary_ms(before),
        searchDuring=summary_ms(during),
        searchAfter=summary_ms(after),
        writesDuring={"writes": writes["writes"], "deletes": writes["deletes"]},
        failedRequests=len(failures) + len(writes["failures"]) + len(before_failures) + len(after_failures),
        failures=(failures + writes["failures"] + before_failures + after_failures)[:20],
        embedderAfter=final["embedder"]["model"],
    )
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("rebuild", __doc__, "ignored (run_all passes it to every benchmark); no SciFact needed")
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--pause-ms", type=float, default=5.0)
    args = parser.parse_args(argv)
    load_before = load_text()
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), args.chunks, args.pause_ms)
    result.update(loadBefore=load_before, load=load_text())
    ratio = result["rebuild"]["chunksPerSecond"] / result["firstIngest"]["chunksPerSecond"]
    result["rebuildOverFirstIngest"] = round(ratio, 2)
    rows = [
        ["first ingest", result["firstIngest"]["seconds"], result["firstIngest"]["chunksPerSecond"], "", ""],
        ["idle before the rebuild", "", "", result["searchBefore"]["p50"], result["searchBefore"]["p95"]],
        [
            "rebuild (with searches + writes)",
            result["rebuild"]["seconds"],
            result["rebuild"]["chunksPerSecond"],
            result["searchDuring"]["p50"],
            result["searchDuring"]["p95"],
        ],
        ["idle after the swap", "", "", result["searchAfter"]["p50"], result["searchAfter"]["p95"]],
    ]
    print_table(["phase", "seconds", "chunks/s", "search p50 ms", "search p95 ms"], rows)
    print(
        f"{result['documents']} documents, {result['chunks']} chunks; rebuild {result['rebuild']['state']} "
        f"({result['rebuild']['message']}); rebuild/first-ingest throughput {ratio:.2f} "
        f"(copy {result['rebuild']['copySeconds']} s, self-check {result['rebuild']['checkSeconds']} s); "
        f"{result['writesDuring']['writes']} writes and {result['writesDuring']['deletes']} deletes during it; "
        f"failed requests: {result['failedRequests']} ({result['load']})"
    )
    write_result(NAME, result)
    return result


if __name__ == "__main__":
    main()


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    figure = (
        f"{result['chunks']} chunks rebuilt at {result['rebuild']['chunksPerSecond']} chunks/s "
        f"({result['rebuildOverFirstIngest']:.2f} of the first ingest); search p50/p95 "
        f"{result['searchBefore']['p50']}/{result['searchBefore']['p95']} ms before, "
        f"{result['searchDuring']['p50']}/{result['searchDuring']['p95']} ms during; "
        f"{result['failedRequests']} failed requests"
    )
    swapped = result["failedRequests"] == 0 and result["rebuild"]["state"] == "idle"
    return figure, "0 failed requests, swapped in", verdict(swapped)
