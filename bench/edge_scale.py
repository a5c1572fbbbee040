"""The embedded store at scale: hybrid engine latency at 20,000 and 200,000 chunks, before and after
the background HNSW build, and the longest stall a request sees while the index is built.

Corpus: synthetic, so 200,000 chunks need no embedding model. Dense vectors are 384-d points around
2,000 random cluster centres (Gaussian noise, normalised); chunk texts are SciFact abstracts (with
--scifact; else generated Zipf text) for realistic BM25 term statistics; 10 chunks per document,
each document with its record. Queries: SciFact claims (or generated text) for the sparse side,
a cluster centre plus noise for the dense side, served by a query-only embedder inside the real
service (uvicorn on 127.0.0.1), so `Server-Timing: engine` is the store's own time.

For each size: load through `store.upsert_chunks`/`write_document`; measure; build the index with
`store.indexer.build_now()` (copy, child process, swap) while one thread searches every 10 ms and
another PUTs a document every 200 ms; measure again. Then add a tenth more chunks and build again,
as a growing collection does (the "growth build": the old shard is then mostly indexed). Reports
p50/p95, the longest search and write during each build phase, what the swap held the interpreter
lock for, the process RSS, and the load average with every figure.

    python -m bench.edge_scale [--sizes 20000,200000] [--queries 300] [--scifact PATH]
"""

from __future__ import annotations

import hashlib
import json
import resource
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    http_client,
    load_average,
    load_scifact,
    load_text,
    print_table,
    run_service,
    server_timing,
    summary_ms,
    verdict,
    write_result,
)
from bench.common import (
    parser as common_parser,
)

NAME = "edge_scale"
DIM = 384
CENTERS = 2_000
CHUNKS_PER_DOC = 10
WARMUP = 10
PROBE_EVERY_S = 0.010
WRITE_EVERY_S = 0.200
STALL_BOUND_MS = 100.0
BASELINE_S = 5.0


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


