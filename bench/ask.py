"""Extractive ask latency at ~20,000 chunks, with the real MiniLM, against plain search on the same queries.

Corpus: the first --docs SciFact abstracts chunked by the service, with their real MiniLM vectors
(bench/vectors.py: cached .npy, the retrieval benchmark's collection, or embedded once), topped up
to --chunks by augmented copies (noisy dense vector), loaded straight into the embedded Qdrant Edge
store. A verbatim copy would repeat its sentences, and ask embeds a repeated sentence only once, so
the extractive step would look cheaper than on a real corpus: every copy's text is perturbed here
(one word in five replaced by a random corpus word, its BM25 vector recomputed), so each sentence
it holds is new text to embed. Queries: SciFact train claims, sent one at a time through the real HTTP API
(uvicorn on 127.0.0.1) as `POST /api/v1/ask` in extractive mode (no LLM configured): one hybrid
search of SEARCHSVC_ASK_RESULTS_PER_SEARCH chunks, then every sentence of those chunks embedded in
one batch with the question and ranked. The same claims through `POST /api/v1/search` (same limit)
give the search share; the rest is the extractive step. Every query and sentence is really
embedded: the embedder has no cache here.

    python -m bench.ask --scifact ../shared/eval/scifact-train [--chunks 20000] [--queries 100] [--docs 300]
"""

from __future__ import annotations

import logging
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    http_client,
    load_average,
    load_scifact,
    load_text,
    local_embedder,
    run_service,
    summary_ms,
    write_result,
)
from bench.common import (
    parser as common_parser,
)
from bench.search_latency import load_store

NAME = "ask"
WARMUP = 5


def perturb_copies(points: list, seed: int = 7) -> int:
    """Give every augmented copy (bench/vectors.augment) text of its own; returns how many were changed."""
    from kbsearch.store.bm25 import Bm25Encoder

    rng = random.Random(seed)
    vocabulary = sorted({word for p in points for word in p.text.split() if word.isalpha()})
    copies = [p for p in points if p.uri.startswith("scifact-aug:")]
    for point in copies:
        words = point.text.split(" ")
        point.text = " ".join(rng.choice(vocabulary) if i % 5 == 2 and w.isalpha() else w for i, w in enumerate(words))
    encoder = Bm25Encoder()
    for point in copies:  # each copy is a one-chunk document: no neighbours in its keyword vector
        (point.sparse,) = encoder.encode_chunks([point.text])
    return len(copies)


