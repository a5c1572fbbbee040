"""Ingest throughput through the real HTTP API against the raw embedder on the same chunk texts.

1. ~200 markdown documents generated from SciFact abstracts (front matter, headings, lists,
   tables, code) are chunked with `kbsearch.chunker.MarkdownChunker` at the service's default
   settings; the raw embedder encodes exactly those `Chunk.embed_text`s (one call, the
   service's batch size) - the ceiling.
2. The same documents are PUT through the real service (uvicorn on 127.0.0.1, bundled MiniLM,
   Qdrant Edge in a temp dir) by `--workers` concurrent clients, with a fresh app and an empty
   embed cache (cold: every chunk really embedded). Overhead = 1 - pipeline chunks/s / raw chunks/s.
   The same documents into a second empty store with the cache now warm are reported apart
   (cache-hit: the non-embedding cost of the pipeline).
3. A ~100 KB markdown file: fresh ingest, then a 1-line edit re-ingested (chunksEmbedded, time).

    python -m bench.ingest --scifact ../shared/eval/scifact-train [--docs 200] [--workers 4]
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    http_client,
    load_average,
    load_scifact,
    load_text,
    local_embedder,
    print_table,
    run_service,
    service_cache,
    summary_ms,
    verdict,
    write_result,
)
from bench.common import (
    parser as common_parser,
)
from bench.corpus import large_markdown, markdown_documents

NAME = "ingest"


def settings_for(data_dir: Path):
    from kbsearch.settings import Settings

    return Settings(data_dir=data_dir, collection="bench", api_token=None, read_token=None)


def backend_of(embedder) -> str:
    return getattr(embedder, "backend", None) or "torch"


def chunk_texts(docs: list[tuple[str, str]], settings) -> list[list[str]]:
    from kbsearch.chunker import MarkdownChunker

    lo, hi = settings.chunk_range
    chunker = MarkdownChunker(lo, hi, settings.chunking.chunk_overlap_chars)
    return [[c.embed_text for c in chunker.chunk(text).chunks] for _, text in docs]


def raw_encode(embedder, texts: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call on every text."""
    started, cpu = time.perf_counter(), time.process_time()
    embedder.embed_documents(texts)
    return time.perf_counter() - started, time.process_time() - cpu


def pipeline(base_url: str, docs: list[tuple[str, str]], workers: int, times) -> dict[str, Any]:
    client_ms: list[float] = []

    def put(item: tuple[str, str]) -> dict[str, Any]:
        name, text = item
        with http_client(base_url) as client:
            t0 = time.perf_counter()
            response = client.put(
                "/api/v1/documents",
                json={
                    "uri": f"bench://ingest/{name}",
                    "content": text,
                    "metadata": {"sourceIdentifier": "bench/ingest", "path": name},
                },
            )
            client_ms.append((time.perf_counter() - t0) * 1000)
        response.raise_for_status()
        return response.json()

    times.take("PUT /api/v1/documents")
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(put, docs))
    seconds = time.perf_counter() - started
    # Every thread of this process: the service, and the benchmark's own HTTP clients (an upper bound).
    cpu_seconds = time.process_time() - cpu
    chunks = sum(a["chunks"] for a in answers)
    embedded = sum(a["chunksEmbedded"] for a in answers)
    server_ms = times.take("PUT /api/v1/documents")
    return {
        "documents": len(docs),
        "chunks": chunks,
        "chunksEmbedded": embedded,
        "seconds": round(seconds, 2),
        "docsPerSecond": round(len(docs) / seconds, 2),
        "chunksPerSecond": round(chunks / seconds, 2),
        "cpuSeconds": round(cpu_seconds, 2),
        "putClientMs": summary_ms(client_ms),
        "putServerMs": summary_ms(server_ms),
        "load": load_average(),
    }


def edit_one_line(text: str) -> tuple[str, int]:
    """Change one sentence in a paragraph line near the middle of the file."""
    lines = text.split("\n")
    middle = len(lines) // 2
    for i in range(middle, len(lines)):
        if len(lines[i]) > 200 and not lines[i].startswith(("#", "-", "|", "`")):
            lines[i] = lines[i].replace(" ", " (edited) ", 1)
            return "\n".join(lines), i + 1
    raise RuntimeError("no paragraph line to edit")