class Synthetic:
    """Cluster centres, a text pool and query texts; chunks are made batch by batch, never all kept."""

    def __init__(self, texts: list[str], queries: list[str], seed: int = 5) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((CENTERS, DIM)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.texts = texts
        self.queries = queries
        self.seed = seed

    def vectors(self, rng: np.random.Generator, n: int, spread: float) -> np.ndarray:
        v = self.centres[rng.integers(CENTERS, size=n)] + spread * rng.standard_normal((n, DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def batches(self, chunks: int, batch_docs: int = 100, first_doc: int = 0) -> Iterator[tuple[list, list]]:
        from kbsearch.models import ChunkPoint, DocumentRecord
        from kbsearch.store.bm25 import Bm25Encoder

        encoder = Bm25Encoder()
        rng = np.random.default_rng(self.seed + 1 + first_doc)
        end = first_doc + chunks // CHUNKS_PER_DOC
        for first in range(first_doc, end, batch_docs):
            docs = range(first, min(first + batch_docs, end))
            n = len(docs) * CHUNKS_PER_DOC
            dense = self.vectors(rng, n, 0.06)  # per-dimension noise: cosine ~0.6 to the centre
            texts = [self.texts[int(i)] for i in rng.integers(len(self.texts), size=n)]
            sparse = [  # one document's chunks at a time, as the service encodes them
                vector
                for j in range(len(docs))
                for vector in encoder.encode_chunks(texts[j * CHUNKS_PER_DOC : (j + 1) * CHUNKS_PER_DOC])
            ]
            points, records = [], []
            for j, d in enumerate(docs):
                uri = f"synthetic:{d}"
                for c in range(CHUNKS_PER_DOC):
                    row = j * CHUNKS_PER_DOC + c
                    points.append(
                        ChunkPoint(
                            uri=uri,
                            source_identifier="bench/synthetic",
                            chunk_index=c,
                            total_chunks=CHUNKS_PER_DOC,
                            text=texts[row],
                            text_hash=hashlib.sha256(f"{uri}#{c}".encode()).hexdigest(),
                            title=f"Document {d}",
                            tags=[],
                            headings=[],
                            dense=dense[row].tolist(),
                            sparse=sparse[row],
                        )
                    )
                records.append(
                    DocumentRecord(
                        uri=uri,
                        source_identifier="bench/synthetic",
                        checksum=f"sha256:synthetic-{d}",
                        chunks=CHUNKS_PER_DOC,
                        metadata={"sourceIdentifier": "bench/synthetic"},
                        title=f"Document {d}",
                        ingested_at="2026-01-01T00:00:00.000Z",
                        chunker="synthetic",
                    )
                )
            yield points, records


def make_embedder(synthetic: Synthetic):
    from kbsearch.embedders.base import EmbeddingProvider

    rng = np.random.default_rng(synthetic.seed + 2)
    query_vectors = dict(zip(synthetic.queries, synthetic.vectors(rng, len(synthetic.queries), 0.03), strict=True))

    class QueryEmbedder(EmbeddingProvider):
        """Dense query vectors near the cluster centres; a document's vector seeded by its text."""

        provider = "synthetic"
        model = "clustered-gaussian-384"
        dimensions = DIM

        def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
            out = []
            for text in texts:
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                out.append(synthetic.vectors(np.random.default_rng(seed), 1, 0.06)[0].tolist())
            return out

        def embed_query(self, text: str) -> list[float]:
            found = query_vectors.get(text)
            return found.tolist() if found is not None else self.embed_documents([text])[0]

    return QueryEmbedder()


def measure(base_url: str, queries: list[str]) -> dict[str, Any]:
    engine, total = [], []
    with http_client(base_url) as client:
        for n, query in enumerate(queries):
            t0 = time.perf_counter()
            response = client.post("/api/v1/search", json={"query": query, "limit": 10, "mode": "hybrid"})
            elapsed = (time.perf_counter() - t0) * 1000
            response.raise_for_status()
            if n >= WARMUP:
                engine.append(server_timing(response.headers.get("server-timing"))["engine"])
                total.append(elapsed)
    return {"engineMs": summary_ms(engine), "roundTripMs": summary_ms(total), "load": load_average()}


class Probe:
    """Searches every 10 ms and PUTs a small document every 200 ms; keeps (start, ms) of each."""

    def __init__(self, base_url: str, queries: list[str]) -> None:
        self.base_url = base_url
        self.queries = queries
        self.searches: list[tuple[float, float]] = []
        self.writes: list[tuple[float, float]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._search, daemon=True),
            threading.Thread(target=self._write, daemon=True),
        ]

    def __enter__(self) -> Probe:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _search(self) -> None:
        with http_client(self.base_url) as client:
            n = 0
            while not self._stop.is_set():
                query = self.queries[n % len(self.queries)]
                n += 1
                t0 = time.perf_counter()
                response = client.post("/api/v1/search", json={"query": query, "limit": 10, "mode": "hybrid"})
                self.searches.append((t0, (time.perf_counter() - t0) * 1000))
                self.errors += response.status_code != 200
                self._stop.wait(PROBE_EVERY_S)

    def _write(self) -> None:
        with http_client(self.base_url) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                body = {"uri": f"bench://probe/{n}", "content": f"# Probe {n}\n\nA write during the index build, {n}."}
                t0 = time.perf_counter()
                response = client.put("/api/v1/documents", json=body)
                self.writes.append((t0, (time.perf_counter() - t0) * 1000))
                self.errors += response.status_code not in (200, 201)
                self._stop.wait(WRITE_EVERY_S)

    @staticmethod
    def worst(samples: list[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
        """Requests that overlapped [start, end]: how many, and the slowest, in ms."""
        inside = [ms for t0, ms in samples if t0 <= end and t0 + ms / 1000 >= start]
        return {"n": len(inside), "maxMs": round(max(inside), 1) if inside else None}


class PauseTicker:
    """A thread of the service's process that wakes every millisecond and records how late it woke:
    the longest gap is the longest time no Python thread could run (the interpreter lock held),
    which every request in the process waits out, without the HTTP harness's own noise."""

    def __init__(self) -> None:
        self.gaps: list[tuple[float, float]] = []  # (when the gap ended, gap in ms), gaps over 5 ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PauseTicker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            if now - last > 0.005:
                self.gaps.append((now, (now - last) * 1000))
            last = now

    def longest(self, start: float, end: float) -> float:
        inside = [ms for t, ms in self.gaps if t - ms / 1000 <= end and t >= start]
        return round(max(inside, default=0.0), 1)


def engine_arms(store, embedder, queries: list[str]) -> dict[str, Any]:
    """Store-level hybrid latency with and without full-score fusion, and each lane alone, in process;
    arms interleaved query by query so the machine's load falls on all of them alike."""
    from kbsearch.models import Fusion, SearchFilter
    from kbsearch.store.bm25 import Bm25Encoder

    encoder = Bm25Encoder()
    arms: dict[str, tuple[str, Fusion]] = {
        "hybrid, full scores": ("hybrid", Fusion("dbsf", full_scores=True)),
        "hybrid, own candidates": ("hybrid", Fusion("dbsf")),
        "dense lane": ("dense", Fusion("dbsf")),
        "keyword lane": ("keyword", Fusion("dbsf")),
    }
    times: dict[str, list[float]] = {name: [] for name in arms}
    for n, query in enumerate(queries):
        dense, sparse = embedder.embed_query(query), encoder.encode_query(query)
        for name, (mode, fusion) in arms.items():
            t0 = time.perf_counter()
            store.search(
                mode=mode, dense=dense, sparse=sparse, filter=SearchFilter(), limit=10, candidates=100, fusion=fusion
            )
            if n >= WARMUP:
                times[name].append((time.perf_counter() - t0) * 1000)
    return {**{name: summary_ms(ms) for name, ms in times.items()}, "load": load_average()}


def timed(phases: dict[str, list[float]], name: str, func):
    def wrapper(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return func(*args)
        finally:
            phases[name] = [t0, time.perf_counter()]

    return wrapper


def run_size(chunks: int, synthetic: Synthetic, queries: list[str], indexing_threshold_kb: int | None) -> dict:
    from kbsearch.settings import Settings
    from kbsearch.store.edge.optimize import IndexOptions
    from kbsearch.store.edge.store import EdgeStore

    embedder = make_embedder(synthetic)
    with tempfile.TemporaryDirectory(prefix="bench-edge-scale-") as tmp:
        settings = Settings(data_dir=Path(tmp), collection="bench", api_token=None, read_token=None)
        # The loop never fires on its own here: the build is started by the benchmark, at a known time.
        options = IndexOptions(threshold=1, threads=1, indexing_threshold_kb=indexing_threshold_kb)
        store = EdgeStore(Path(tmp), "bench", index=options, index_interval_s=10**6)
        rss_before = rss_mb()
        with run_service(settings, store=store, embedder=embedder) as svc:
            t0 = time.perf_counter()
            load_chunks(store, synthetic, chunks)
            load_s = time.perf_counter() - t0
            print(f"  {chunks} chunks loaded in {load_s:.0f} s ({load_text()}); searching without an index ...")
            brute = measure(svc.base_url, queries)
            rss_brute = rss_mb()
            print(f"    no index: engine p50 {brute['engineMs']['p50']} / p95 {brute['engineMs']['p95']} ms")

            first_build = probed_build(store, svc.base_url, queries)
            indexed = measure(svc.base_url, queries)
            print(f"    indexed: engine p50 {indexed['engineMs']['p50']} / p95 {indexed['engineMs']['p95']} ms")
            arms = engine_arms(store, embedder, queries)
            print("    in process, indexed: " + json.dumps(arms))
            result = {
                "chunks": chunks,
                "loadSeconds": round(load_s, 1),
                "noIndex": brute,
                "indexed": indexed,
                "indexedInProcess": arms,
                "build": first_build,
                "rssMb": {
                    "beforeStore": rss_before,
                    "loadedNoIndex": rss_brute,
                    "indexed": rss_mb(),
                    "optimizerChildPeak": first_build.pop("childPeakRssMb"),
                },
                "shardMb": dir_mb(store.path),
            }
            # How a collection that keeps growing sees it: a build on top of an indexed shard, once
            # another tenth of new chunks is unindexed (with the default threshold, at 20,000).
            grow = chunks // 10
            load_chunks(store, synthetic, grow, first_doc=chunks // CHUNKS_PER_DOC)
            print(f"    {grow} more chunks; building again ({load_text()}) ...", flush=True)
            result["growthBuild"] = {"addedChunks": grow, **probed_build(store, svc.base_url, queries)}
            result["growthBuild"].pop("childPeakRssMb")
    return result


def load_chunks(store, synthetic: Synthetic, chunks: int, first_doc: int = 0) -> None:
    for points, records in synthetic.batches(chunks, first_doc=first_doc):
        for start in range(0, len(points), 256):
            store.upsert_chunks(points[start : start + 256])
        for record in records:
            store.write_document(record, None)


def probed_build(store, base_url: str, queries: list[str]) -> dict[str, Any]:
    """One index build (copy, child, swap) while the probe searches and writes; the longest
    request in each phase, what the swap held the interpreter lock for, and the child's peak RSS."""
    phases: dict[str, list[float]] = {}
    copy_for_index, adopt_index = store.copy_for_index, store.adopt_index
    store.copy_for_index = timed(phases, "copy", copy_for_index)
    store.adopt_index = timed(phases, "swap", adopt_index)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        with PauseTicker() as ticker, Probe(base_url, queries) as probe:
            baseline_start = time.perf_counter()
            time.sleep(BASELINE_S)  # the same probes with no build: this machine's own noise
            started = time.perf_counter()
            report = store.indexer.build_now()
            ended = time.perf_counter()
            time.sleep(1.0)
    finally:
        store.copy_for_index, store.adopt_index = copy_for_index, adopt_index
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    build_load = load_average()
    phases["baseline"] = [baseline_start, started]
    phases["build"] = [started, ended]
    phases.setdefault("copy", [started, started])
    phases["optimize"] = [phases["copy"][1], phases.get("swap", [ended])[0]]
    stalls = {
        name: {
            "seconds": round(b - a, 3),
            "search": Probe.worst(probe.searches, a, b),
            "write": Probe.worst(probe.writes, a, b),
            "interpreterPauseMs": ticker.longest(a, b),
        }
        for name, (a, b) in phases.items()
    }
    print(f"    build {report.outcome.value} in {ended - started:.1f} s: " + json.dumps(stalls))
    print(f"    swap: {json.dumps(store.last_swap)}", flush=True)
    return {
        "outcome": report.outcome.value,
        "detail": report.detail,
        "phases": stalls,
        "probeErrors": probe.errors,
        "swapInterpreterLockSeconds": store.last_swap,
        "searchesDuringBuild": len([1 for t, _ in probe.searches if started <= t <= ended]),
        "load": build_load,
        "childPeakRssMb": round(max(child_rss, children_before) / 1024, 1),
    }


def text_pool(scifact: str | None) -> tuple[list[str], list[str], str]:
    if scifact:
        data = load_scifact(scifact)
        texts = [f"# {d['title']}\n\n{d['text']}"[:800] for d in data.corpus]
        return texts, list(data.queries.values()), "SciFact abstracts (first 800 characters) and claims"
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(20_000)]
    words = lambda n: " ".join(vocab[int(i) % len(vocab)] for i in rng.zipf(1.2, n))  # noqa: E731
    return [words(90) for _ in range(5_000)], [words(6) for _ in range(1_000)], "generated Zipf text"


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    runs = ", ".join(
        f"{x['chunks']}: {x['noIndex']['engineMs']['p95']} -> {x['indexed']['engineMs']['p95']} ms"
        for x in result["runs"]
    )
    t = result["target"]
    figure = f"engine p95 no index -> indexed {runs}; longest search in a build {t['longestSearchDuringBuildMs']} ms"
    return figure, "p95 <= 20 ms; stall <= 100 ms", f"p95 {verdict(t['engineP95Met'])}, stall {verdict(t['stallMet'])}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("edge_scale", __doc__, "SciFact train folder: its texts and claims (optional)")
    parser.add_argument("--sizes", default="20000,200000", help="comma-separated chunk counts")
    parser.add_argument("--queries", type=int, default=300, help="measured queries per phase (plus 10 warm-up)")
    parser.add_argument(
        "--indexing-threshold-kb", type=int, default=None, help="Edge's per-segment indexing threshold (smoke runs)"
    )
    args = parser.parse_args(argv)
    texts, claims, text_origin = text_pool(args.scifact)
    queries = claims[: args.queries + WARMUP]
    synthetic = Synthetic(texts, claims)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"[edge_scale] sizes {sizes}, {len(queries) - WARMUP} queries per phase ({load_text()})")
    runs = [run_size(n, synthetic, queries, args.indexing_threshold_kb) for n in sizes]
    largest = runs[-1]
    builds = [b for r in runs for b in (r["build"], r["growthBuild"])]
    build_phases = [p for b in builds for name, p in b["phases"].items() if name not in ("build", "baseline")]
    worst_search = max((p["search"]["maxMs"] or 0) for p in build_phases)
    worst_pause = max(p["interpreterPauseMs"] for p in build_phases)
    result = {
        "corpus": f"synthetic dense vectors ({CENTERS} clusters, {DIM}-d), texts: {text_origin}, "
        f"{CHUNKS_PER_DOC} chunks per document",
        "mode": "hybrid",
        "limit": 10,
        "runs": runs,
        "target": {
            "engineP95MsMax": 20,
            "engineP95Met": largest["indexed"]["engineMs"]["p95"] <= 20,
            "stallMsMax": STALL_BOUND_MS,
            "longestSearchDuringBuildMs": worst_search,
            "stallMet": worst_search <= STALL_BOUND_MS,
            "longestInterpreterPauseDuringBuildMs": worst_pause,
            "pauseMet": worst_pause <= STALL_BOUND_MS,
        },
    }
    path = write_result(NAME, result)
    print(f"\n[edge_scale] hybrid, limit 10 ({load_text()})")
    rows = []
    for r in runs:
        for label, build in ((r["chunks"], r["build"]), (f"+{r['growthBuild']['addedChunks']}", r["growthBuild"])):
            ph = build["phases"]
            first = build is r["build"]
            rows.append(
                [
                    label,
                    f"{r['noIndex']['engineMs']['p50']} / {r['noIndex']['engineMs']['p95']}" if first else "",
                    f"{r['indexed']['engineMs']['p50']} / {r['indexed']['engineMs']['p95']}" if first else "",
                    f"{ph['build']['seconds']:.0f}",
                    " ".join(f"{k} {v['search']['maxMs']}" for k, v in ph.items() if k != "build"),
                    " ".join(f"{k} {v['interpreterPauseMs']}" for k, v in ph.items() if k != "build"),
                    " ".join(f"{k} {v['write']['maxMs']}" for k, v in ph.items() if k != "build"),
                    r["rssMb"]["indexed"] if first else "",
                    f"{build['load']['load1']}",
                ]
            )
    print_table(
        [
            "chunks",
            "no index p50/p95",
            "indexed p50/p95",
            "build s",
            "longest search (ms) by phase",
            "longest interpreter pause (ms)",
            "longest write",
            "RSS MB",
            "load1",
        ],
        rows,
    )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
