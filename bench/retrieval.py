"""Retrieval quality on SciFact train through the real HTTP API: nDCG@10 and Recall@100 per mode.

The real service (uvicorn, bundled MiniLM, embedded Qdrant Edge store) runs on 127.0.0.1 in a
background thread. Every abstract is PUT as `# {title}\\n\\n{text}`; every train query is searched
in hybrid, dense and keyword mode with limit=100; chunks are mapped back to document ids (max
score per document, rank order kept) and scored with the standard BEIR definitions (linear gain
from the graded qrels, log2 discount, ideal DCG from the qrels; recall over documents with
relevance > 0).

The ingested collection is kept in bench/results/cache/scifact-edge/ (git-ignored): a re-run
skips the ingest when the corpus is already there, so tuning runs (rrf_k, candidates) are quick.

    python -m bench.retrieval --scifact ../shared/eval/scifact-train [--sweep] [--limit-queries N]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    CACHE_DIR,
    SciFact,
    exclusive_dir,
    http_client,
    load_average,
    load_scifact,
    load_text,
    local_embedder,
    print_table,
    run_service,
    scifact_markdown,
    server_timing,
    service_cache,
    summary_ms,
    write_result,
)

NAME = "retrieval"
COLLECTION = "scifact"
MODES = ("hybrid", "dense", "keyword")
SWEEP_RRF_K = (2, 5, 10, 20, 60)
SWEEP_CANDIDATES = (50, 100, 200)
INGEST_WORKERS = 3  # a few requests in flight keep the embedder busy while the client serialises


# --- metrics (BEIR / pytrec_eval definitions) ------------------------------------------------


def ndcg_at_k(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: list[str], relevant: dict[str, int], k: int = 100) -> float:
    wanted = {doc for doc, g in relevant.items() if g > 0}
    return len(wanted.intersection(ranked[:k])) / len(wanted) if wanted else 0.0


def docs_from_hits(results: list[dict[str, Any]]) -> list[str]:
    """Chunk hits -> document ids, max score per document, in rank order (hits come best first)."""
    best: dict[str, float] = {}
    for hit in results:
        doc = str((hit.get("metadata") or {}).get("docId") or hit["uri"].removeprefix("scifact:"))
        if doc not in best or hit["score"] > best[doc]:
            best[doc] = hit["score"]
    return sorted(best, key=lambda d: -best[d])  # stable: ties keep rank order


# --- ingest ---------------------------------------------------------------------------------


_SUBSET: list[int] = [0]  # --docs N: a smoke run on the first N abstracts, cached apart


def data_dir() -> Path:
    return CACHE_DIR / ("scifact-edge" if not _SUBSET[0] else f"scifact-edge-first{_SUBSET[0]}")


def meta_path() -> Path:
    return data_dir() / "bench-meta.json"


def ingest(base_url: str, data: SciFact, fingerprint: str) -> dict[str, Any]:
    """PUT every abstract; already-present identical documents come back 'unchanged' (resume)."""
    started = time.perf_counter()
    statuses: dict[str, int] = {}
    chunks = embedded = 0
    done = 0
    total = len(data.corpus)

    def put(doc: dict[str, str]) -> dict[str, Any]:
        with http_client(base_url) as client:  # one connection per call keeps threads independent
            response = client.put(
                "/api/v1/documents",
                json={
                    "uri": f"scifact:{doc['_id']}",
                    "content": scifact_markdown(doc),
                    "metadata": {"docId": str(doc["_id"])},
                },
            )
        response.raise_for_status()
        return response.json()

    with ThreadPoolExecutor(INGEST_WORKERS) as pool:
        for body in pool.map(put, data.corpus):
            statuses[body["status"]] = statuses.get(body["status"], 0) + 1
            chunks += body["chunks"]
            embedded += body["chunksEmbedded"]
            done += 1
            if done % 250 == 0 or done == total:
                elapsed = time.perf_counter() - started
                print(
                    f"  ingest {done}/{total} docs, {embedded} chunks embedded, {elapsed:.0f} s ({load_text()})",
                    flush=True,
                )
    seconds = time.perf_counter() - started
    return {
        "documents": total,
        "chunks": chunks,
        "chunksEmbedded": embedded,
        "statuses": statuses,
        "seconds": round(seconds, 1),
        "docsPerSecond": round(total / seconds, 2),
        "chunksPerSecond": round(embedded / seconds, 2) if embedded else None,
        # every document written by this run (a resumed run answers 'unchanged' for earlier ones);
        # chunksEmbedded can be below chunks: a text repeated within a document is embedded once
        "complete": statuses.get("unchanged", 0) == 0,
        "chunker": fingerprint,
        "workers": INGEST_WORKERS,
        "load": load_average(),
    }


def ensure_ingested(data: SciFact, embedder, *, fresh: bool) -> dict[str, Any]:
    """The cached collection's ingest record; ingests (or resumes) when it is missing or partial."""
    from kbsearch.settings import Settings

    if fresh and (data_dir() / COLLECTION).exists():
        shutil.rmtree(data_dir() / COLLECTION)
        meta_path().unlink(missing_ok=True)
    settings = Settings(data_dir=data_dir(), collection=COLLECTION, api_token=None, read_token=None)
    meta = json.loads(meta_path().read_text()) if meta_path().is_file() else None
    with run_service(settings, embedder=embedder) as svc, http_client(svc.base_url) as client:
        status = client.get("/api/v1/status").json()
        fingerprint = status["chunker"]["fingerprint"]
        have = status["store"]["documents"]
        if meta and meta.get("chunker") == fingerprint and have == len(data.corpus):
            print(
                f"  corpus already ingested in {data_dir()} "
                f"({have} documents, {status['store']['chunks']} chunks): skipping ingest"
            )
            return {**meta, "reused": True}
        print(f"  ingesting {len(data.corpus)} abstracts through PUT /api/v1/documents ({have} already present)")
        record = ingest(svc.base_url, data, fingerprint)
        record["chunksInStore"] = client.get("/api/v1/status").json()["store"]["chunks"]
    if meta and not record["complete"] and meta.get("chunker") == fingerprint:
        record["previousRuns"] = meta  # a resumed ingest: keep the earlier partial figures
    meta_path().write_text(json.dumps(record, indent=2) + "\n")
    return {**record, "reused": False}


