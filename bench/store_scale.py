"""The server store against the embedded one at scale: ingest throughput, hybrid and filtered hybrid
p50/p95, memory and disk, on one real Qdrant 1.19 server (the chart's `store.mode=server`) and on
Qdrant Edge, same corpus, same service.

Corpus: bench/edge_scale.py's synthetic one (dense 384-d vectors around 2,000 centres, seeded by
the chunk text's hash: the vectors cost what the hashing embedder's cost; BM25 over generated Zipf
text or SciFact abstracts), 10 chunks per document, the documents spread over 10 sources so that a
source filter keeps a tenth.

Each size is loaded twice over, on purpose:
- **bulk** through the service's store layer (`upsert_chunks` in the service's 256-point batches,
  then `write_document`), which is what reaches 1,000,000 chunks in bounded time: the store's own
  write cost (the server: REST + JSON + Qdrant's WAL), without chunking or embedding;
- **as users write**: `PUT /api/v1/documents` of 10-section documents from 4 concurrent clients on
  top of the loaded collection (chunking, BM25, embedding, the store's versioned write protocol):
  what the operator's sync sees at that size.

Then the server is left to build its HNSW index (until the collection is green; the wait is
reported), and the embedded store's index is built with `store.indexer.build_now()`; searches go
through the real service (uvicorn on 127.0.0.1) with `Server-Timing: engine`. Memory is VmRSS /
VmHWM of the bench process (the service, in process, plus the loader) and of the Qdrant process;
disk is allocated blocks of the storage folder. Qdrant runs niced, its storage on the disk under
/tmp (not tmpfs). The Qdrant binary is the opt-level 1 build of ../shared/tools/qdrant (BUILD.md):
slower than the official release.

    python -m bench.store_scale [--sizes 100000,1000000] [--edge-sizes 100000] [--queries 200] [--loader raw]

`--loader raw` loads the server's bulk part straight through Qdrant's REST API (1,000-point bodies,
the store's own payloads, no version fences): Qdrant's import rate, which is what reaches the large
sizes on this machine; the PUT part still goes through the service.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import (
    http_client,
    load_average,
    load_text,
    print_table,
    run_service,
    server_timing,
    summary_ms,
    write_result,
)
from bench.common import parser as common_parser
from bench.edge_scale import CHUNKS_PER_DOC, WARMUP, Synthetic, make_embedder, text_pool

NAME = "store_scale"
SOURCES = 10
HTTP_DOCS = 200
HTTP_CLIENTS = 4
RAW_BATCH = 1000  # points per body of the raw loader (--loader raw)
RAW_WAIT_EVERY = 20  # bodies between waited ones: bounds what Qdrant holds unapplied
REPO = Path(__file__).resolve().parents[1]


def proc_memory_mb(pid: int | str = "self") -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rssMb": out.get("VmRSS", float("nan")), "peakMb": out.get("VmHWM", float("nan"))}


def reset_peak() -> None:
    """Start VmHWM afresh (Linux: 5 to clear_refs), so each run's peak is its own."""
    Path("/proc/self/clear_refs").write_text("5")


