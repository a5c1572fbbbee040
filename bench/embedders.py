"""The local embedder's backends side by side: raw throughput, agreement with torch, SciFact nDCG@10.

1. Throughput: torch, onnx (fp32) and onnx-int8 encode the same SciFact chunk texts (the service's
   own chunks of `# {title}\\n\\n{text}`, default chunk settings), in interleaved rounds, each
   timing stamped with the load average. Every backend is loaded and warmed up outside the timing.
2. Agreement: per-text cosine of each backend's vector against torch's, over every chunk.
3. Quality: for each backend, all chunks go into a fresh Qdrant Edge collection in-process
   (dense from that backend, BM25 from the service's encoder), and the 809 judged train queries,
   embedded by the same backend, are searched hybrid (the service's RRF k and candidates) and
   dense (each query embedded alone, as the service does). Document vectors and query vectors are
   cached per backend under
   bench/results/cache/embedders/ (resumable: saved every slice), so a re-run only evaluates.

    python -m bench.embedders --scifact ../shared/eval/scifact-train [--throughput-chunks 256]
        [--rounds 2] [--backends torch,onnx,onnx-int8] [--docs N] [--no-quality] [--queries N]

An entry `MODEL@BACKEND` runs another local model (SEARCHSVC_LOCAL_MODEL), e.g.
`--backends onnx-int8,bge-small-en-v1.5@onnx-int8`; it is compared on speed and quality, never
with torch's vectors nor in the backend rule (which is about MiniLM's backends).
"""

from __future__ import annotations

import hashlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CACHE_DIR, load_average, load_scifact, load_text, print_table, scifact_markdown, write_result
from bench.common import parser as common_parser
from bench.retrieval import ndcg_at_k, recall_at_k

NAME = "embedders"
BACKENDS = ("torch", "onnx", "onnx-int8")
SLICE = 1024  # texts embedded between two saves of the resumable cache


def split_label(label: str) -> tuple[str, str]:
    """(model, backend) of a --backends entry: `onnx-int8` is the bundled MiniLM's, `MODEL@BACKEND` another's."""
    from kbsearch.embedders.catalog import BUNDLED_MODEL

    model, _, backend = label.rpartition("@")
    return model or BUNDLED_MODEL, backend


def make_embedder(label: str, threads: int = 0):
    """A loaded embedder of `label` (see split_label), as the service's factory builds it (no cache in front)."""
    from kbsearch.embedders.factory import build_embedder
    from kbsearch.settings import Settings

    model, backend = split_label(label)
    settings = Settings(
        local_model=model,
        local_backend=backend,
        embed_cache_size=0,
        onnx_dir=CACHE_DIR / "onnx",
        local_threads=threads,
    )
    embedder = build_embedder(settings.embedding, settings.storage.data_dir)
    embedder.load()
    return embedder


def chunk_corpus(data, docs: int) -> tuple[list[str], list[str], str]:
    """(embed_text, doc id) of every chunk of the first `docs` abstracts (0: all), and a cache key."""
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.settings import Settings

    settings = Settings()
    lo, hi = settings.chunk_range
    chunker = MarkdownChunker(lo, hi, settings.chunking.chunk_overlap_chars)
    corpus = data.corpus[:docs] if docs else data.corpus
    texts, doc_ids = [], []
    for doc in corpus:
        for chunk in chunker.chunk(scifact_markdown(doc)).chunks:
            texts.append(chunk.embed_text)
            doc_ids.append(str(doc["_id"]))
    key = hashlib.sha256((chunker.fingerprint + "\n" + "\n".join(texts)).encode()).hexdigest()[:16]
    return texts, doc_ids, key