def big_file(base_url: str, text: str, times) -> dict[str, Any]:
    edited, line = edit_one_line(text)
    out: dict[str, Any] = {"bytes": len(text.encode()), "editedLine": line}
    with http_client(base_url) as client:
        for label, content in (("fresh", text), ("oneLineEdit", edited), ("unchanged", edited)):
            times.take("PUT /api/v1/documents")
            t0 = time.perf_counter()
            response = client.put("/api/v1/documents", json={"uri": "bench://ingest/handbook.md", "content": content})
            seconds = time.perf_counter() - t0
            response.raise_for_status()
            body = response.json()
            server = times.take("PUT /api/v1/documents")
            out[label] = {
                "status": body["status"],
                "chunks": body["chunks"],
                "chunksEmbedded": body["chunksEmbedded"],
                "seconds": round(seconds, 3),
                "serverSeconds": round(server[0] / 1000, 3) if server else None,
            }
    out["editToFreshTimeRatio"] = round(out["oneLineEdit"]["seconds"] / out["fresh"]["seconds"], 4)
    return out


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    cold, edit = result["pipelineCold"], result["bigFile"]["oneLineEdit"]
    figure = (
        f"{cold['docsPerSecond']} docs/s, {cold['chunksPerSecond']} chunks/s vs raw "
        f"{result['raw']['chunksPerSecond']} chunks/s: overhead {result['overhead']:.1%}; 100 KB 1-line edit "
        f"{edit['chunksEmbedded']}/{edit['chunks']} chunks in {edit['seconds']} s vs fresh "
        f"{result['bigFile']['fresh']['seconds']} s"
    )
    return figure, "overhead <= 10%", verdict(result["target"]["met"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("ingest", __doc__, "SciFact train folder (BEIR layout): the source of the generated texts")
    parser.add_argument("--docs", type=int, default=200, help="generated markdown documents (default 200)")
    parser.add_argument("--workers", type=int, default=4, help="concurrent PUTs (the operator's default is 4)")
    parser.add_argument("--big-kb", type=int, default=100, help="size of the 1-line-edit file in KB (default 100)")
    parser.add_argument(
        "--backend", choices=["torch", "onnx", "onnx-int8"], help="local backend (default: the service's)"
    )
    args = parser.parse_args(argv)

    data = load_scifact(args.scifact)
    docs = list(markdown_documents(data, args.docs))
    print(
        f"[ingest] {len(docs)} generated markdown docs, "
        f"{sum(len(t.encode()) for _, t in docs) / 1e6:.2f} MB ({load_text()})"
    )
    embedder = local_embedder(args.backend)  # loaded once, outside every timing
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        settings = settings_for(Path(tmp) / "cold")
        per_doc = chunk_texts(docs, settings)
        texts = [t for doc in per_doc for t in doc]
        embedder.embed_documents(texts[:64])  # warm-up: first torch call pays one-off costs

        print(
            f"  raw embedder on the same {len(texts)} chunk texts, one call, batch {embedder.batch_size} ...",
            flush=True,
        )
        raw_load = load_average()
        raw_s, raw_cpu = raw_encode(embedder, texts)
        raw = {
            "chunks": len(texts),
            "seconds": round(raw_s, 2),
            "cpuSeconds": round(raw_cpu, 2),
            "chunksPerSecond": round(len(texts) / raw_s, 2),
            "batchSize": embedder.batch_size,
            "load": raw_load,
        }
        print(f"    {raw['chunksPerSecond']} chunks/s ({load_text()})")

        print(f"  pipeline, fresh app, empty embed cache (cold), {args.workers} workers ...", flush=True)
        cache = service_cache(embedder, settings.embedding.embed_cache_size)  # as the service builds it by default
        with run_service(settings, embedder=cache) as svc:
            cold = pipeline(svc.base_url, docs, args.workers, svc.times)
        print(
            f"    {cold['docsPerSecond']} docs/s, {cold['chunksPerSecond']} chunks/s, "
            f"{cold['chunksEmbedded']} embedded ({load_text()})"
        )

        print("  raw embedder again, one call per document (the pipeline's batching) ...", flush=True)
        raw_doc_load = load_average()
        t0 = time.perf_counter()
        for doc_texts in per_doc:
            embedder.embed_documents(doc_texts)
        raw_doc_s = time.perf_counter() - t0
        raw_per_doc = {
            "chunks": len(texts),
            "seconds": round(raw_doc_s, 2),
            "chunksPerSecond": round(len(texts) / raw_doc_s, 2),
            "load": raw_doc_load,
        }
        print(f"    {raw_per_doc['chunksPerSecond']} chunks/s ({load_text()})")

        print("  pipeline into a second empty store, embed cache warm (cache-hit) ...", flush=True)
        with run_service(settings_for(Path(tmp) / "warm"), embedder=cache) as svc:
            warm = pipeline(svc.base_url, docs, args.workers, svc.times)
        print(f"    {warm['docsPerSecond']} docs/s, {warm['chunksPerSecond']} chunks/s ({load_text()})")

        print(f"  {args.big_kb} KB file: fresh ingest, then a 1-line edit (fresh app, empty cache) ...", flush=True)
        big_text = large_markdown(data, args.big_kb * 1000)
        with run_service(
            settings_for(Path(tmp) / "big"), embedder=service_cache(embedder, settings.embedding.embed_cache_size)
        ) as svc:
            big = big_file(svc.base_url, big_text, svc.times)

    overhead = 1 - cold["chunksPerSecond"] / raw["chunksPerSecond"]
    # On a machine shared with other work, wall time follows everyone's load; CPU time of this
    # process does not: the work the pipeline adds, per chunk, over the raw embedder's own.
    overhead_cpu = cold["cpuSeconds"] / raw["cpuSeconds"] - 1
    overhead_per_doc = 1 - cold["chunksPerSecond"] / raw_per_doc["chunksPerSecond"]
    result = {
        "backend": backend_of(embedder),
        "corpus": f"{len(docs)} markdown digests generated from SciFact abstracts",
        "bytes": sum(len(t.encode()) for _, t in docs),
        "chunkRange": list(settings.chunk_range),
        "workers": args.workers,
        "raw": raw,
        "rawPerDocument": raw_per_doc,
        "pipelineCold": cold,
        "pipelineCacheHit": warm,
        "overhead": round(overhead, 4),
        "overheadVsPerDocumentBatches": round(overhead_per_doc, 4),
        "overheadCpu": round(overhead_cpu, 4),
        "target": {"overheadMax": 0.10, "met": overhead <= 0.10},
        "bigFile": big,
    }
    path = write_result(NAME, result)
    print(
        f"\n[ingest] backend {backend_of(embedder)}, {len(docs)} docs / {len(texts)} chunks, "
        f"{args.workers} workers ({load_text()})"
    )
    print_table(
        ["run", "docs/s", "chunks/s", "seconds"],
        [
            ["raw encode, one call", "-", raw["chunksPerSecond"], raw["seconds"]],
            ["raw encode, per document", "-", raw_per_doc["chunksPerSecond"], raw_per_doc["seconds"]],
            ["HTTP pipeline, cold cache", cold["docsPerSecond"], cold["chunksPerSecond"], cold["seconds"]],
            ["HTTP pipeline, cache hit", warm["docsPerSecond"], warm["chunksPerSecond"], warm["seconds"]],
        ],
    )
    print(
        f"  overhead vs raw one call: {overhead:.1%} (target <= 10%: {'met' if overhead <= 0.10 else 'NOT met'}); "
        f"vs raw per-document batches: {overhead_per_doc:.1%}; in CPU seconds of this process: "
        f"{overhead_cpu:.1%} ({cold['cpuSeconds']} s vs raw {raw['cpuSeconds']} s)"
    )
    print_table(
        ["100 KB file", "status", "chunks", "embedded", "seconds"],
        [
            [k, big[k]["status"], big[k]["chunks"], big[k]["chunksEmbedded"], big[k]["seconds"]]
            for k in ("fresh", "oneLineEdit", "unchanged")
        ],
    )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