def disk_mb(path: Path) -> float:
    """Allocated blocks, not file sizes: Qdrant's mapped files are sparse until written."""
    return round(sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) / 2**20, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def qdrant_server(root: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    binary = os.environ.get("KB_QDRANT") or str(REPO / ".tools" / "qdrant")
    http, grpc = _free_port(), _free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "QDRANT__SERVICE__HOST": "127.0.0.1",
        "QDRANT__SERVICE__HTTP_PORT": str(http),
        "QDRANT__SERVICE__GRPC_PORT": str(grpc),
        "QDRANT__STORAGE__STORAGE_PATH": str(root / "storage"),
        "QDRANT__STORAGE__SNAPSHOTS_PATH": str(root / "snapshots"),
        "QDRANT__STORAGE__TEMP_PATH": str(root / "tmp"),
        "QDRANT__TELEMETRY_DISABLED": "true",
        "QDRANT__LOG_LEVEL": "WARN",
    }
    log = open(root / "qdrant.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ["nice", "-n", "5", binary, "--disable-telemetry"], env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Qdrant did not start: {(root / 'qdrant.log').read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield proc, url
    finally:
        proc.kill()
        proc.wait()
        log.close()


def batches(synthetic: Synthetic, chunks: int) -> Iterator[tuple[list[Any], list[Any]]]:
    """edge_scale's batches, each document moved to one of SOURCES sources (by its number)."""
    for points, records in synthetic.batches(chunks):
        moved = []
        for record in records:
            source = f"bench/s{int(record.uri.split(':')[1]) % SOURCES}"
            moved.append(dataclasses.replace(record, source_identifier=source, metadata={"sourceIdentifier": source}))
        sources = {r.uri: r.source_identifier for r in moved}
        yield [dataclasses.replace(p, source_identifier=sources[p.uri]) for p in points], moved


def bulk_load(store: Any, synthetic: Synthetic, chunks: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    for points, records in batches(synthetic, chunks):
        for start in range(0, len(points), 256):
            store.upsert_chunks(points[start : start + 256])
        for record in records:
            store.write_document(record, None)
        done = int(points[-1].uri.split(":")[1]) + 1
        if done % 10_000 == 0:
            print(f"    {done * CHUNKS_PER_DOC} chunks, {time.perf_counter() - t0:.0f} s ({load_text()})", flush=True)
    seconds = time.perf_counter() - t0
    return {"seconds": round(seconds, 1), "chunksPerSecond": round(chunks / seconds), "load": load_average()}


def _post_points(client: Any, collection: str, points: list[dict[str, Any]], wait: bool) -> None:
    body = json.dumps({"points": points}, default=str)
    response = client.put(
        f"/collections/{collection}/points",
        params={"wait": "true" if wait else "false"},
        content=body,
        headers={"content-type": "application/json"},
    )
    response.raise_for_status()


def raw_load(url: str, collection: str, synthetic: Synthetic, chunks: int) -> dict[str, Any]:
    """The same points as bulk_load (the store's own payloads), sent straight to Qdrant's REST API in
    RAW_BATCH-point bodies, waited for every RAW_WAIT_EVERY bodies and at the end: the server's
    import rate (as a restore or a migration writes), not the service's versioned write protocol,
    which needs two round trips per document and serialises them (bulk_load). Only for a fresh
    collection: no version fences."""
    from kbsearch.store import payloads as pl
    from kbsearch.store.base import DENSE_VECTOR, SPARSE_VECTOR

    t0 = time.perf_counter()
    sent, last = 0, []
    with http_client(url) as client:
        for points, records in batches(synthetic, chunks):
            body = [
                {
                    "id": p.id,
                    "vector": {
                        DENSE_VECTOR: [float(x) for x in p.dense],
                        SPARSE_VECTOR: {
                            "indices": [int(i) for i in p.sparse.indices],
                            "values": [float(v) for v in p.sparse.values],
                        },
                    },
                    "payload": pl.chunk_payload(p),
                }
                for p in points
            ]
            body += [{"id": r.id, "vector": {}, "payload": pl.document_payload(r)} for r in records]
            for start in range(0, len(body), RAW_BATCH):
                sent += 1
                last = body[start : start + RAW_BATCH]
                _post_points(client, collection, last, sent % RAW_WAIT_EVERY == 0)
            done = int(points[-1].uri.split(":")[1]) + 1
            if done % 10_000 == 0:
                print(
                    f"    {done * CHUNKS_PER_DOC} chunks, {time.perf_counter() - t0:.0f} s ({load_text()})", flush=True
                )
        _post_points(client, collection, last, True)  # the last body again, waited: all before it applied
    seconds = time.perf_counter() - t0
    return {
        "loader": "raw",
        "seconds": round(seconds, 1),
        "chunksPerSecond": round(chunks / seconds),
        "load": load_average(),
    }


def http_ingest(base_url: str, size: int, texts: list[str]) -> dict[str, Any]:
    """HTTP_DOCS documents of 10 sections, PUT by HTTP_CLIENTS clients at once."""

    def document(n: int) -> dict[str, Any]:
        sections = "\n\n".join(f"## Part {i}\n\n{texts[(n * 10 + i) % len(texts)][:700]}" for i in range(10))
        return {
            "uri": f"bench://put/{size}/{n}",
            "content": f"# Put {n}\n\n{sections}",
            "metadata": {"sourceIdentifier": f"bench/s{n % SOURCES}"},
        }

    times: list[float] = []
    chunks = 0
    lock = threading.Lock()

    def worker(first: int) -> None:
        nonlocal chunks
        with http_client(base_url) as client:
            for n in range(first, HTTP_DOCS, HTTP_CLIENTS):
                t0 = time.perf_counter()
                response = client.put("/api/v1/documents", json=document(n))
                ms = (time.perf_counter() - t0) * 1000
                response.raise_for_status()
                with lock:
                    times.append(ms)
                    chunks += int(response.json().get("chunks", 0))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(HTTP_CLIENTS) as pool:
        list(pool.map(worker, range(HTTP_CLIENTS)))
    seconds = time.perf_counter() - t0
    return {
        "documents": HTTP_DOCS,
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "documentsPerSecond": round(HTTP_DOCS / seconds, 1),
        "chunksPerSecond": round(chunks / seconds),
        "putMs": summary_ms(times),
        "load": load_average(),
    }


def searches(base_url: str, queries: list[str], filtered: bool) -> dict[str, Any]:
    engine, total = [], []
    with http_client(base_url) as client:
        for n, query in enumerate(queries):
            body: dict[str, Any] = {"query": query, "limit": 10, "mode": "hybrid"}
            if filtered:
                body["filter"] = {"sourceIdentifier": f"bench/s{n % SOURCES}"}
            t0 = time.perf_counter()
            response = client.post("/api/v1/search", json=body)
            elapsed = (time.perf_counter() - t0) * 1000
            response.raise_for_status()
            if n >= WARMUP:
                engine.append(server_timing(response.headers.get("server-timing"))["engine"])
                total.append(elapsed)
    return {"engineMs": summary_ms(engine), "roundTripMs": summary_ms(total), "load": load_average()}


def wait_green(url: str, collection: str, timeout_s: float) -> dict[str, Any]:
    """Until Qdrant's optimizers have indexed the collection (status green), or the timeout."""
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    while time.perf_counter() - t0 < timeout_s:
        with urllib.request.urlopen(f"{url}/collections/{collection}", timeout=30) as answer:
            info = json.loads(answer.read())["result"]
        if info["status"] == "green":
            break
        time.sleep(2)
    return {
        "seconds": round(time.perf_counter() - t0, 1),
        "status": info.get("status"),
        "indexedVectors": info.get("indexed_vectors_count"),
        "points": info.get("points_count"),
        "segments": info.get("segments_count"),
        "load": load_average(),
    }


def measure_service(svc_url: str, queries: list[str]) -> dict[str, Any]:
    return {"hybrid": searches(svc_url, queries, False), "filtered": searches(svc_url, queries, True)}


def run_server(
    chunks: int, synthetic: Synthetic, queries: list[str], index_timeout_s: float, loader: str = "store"
) -> dict[str, Any]:
    from kbsearch.settings import Settings
    from kbsearch.store.factory import build_store

    embedder = make_embedder(synthetic)
    reset_peak()
    with (
        tempfile.TemporaryDirectory(prefix="bench-store-scale-", dir="/tmp") as tmp,
        qdrant_server(Path(tmp)) as (proc, url),
    ):
        settings = Settings(
            data_dir=Path(tmp) / "data", store="qdrant", qdrant_url=url, collection="bench", api_token=None
        )
        store = build_store(settings.storage)
        with run_service(settings, store=store, embedder=embedder) as svc:
            print(f"  server, {chunks} chunks: bulk load ({load_text()}) ...", flush=True)
            bulk = (
                raw_load(url, store.collection, synthetic, chunks)
                if loader == "raw"
                else bulk_load(store, synthetic, chunks)
            )
            print(f"    bulk ({loader}) {bulk['chunksPerSecond']} chunks/s; HTTP writes ...", flush=True)
            put = http_ingest(svc.base_url, chunks, synthetic.texts)
            print(f"    PUT {put['chunksPerSecond']} chunks/s; waiting for the index ...", flush=True)
            index = wait_green(url, "bench", index_timeout_s)
            print(f"    index: {json.dumps(index)}", flush=True)
            found = measure_service(svc.base_url, queries)
            result = {
                "backend": "server",
                "chunks": chunks,
                "bulk": bulk,
                "put": put,
                "index": index,
                **found,
                "memory": {"service": proc_memory_mb(), "qdrant": proc_memory_mb(proc.pid)},
                "diskMb": disk_mb(Path(tmp) / "storage"),
            }
        print("    " + json.dumps({k: result[k] for k in ("hybrid", "filtered", "memory", "diskMb")}), flush=True)
    return result


def run_edge(chunks: int, synthetic: Synthetic, queries: list[str]) -> dict[str, Any]:
    from kbsearch.settings import Settings
    from kbsearch.store.edge.optimize import IndexOptions
    from kbsearch.store.edge.store import EdgeStore

    embedder = make_embedder(synthetic)
    reset_peak()
    with tempfile.TemporaryDirectory(prefix="bench-store-scale-edge-", dir="/tmp") as tmp:
        settings = Settings(data_dir=Path(tmp), collection="bench", api_token=None)
        options = IndexOptions(threshold=1, threads=1)
        store = EdgeStore(Path(tmp), "bench", index=options, index_interval_s=10**6)
        with run_service(settings, store=store, embedder=embedder) as svc:
            print(f"  edge, {chunks} chunks: bulk load ({load_text()}) ...", flush=True)
            bulk = bulk_load(store, synthetic, chunks)
            put = http_ingest(svc.base_url, chunks, synthetic.texts)
            print(f"    bulk {bulk['chunksPerSecond']}, PUT {put['chunksPerSecond']} chunks/s; index ...", flush=True)
            t0 = time.perf_counter()
            report = store.indexer.build_now()
            index = {"seconds": round(time.perf_counter() - t0, 1), "status": report.outcome.value}
            index["load"] = load_average()
            found = measure_service(svc.base_url, queries)
            result = {
                "backend": "edge",
                "chunks": chunks,
                "bulk": bulk,
                "put": put,
                "index": index,
                **found,
                "memory": {"service": proc_memory_mb(), "qdrant": None},
                "diskMb": disk_mb(store.path),
            }
        print("    " + json.dumps({k: result[k] for k in ("hybrid", "filtered", "memory", "diskMb")}), flush=True)
    return result


def row(r: dict[str, Any]) -> list[Any]:
    h, f = r["hybrid"]["engineMs"], r["filtered"]["engineMs"]
    mem = r["memory"]
    qdrant = mem["qdrant"]
    return [
        r["backend"],
        r["chunks"],
        r["bulk"]["chunksPerSecond"],
        f"{r['put']['chunksPerSecond']} ({r['put']['putMs']['p50']:.0f} ms)",
        f"{r['index']['seconds']:.0f} {r['index']['status']}",
        f"{h['p50']} / {h['p95']}",
        f"{f['p50']} / {f['p95']}",
        f"{mem['service']['rssMb']:.0f} / {mem['service']['peakMb']:.0f}",
        f"{qdrant['rssMb']:.0f} / {qdrant['peakMb']:.0f}" if qdrant else "-",
        r["diskMb"],
        r["hybrid"]["load"]["load1"],
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser(NAME, __doc__, "SciFact train folder: its texts and claims (optional)")
    parser.add_argument("--sizes", default="100000,1000000", help="chunk counts on the Qdrant server")
    parser.add_argument("--edge-sizes", default="100000", help="chunk counts on the embedded store ('' for none)")
    parser.add_argument("--queries", type=int, default=200, help="measured queries per search kind (plus warm-up)")
    parser.add_argument("--index-timeout", type=float, default=1800, help="seconds to wait for Qdrant's index")
    parser.add_argument(
        "--loader",
        choices=["store", "raw"],
        default="store",
        help="the server's bulk load: through the store layer, or straight to Qdrant's REST API (raw_load)",
    )
    args = parser.parse_args(argv)
    if not shutil.which(os.environ.get("KB_QDRANT") or str(REPO / ".tools" / "qdrant")):
        raise SystemExit("no Qdrant binary: run `make qdrant` or set KB_QDRANT")
    texts, claims, origin = text_pool(args.scifact)
    queries = claims[: args.queries + WARMUP]
    synthetic = Synthetic(texts, claims)
    started = load_average()
    print(f"[{NAME}] ({load_text(started)})", flush=True)
    runs = []
    for n in [int(s) for s in args.sizes.split(",") if s]:
        runs.append(run_server(n, synthetic, queries, args.index_timeout, args.loader))
        write_result(NAME, {"corpus": origin, "loadAtStart": started, "runs": runs, "partial": True})
    for n in [int(s) for s in args.edge_sizes.split(",") if s]:
        runs.append(run_edge(n, synthetic, queries))
        write_result(NAME, {"corpus": origin, "loadAtStart": started, "runs": runs, "partial": True})
    result = {"corpus": origin, "loadAtStart": started, "runs": runs}
    path = write_result(NAME, result)
    print(f"\n[{NAME}] hybrid, limit 10, engine ms ({load_text()})")
    print_table(
        [
            "store",
            "chunks",
            "bulk chunks/s",
            "PUT chunks/s (p50)",
            "index s",
            "hybrid p50/p95",
            "filtered p50/p95",
            "service RSS/peak MB",
            "Qdrant RSS/peak MB",
            "disk MB",
            "load1",
        ],
        [row(r) for r in runs],
    )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