def cached_vectors(
    backend: str, kind: str, key: str, texts: list[str], get_embedder, *, one_by_one: bool = False
) -> np.ndarray:
    """Vectors of `texts` by `backend`, from the cache or embedded now (saved every SLICE texts).

    `one_by_one` embeds each text alone, as the service embeds a query: int8's vectors shift a
    little with their batch-mates, so batched queries would not measure what the service does.
    """
    folder = CACHE_DIR / "embedders"
    folder.mkdir(parents=True, exist_ok=True)
    done_path = folder / f"{kind}-{backend}-{key}.npy"
    partial_path = folder / f"{kind}-{backend}-{key}.partial.npy"
    if done_path.is_file():
        return np.load(done_path)
    parts = np.load(partial_path) if partial_path.is_file() else np.zeros((0, 384), dtype=np.float32)
    if len(parts) < len(texts):
        embedder = get_embedder()
        print(f"  {backend}: embedding {len(texts) - len(parts)} {kind} texts (cached afterwards) ...", flush=True)
        started = time.perf_counter()
        while len(parts) < len(texts):
            batch = texts[len(parts) : len(parts) + SLICE]
            vectors = [embedder.embed_query(t) for t in batch] if one_by_one else embedder.embed_documents(batch)
            parts = np.concatenate([parts, np.asarray(vectors, dtype=np.float32)])
            np.save(partial_path, parts)
            print(f"    {len(parts)}/{len(texts)} ({time.perf_counter() - started:.0f} s, {load_text()})", flush=True)
    np.save(done_path, parts)
    partial_path.unlink(missing_ok=True)
    return parts


def throughput(texts: list[str], backends: list[str], rounds: int) -> dict[str, Any]:
    embedders = {}
    for backend in backends:
        embedders[backend] = make_embedder(backend)
        embedders[backend].embed_documents(texts[:32])  # warm-up: first calls pay one-off costs
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    for n in range(rounds):
        for backend in backends if n % 2 == 0 else backends[::-1]:  # alternate the order against drift
            load = load_average()
            started, cpu = time.perf_counter(), time.process_time()
            embedders[backend].embed_documents(texts)
            seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
            # CPU seconds (every thread of this process) do not follow the other work on a shared
            # machine the way wall time does: chunks per CPU-second compare backends fairly.
            runs[backend].append(
                {
                    "chunksPerSecond": round(len(texts) / seconds, 2),
                    "chunksPerCpuSecond": round(len(texts) / cpu_seconds, 2),
                    "seconds": round(seconds, 2),
                    "cpuSeconds": round(cpu_seconds, 2),
                    "load": load,
                }
            )
            print(
                f"    round {n + 1} {backend:9s} {len(texts) / seconds:6.1f} chunks/s, "
                f"{len(texts) / cpu_seconds:6.1f} chunks/CPU-s ({load_text(load)})",
                flush=True,
            )
    return {
        b: {
            "chunks": len(texts),
            "medianChunksPerSecond": round(statistics.median(r["chunksPerSecond"] for r in runs[b]), 2),
            "medianChunksPerCpuSecond": round(statistics.median(r["chunksPerCpuSecond"] for r in runs[b]), 2),
            "runs": runs[b],
        }
        for b in backends
    }


def query_latency(queries: list[str], backends: list[str]) -> dict[str, Any]:
    """Each query embedded alone by each backend in turn (interleaved query by query, so the machine's
    load falls on all alike), as the service embeds a search query: p50/p95 wall and CPU ms."""
    embedders = {b: make_embedder(b) for b in backends}
    for embedder in embedders.values():
        embedder.embed_query(queries[0])  # warm-up
    wall: dict[str, list[float]] = {b: [] for b in backends}
    cpu: dict[str, list[float]] = {b: [] for b in backends}
    for n, query in enumerate(queries):
        for backend in backends if n % 2 == 0 else backends[::-1]:
            started, cpu_started = time.perf_counter(), time.process_time()
            embedders[backend].embed_query(query)
            wall[backend].append((time.perf_counter() - started) * 1000)
            cpu[backend].append((time.process_time() - cpu_started) * 1000)

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)), 1)

    return {
        b: {"queries": len(queries), "p50ms": pct(wall[b], 50), "p95ms": pct(wall[b], 95), "cpuP50ms": pct(cpu[b], 50)}
        for b in backends
    }


def agreement(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    cos = (vectors * reference).sum(axis=1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1))
    return {
        "min": round(float(cos.min()), 6),
        "p01": round(float(np.percentile(cos, 1)), 6),
        "mean": round(float(cos.mean()), 6),
        "shareAtLeast0999": round(float((cos >= 0.999).mean()), 4),
    }