# --- evaluation -----------------------------------------------------------------------------


def evaluate(base_url: str, data: SciFact, query_ids: list[str], mode: str, limit: int) -> dict[str, Any]:
    ndcgs, recalls, embed_ms, engine_ms = [], [], [], []
    with http_client(base_url) as client:
        for qid in query_ids:
            response = client.post("/api/v1/search", json={"query": data.queries[qid], "limit": limit, "mode": mode})
            response.raise_for_status()
            ranked = docs_from_hits(response.json()["results"])
            ndcgs.append(ndcg_at_k(ranked, data.qrels[qid], 10))
            recalls.append(recall_at_k(ranked, data.qrels[qid], 100))
            timing = server_timing(response.headers.get("server-timing"))
            embed_ms.append(timing.get("embed", 0.0))
            engine_ms.append(timing.get("engine", 0.0))
    return {
        "mode": mode,
        "queries": len(query_ids),
        "limit": limit,
        "ndcg@10": round(sum(ndcgs) / len(ndcgs), 4),
        "recall@100": round(sum(recalls) / len(recalls), 4) if limit >= 100 else None,
        "embedMs": summary_ms(embed_ms),
        "engineMs": summary_ms(engine_ms),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", required=False, help="SciFact train folder (BEIR layout)")
    parser.add_argument("--limit-queries", type=int, default=0, help="evaluate only the first N queries (smoke)")
    parser.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=True, help="rrf_k x candidates table")
    parser.add_argument(
        "--docs", type=int, default=0, help="smoke run: only the first N abstracts and the queries judged on them"
    )
    parser.add_argument(
        "--sweep-candidates", type=int, nargs="+", default=list(SWEEP_CANDIDATES), help="candidates values to sweep"
    )
    parser.add_argument("--fresh", action="store_true", help="drop the cached collection and ingest again")
    args = parser.parse_args(argv)

    data = load_scifact(args.scifact)
    _SUBSET[0] = args.docs
    if args.docs:
        data.corpus = data.corpus[: args.docs]
        kept = {str(d["_id"]) for d in data.corpus}
        data.qrels = {q: rel for q, rel in data.qrels.items() if set(rel) <= kept}
    with exclusive_dir(data_dir()):
        return _main(args, data)