def measure(base_url: str, queries: list[str], limit: int) -> dict[str, Any]:
    ask_ms, search_ms, grounded, cited, retrieved, distinct = [], [], 0, [], [], []
    with http_client(base_url) as client:
        for n, query in enumerate(queries):
            t0 = time.perf_counter()
            response = client.post("/api/v1/ask", json={"question": query})
            t1 = time.perf_counter()
            response.raise_for_status()
            search = client.post("/api/v1/search", json={"query": query, "limit": limit})
            t2 = time.perf_counter()
            search.raise_for_status()
            if n < WARMUP:
                continue
            body = response.json()
            assert body["mode"] == "extractive", body["mode"]
            ask_ms.append((t1 - t0) * 1000)
            search_ms.append((t2 - t1) * 1000)
            grounded += body["grounded"]
            cited.append(len(body["citations"]))
            retrieved.append(len(body["citations"]) + len(body["sourcesRetrieved"]))
            # Augmented copies repeat a real chunk's text, and ask embeds a repeated sentence once:
            # this says how much text the extractive step really had.
            distinct.append(len({r["content"] for r in search.json()["results"]}))
    return {
        "queries": len(ask_ms),
        "askMs": summary_ms(ask_ms),
        "searchMs": summary_ms(search_ms),
        "extractiveShareP50Ms": round(statistics.median(a - s for a, s in zip(ask_ms, search_ms, strict=True)), 3),
        "grounded": grounded,
        "meanCitations": round(statistics.fmean(cited), 2),
        "meanChunksRetrieved": round(statistics.fmean(retrieved), 2),
        "meanDistinctTextsRetrieved": round(statistics.fmean(distinct), 2),
    }


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    a = result["run"]
    figure = (
        f"extractive ask p50 {a['askMs']['p50']} / p95 {a['askMs']['p95']} ms at {a['chunks']} chunks "
        f"(search alone p50 {a['searchMs']['p50']} ms)"
    )
    return figure, "measured (no target)", "-"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("ask", __doc__)
    parser.add_argument("--chunks", type=int, default=20_000, help="collection size in chunks (default 20000)")
    parser.add_argument("--queries", type=int, default=100, help=f"asks (default 100, plus {WARMUP} warm-up)")
    parser.add_argument(
        "--docs", type=int, default=300, help="real abstracts (default 300; the rest of --chunks is augmented)"
    )
    args = parser.parse_args(argv)

    from bench.vectors import scifact_chunks
    from kbsearch.deps import context_of
    from kbsearch.settings import Settings
    from kbsearch.store.edge.store import EdgeStore

    for noisy in ("httpx", "kbsearch", "mcp"):  # one line per request would bury the figures
        logging.getLogger(noisy).setLevel(logging.WARNING)
    data = load_scifact(args.scifact)
    if args.docs:
        data.corpus = data.corpus[: args.docs]
    queries = list(data.queries.values())[: args.queries + WARMUP]
    print(f"[ask] {args.chunks} chunks target, {len(queries) - WARMUP} asks (+{WARMUP} warm-up) ({load_text()})")
    embedder = local_embedder()  # uncached: every question and sentence is really embedded
    chunk_set = scifact_chunks(data, embedder, target=args.chunks)
    perturb_copies(chunk_set.points)
    corpus = (
        f"{chunk_set.real} real SciFact chunks from {len(data.corpus)} abstracts (dense vectors: {chunk_set.origin}) "
        f"+ {chunk_set.augmented} augmented copies (noisy vectors, 1 word in 5 replaced) = {len(chunk_set.points)} "
        "chunks, loaded with store.upsert_chunks"
    )
    print(f"  corpus: {corpus}")
    with tempfile.TemporaryDirectory(prefix="bench-ask-") as tmp:
        settings = Settings(data_dir=Path(tmp), collection="bench", api_token=None, read_token=None)
        assert settings.chat.llm_model is None, "unset SEARCHSVC_LLM_MODEL: this measures extractive mode"
        with run_service(settings, store=EdgeStore(Path(tmp), "bench"), embedder=embedder) as svc:
            load_s = load_store(context_of(svc.app).store, chunk_set)
            with http_client(svc.base_url) as client:
                status = client.get("/api/v1/status").json()["store"]
            print(f"  loaded {status['chunks']} chunks in {load_s:.1f} s; asking ...", flush=True)
            load_before = load_average()
            run = measure(svc.base_url, queries, settings.answers.ask_results_per_search)
            run.update(chunks=status["chunks"], loadBefore=load_before, loadAfter=load_average())
    print(
        f"  ask p50 {run['askMs']['p50']:.1f} ms p95 {run['askMs']['p95']:.1f} ms; same-limit search p50 "
        f"{run['searchMs']['p50']:.1f} ms; extractive step p50 {run['extractiveShareP50Ms']:.1f} ms; "
        f"grounded {run['grounded']}/{run['queries']}; distinct texts per ask {run['meanDistinctTextsRetrieved']} "
        f"({load_text()})"
    )
    result = {
        "corpus": corpus,
        "mode": "extractive",
        "resultsPerSearch": settings.answers.ask_results_per_search,
        "minSimilarity": settings.answers.ask_min_similarity,
        "answerSentences": settings.answers.ask_answer_sentences,
        "run": run,
    }
    write_result(NAME, result)
    return result


if __name__ == "__main__":
    main()