def evaluate(backend, data, texts, doc_ids, dense, query_ids, query_vectors) -> dict[str, Any]:
    """nDCG@10 / Recall@100 of hybrid and dense search over a fresh Edge collection of these vectors."""
    from kbsearch.models import ChunkPoint, CollectionSignature, DocumentRecord, SearchFilter
    from kbsearch.services.search.service import configured_fusion
    from kbsearch.settings import Settings
    from kbsearch.store.bm25 import Bm25Encoder
    from kbsearch.store.edge.store import EdgeStore

    settings = Settings()
    fusion = configured_fusion(settings.search)
    bm25 = Bm25Encoder()
    by_doc: dict[str, list[int]] = {}
    for row, doc in enumerate(doc_ids):
        by_doc.setdefault(doc, []).append(row)
    sparse: list[Any] = [None] * len(texts)
    for rows in by_doc.values():  # one document's chunks at a time: neighbours add keyword context
        for row, vector in zip(rows, bm25.encode_chunks([texts[r] for r in rows]), strict=True):
            sparse[row] = vector
    with tempfile.TemporaryDirectory(prefix="bench-embedders-") as tmp:
        store = EdgeStore(Path(tmp), "scifact")
        model, backend_name = split_label(backend)
        store.open(CollectionSignature("local", model, 384, bm25.name, backend_name))
        try:
            for doc, rows in by_doc.items():
                uri = f"scifact:{doc}"
                store.write_document(
                    DocumentRecord(
                        uri,
                        "bench/scifact",
                        "sha256:x",
                        len(rows),
                        {"docId": doc},
                        None,
                        "2026-01-01T00:00:00.000Z",
                        "x",
                    ),
                    None,
                )
                store.upsert_chunks(
                    [
                        ChunkPoint(
                            uri,
                            "bench/scifact",
                            i,
                            len(rows),
                            texts[r],
                            str(r),
                            None,
                            [],
                            [],
                            dense[r].tolist(),
                            sparse[r],
                        )
                        for i, r in enumerate(rows)
                    ]
                )
            out: dict[str, Any] = {}
            for mode in ("hybrid", "dense"):
                ndcgs, recalls = [], []
                for qid, qvec in zip(query_ids, query_vectors, strict=True):
                    hits = store.search(
                        mode=mode,
                        dense=qvec.tolist(),
                        sparse=bm25.encode_query(data.queries[qid]),
                        filter=SearchFilter(),
                        limit=100,
                        candidates=settings.search.search_candidates,
                        fusion=fusion,
                    )
                    best: dict[str, float] = {}
                    for hit in hits:
                        doc = hit.uri.removeprefix("scifact:")
                        best[doc] = max(best.get(doc, float("-inf")), hit.score)
                    ranked = sorted(best, key=lambda d: -best[d])
                    ndcgs.append(ndcg_at_k(ranked, data.qrels[qid], 10))
                    recalls.append(recall_at_k(ranked, data.qrels[qid], 100))
                out[mode] = {
                    "ndcg@10": round(statistics.fmean(ndcgs), 4),
                    "recall@100": round(statistics.fmean(recalls), 4),
                }
            return out
        finally:
            store.close()


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    speed = ", ".join(
        f"{b} {t['medianChunksPerSecond']} ({t['medianChunksPerCpuSecond']}/CPU-s)"
        for b, t in result["throughput"].items()
    )
    figure = f"chunks/s {speed}"
    if "quality" in result:
        quality = result["quality"]
        figure += "; hybrid nDCG@10 " + ", ".join(f"{b} {quality[b]['hybrid']['ndcg@10']:.4f}" for b in quality)
        figure += f"; default by the rule: {result.get('default')}"
    return figure, "fastest within 0.005 nDCG@10 of torch", "measured"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("embedders", __doc__)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default: all three)")
    parser.add_argument("--throughput-chunks", type=int, default=256, help="chunk texts per throughput run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved throughput rounds")
    parser.add_argument("--docs", type=int, default=0, help="quality on the first N abstracts only (0: all 5,183)")
    parser.add_argument("--no-quality", action="store_true", help="throughput only")
    parser.add_argument("--queries", type=int, default=0, help="query-embedding latency over the first N queries")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    data = load_scifact(args.scifact)
    texts, doc_ids, key = chunk_corpus(data, args.docs)
    print(f"[embedders] {len(texts)} SciFact chunks; backends {', '.join(backends)} ({load_text()})")

    sample = texts[:: max(1, len(texts) // args.throughput_chunks)][: args.throughput_chunks]
    print(f"  raw throughput on the same {len(sample)} chunk texts, {args.rounds} interleaved rounds:", flush=True)
    speed = throughput(sample, backends, args.rounds)
    result: dict[str, Any] = {"chunks": len(texts), "throughput": speed}
    if args.queries:
        result["queryLatency"] = query_latency(list(data.queries.values())[: args.queries], backends)
        for b, figures in result["queryLatency"].items():
            print(f"  query embedding {b}: {figures} ({load_text()})", flush=True)

    if not args.no_quality:
        judged = set(data.qrels)
        query_ids = [q for q in data.queries if q in judged]
        if args.docs:
            kept = set(doc_ids)
            query_ids = [q for q in query_ids if any(d in kept for d in data.qrels[q])]
        query_texts = [data.queries[q] for q in query_ids]
        qkey = hashlib.sha256("\n".join(query_texts).encode()).hexdigest()[:16]
        vectors, quality = {}, {}
        for backend in backends:
            loaded: list[Any] = []

            def get(backend: str = backend, loaded: list[Any] = loaded):
                if not loaded:
                    loaded.append(make_embedder(backend))
                return loaded[0]

            vectors[backend] = cached_vectors(backend, "chunks", key, texts, get)
            query_vectors = cached_vectors(backend, "query", qkey, query_texts, get, one_by_one=True)
            quality[backend] = evaluate(backend, data, texts, doc_ids, vectors[backend], query_ids, query_vectors)
            quality[backend]["load"] = load_average()
            print(
                f"  {backend:9s} hybrid nDCG@10 {quality[backend]['hybrid']['ndcg@10']:.4f}  "
                f"dense {quality[backend]['dense']['ndcg@10']:.4f} ({load_text()})",
                flush=True,
            )
        if "torch" in vectors:
            for backend in [b for b in backends if "@" not in b]:  # another model's vectors are not torch's
                quality[backend]["cosineToTorch"] = agreement(vectors[backend], vectors["torch"])
        result["quality"] = quality
        result["queries"] = len(query_ids)
        result["default"] = choose_default(speed, quality)

    path = write_result(NAME, result)
    print(f"\n[embedders] ({load_text()})")
    rows = []
    for b in backends:
        q = result.get("quality", {}).get(b, {})
        cos = q.get("cosineToTorch", {})
        rows.append(
            [
                b,
                speed[b]["medianChunksPerSecond"],
                speed[b]["medianChunksPerCpuSecond"],
                q.get("hybrid", {}).get("ndcg@10", "-"),
                q.get("dense", {}).get("ndcg@10", "-"),
                cos.get("mean", "-"),
                cos.get("min", "-"),
            ]
        )
    print_table(["backend", "chunks/s", "chunks/CPU-s", "hybrid nDCG@10", "dense nDCG@10", "cos mean", "cos min"], rows)
    if "default" in result:
        print(f"  default by the rule (fastest within 0.005 hybrid nDCG@10 of torch): {result['default']}")
    print(f"  -> {path}")
    return result


def choose_default(speed: dict[str, Any], quality: dict[str, Any]) -> str | None:
    """The fastest backend (per CPU-second: wall time follows the machine's other work) whose hybrid
    nDCG@10 is within 0.005 of torch's."""
    if "torch" not in quality:
        return None
    floor = quality["torch"]["hybrid"]["ndcg@10"] - 0.005
    fit = [b for b in quality if "@" not in b and quality[b]["hybrid"]["ndcg@10"] >= floor]
    return max(fit, key=lambda b: speed[b]["medianChunksPerCpuSecond"])


if __name__ == "__main__":
    main()