def _main(args, data: SciFact) -> dict[str, Any]:
    from kbsearch.settings import Settings

    query_ids = [q for q in data.queries if q in data.qrels]
    if args.limit_queries:
        query_ids = query_ids[: args.limit_queries]
    print(f"[retrieval] SciFact train: {len(data.corpus)} abstracts, {len(query_ids)} judged queries ({load_text()})")
    embedder = local_embedder()

    ingest_record = ensure_ingested(data, embedder, fresh=args.fresh)
    if not ingest_record["reused"]:
        print(
            f"  ingest: {ingest_record['documents']} docs, {ingest_record['chunksEmbedded']} chunks embedded in "
            f"{ingest_record['seconds']:.0f} s ({ingest_record['docsPerSecond']} docs/s)"
        )

    # Query vectors are cached across the sweep's service instances (each text is embedded once);
    # the first pass below is uncached, so its Server-Timing embed figures are real.
    cached = service_cache(embedder, 10_000)
    defaults = Settings(data_dir=data_dir(), collection=COLLECTION, api_token=None, read_token=None)
    modes: dict[str, Any] = {}
    with run_service(defaults, embedder=cached) as svc:
        for mode in MODES:
            started = time.perf_counter()
            modes[mode] = evaluate(svc.base_url, data, query_ids, mode, limit=100)
            modes[mode]["seconds"] = round(time.perf_counter() - started, 1)
            print(f"  {mode:8s} nDCG@10 {modes[mode]['ndcg@10']:.4f}  Recall@100 {modes[mode]['recall@100']:.4f}")

    sweep: list[dict[str, Any]] = []
    if args.sweep:
        print(f"  sweep rrf_k x candidates (hybrid) ({load_text()})")
        for candidates in args.sweep_candidates:
            for k in SWEEP_RRF_K:
                settings = defaults.model_copy(update={"rrf_k": k, "search_candidates": candidates})
                # The service fuses max(candidates, limit) per stage, so below 100 candidates the
                # request asks for `candidates` chunks (enough for a top-10 of documents; Recall@100 n/a).
                limit = 100 if candidates >= 100 else candidates
                with run_service(settings, embedder=cached) as svc:
                    row = evaluate(svc.base_url, data, query_ids, "hybrid", limit=limit)
                row.update(rrf_k=k, candidates=candidates)
                sweep.append(row)
                rec = f"{row['recall@100']:.4f}" if row["recall@100"] is not None else "  n/a "
                print(
                    f"    rrf_k={k:<3d} candidates={candidates:<3d} nDCG@10 {row['ndcg@10']:.4f}  Recall@100 {rec}",
                    flush=True,
                )

    result: dict[str, Any] = {
        "dataset": "SciFact train (BEIR)" + (f", SMOKE SUBSET: first {args.docs} abstracts" if args.docs else ""),
        "documents": len(data.corpus),
        "queries": len(query_ids),
        "service": {
            "store": "edge (Qdrant Edge, embedded)",
            "embedder": "local all-MiniLM-L6-v2",
            "transport": "HTTP 127.0.0.1, uvicorn",
            "rrf_k": defaults.rrf_k,
            "candidates": defaults.search_candidates,
            "chunkRange": list(defaults.chunk_range),
        },
        "ingest": ingest_record,
        "modes": modes,
        "sweep": sweep,
        "target": {
            "hybridNdcg10": 0.70,
            "met": modes["hybrid"]["ndcg@10"] >= 0.70
            and modes["hybrid"]["ndcg@10"] > max(modes["dense"]["ndcg@10"], modes["keyword"]["ndcg@10"]),
        },
    }
    if sweep:
        best = max(sweep, key=lambda r: r["ndcg@10"])
        result["bestSweep"] = {"rrf_k": best["rrf_k"], "candidates": best["candidates"], "ndcg@10": best["ndcg@10"]}
    path = write_result(NAME, result)

    print(
        f"\n[retrieval] SciFact train, {len(query_ids)} queries, rrf_k={defaults.rrf_k}, "
        f"candidates={defaults.search_candidates} ({load_text()})"
    )
    print_table(
        ["mode", "nDCG@10", "Recall@100", "engine p50 ms", "engine p95 ms"],
        [[m, r["ndcg@10"], r["recall@100"], r["engineMs"]["p50"], r["engineMs"]["p95"]] for m, r in modes.items()],
    )
    if sweep:
        print_table(
            ["rrf_k", *[f"cand={c} nDCG@10" for c in args.sweep_candidates]],
            [
                [
                    k,
                    *[
                        next(r["ndcg@10"] for r in sweep if r["rrf_k"] == k and r["candidates"] == c)
                        for c in args.sweep_candidates
                    ],
                ]
                for k in SWEEP_RRF_K
            ],
        )
        print(
            f"  best: rrf_k={result['bestSweep']['rrf_k']} candidates={result['bestSweep']['candidates']} "
            f"nDCG@10 {result['bestSweep']['ndcg@10']:.4f}"
        )
    ing = ingest_record
    print(
        f"  ingest: {ing['documents']} docs / {ing.get('chunksInStore', ing['chunks'])} chunks "
        f"in {ing['seconds']:.0f} s"
        f"{' (cached from an earlier run)' if ing['reused'] else ''}; "
        f"target hybrid >= 0.70 and best: {'met' if result['target']['met'] else 'NOT met'}"
    )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
