"""Retrieval quality on SciFact train: nDCG@10 and Recall@100 of dense, keyword and hybrid per fusion.

In process, against a fresh Qdrant Edge collection: every abstract is chunked as the service
chunks `# {title}\\n\\n{text}` (MarkdownChunker, default settings); each chunk gets the bundled
MiniLM's vector of its embed_text (bench/vectors.py: computed once, ~15 min on 2 cores, then
cached in bench/results/cache/, git-ignored) and the service's BM25 vector (Bm25Encoder, per
document). The points are loaded through the store interface (EdgeStore.upsert_chunks), and every
judged query, embedded once (cached too), is searched with EdgeStore.search: the code a search
request runs after embedding, with each fusion the service offers. Chunks are mapped back to
documents (max score per document, rank order kept) and scored with the BEIR definitions (linear
gain from the graded qrels, log2 discount, ideal DCG from the qrels; recall over documents with
relevance > 0), with limit=100 chunks.

Tuning happens on the train split only; the test split is held back.

    python -m bench.retrieval --scifact ../shared/eval/scifact-train [--no-sweep] [--docs N] [--backend B]

--backend sets SEARCHSVC_LOCAL_BACKEND for the local embedder (torch|onnx|onnx-int8, where the
service supports it) and keys the vector caches by it, so backends can be compared side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import time
from typing import Any

import numpy as np

from bench.common import (
    CACHE_DIR,
    SciFact,
    exclusive_dir,
    load_average,
    load_scifact,
    load_text,
    print_table,
    verdict,
    write_result,
)
from bench.common import (
    parser as common_parser,
)
from bench.vectors import COLLECTION, data_dir, scifact_chunks, signature

NAME = "retrieval"
MODES = ("dense", "keyword")
LIMIT = 100  # chunks per query: enough documents for Recall@100 after merging chunks
# The published figures on SciFact (test split) to beat: bm25s, and Qdrant's MiniLM + BM25 hybrids.
PUBLISHED = {"bm25s keyword": 0.687, "Qdrant MiniLM+BM25 DBSF": 0.732, "Qdrant MiniLM+BM25 RRF": 0.718}
TARGET_KEYWORD, TARGET_HYBRID = 0.71, 0.76
SWEEP_RRF_K = (1, 2, 5, 60)
SWEEP_DENSE_WEIGHT = (0.75, 1.0, 1.5, 2.0)  # keyword weight 1
SWEEP_CANDIDATES = (50, 100, 200)


# --- metrics (BEIR / pytrec_eval definitions) ------------------------------------------------


def ndcg_at_k(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: list[str], relevant: dict[str, int], k: int = 100) -> float:
    wanted = {doc for doc, g in relevant.items() if g > 0}
    return len(wanted.intersection(ranked[:k])) / len(wanted) if wanted else 0.0


def docs_from_hits(hits: list[Any]) -> list[str]:
    """Chunk hits -> document ids, max score per document, in rank order (hits come best first)."""
    best: dict[str, float] = {}
    for hit in hits:
        doc = hit.uri.removeprefix("scifact:")
        if doc not in best or hit.score > best[doc]:
            best[doc] = hit.score
    return sorted(best, key=lambda d: -best[d])  # stable: ties keep rank order


# --- the collection -----------------------------------------------------------------------


def load_store(chunk_set, backend: str | None = None):
    """A fresh Edge collection holding every chunk and document record (through the store interface)."""
    from kbsearch.store.edge.store import EdgeStore

    shutil.rmtree(data_dir() / COLLECTION, ignore_errors=True)
    store = EdgeStore(data_dir(), COLLECTION)
    # The chunks' own width: another local model (SEARCHSVC_LOCAL_MODEL) may not have MiniLM's 384.
    store.open(signature(backend, len(chunk_set.points[0].dense)))
    started = time.perf_counter()
    for start in range(0, len(chunk_set.points), 500):
        store.upsert_chunks(chunk_set.points[start : start + 500])
    for record in chunk_set.records:
        store.write_document(record, None)
    print(f"  loaded {len(chunk_set.points)} chunks in {time.perf_counter() - started:.1f} s ({load_text()})")
    return store


def query_vectors(data: SciFact, query_ids: list[str], backend: str | None) -> tuple[np.ndarray, str]:
    texts = [data.queries[q] for q in query_ids]
    from bench.common import model_tag

    key = hashlib.sha256(("\n".join(texts) + f"\n{backend or ''}" + model_tag()).encode()).hexdigest()[:16]
    cache = CACHE_DIR / f"scifact-query-vectors-{key}.npy"
    if cache.is_file():
        return np.load(cache), "cached"
    from bench.common import local_embedder

    embedder = local_embedder()
    started = time.perf_counter()
    vectors = np.asarray([embedder.embed_query(t) for t in texts], dtype=np.float32)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors, f"embedded in {time.perf_counter() - started:.0f} s"


# --- evaluation -----------------------------------------------------------------------------


class Evaluator:
    def __init__(self, store, data: SciFact, query_ids: list[str], dense: np.ndarray):
        from kbsearch.store.bm25 import Bm25Encoder

        encoder = Bm25Encoder()
        self.store, self.data, self.query_ids = store, data, query_ids
        self.dense = [list(map(float, v)) for v in dense]
        self.sparse = [encoder.encode_query(data.queries[q]) for q in query_ids]

    def run(self, mode: str, fusion=None, candidates: int = 100) -> dict[str, Any]:
        from kbsearch.models import Fusion, SearchFilter

        fusion = fusion or Fusion()
        ndcgs, recalls = [], []
        started = time.perf_counter()
        for i, qid in enumerate(self.query_ids):
            hits = self.store.search(
                mode=mode,
                dense=self.dense[i] if mode != "keyword" else None,
                sparse=self.sparse[i] if mode != "dense" else None,
                filter=SearchFilter(),
                limit=LIMIT,
                candidates=max(candidates, LIMIT),
                fusion=fusion,
            )
            ranked = docs_from_hits(hits)
            ndcgs.append(ndcg_at_k(ranked, self.data.qrels[qid], 10))
            recalls.append(recall_at_k(ranked, self.data.qrels[qid], 100))
        return {
            "mode": mode,
            "ndcg@10": round(sum(ndcgs) / len(ndcgs), 4),
            "recall@100": round(sum(recalls) / len(recalls), 4),
            "msPerQuery": round((time.perf_counter() - started) * 1000 / len(self.query_ids), 2),
        }


def describe_fusion(fusion) -> dict[str, Any]:
    out: dict[str, Any] = {"fusion": fusion.method}
    if fusion.method == "rrf":
        out["rrf_k"] = fusion.rrf_k
    out.update(dense_weight=fusion.dense_weight, keyword_weight=fusion.keyword_weight, full_scores=fusion.full_scores)
    return out


def fusions_to_compare():
    """The default, and each fusion the service offers at its best setting measured here."""
    from kbsearch.models import Fusion
    from kbsearch.services.search.service import configured_fusion
    from kbsearch.settings import Settings

    s = Settings()
    return {
        "default": configured_fusion(s.search),
        "rrf k=2": Fusion("rrf", 2),
        "rrf k=2, full scores": Fusion("rrf", 2, full_scores=True),
        "rrf k=60": Fusion("rrf", 60),
        "dbsf": Fusion("dbsf"),
        "dbsf, full scores": Fusion("dbsf", full_scores=True),
    }


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    m = result["modes"]
    figure = (
        f"nDCG@10 hybrid {m['hybrid']['ndcg@10']:.4f} / dense {m['dense']['ndcg@10']:.4f} / "
        f"keyword {m['keyword']['ndcg@10']:.4f}; R@100 hybrid {m['hybrid']['recall@100']:.4f}; "
        + ", ".join(f"{label} {h['ndcg@10']:.4f}" for label, h in result["hybrid"].items() if label != "default")
    )
    return figure, "keyword >= 0.71, hybrid >= 0.76", verdict(result["target"]["met"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("retrieval", __doc__)
    parser.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=True, help="fusion parameter sweep")
    parser.add_argument(
        "--docs", type=int, default=0, help="smoke run: only the first N abstracts and the queries judged on them"
    )
    parser.add_argument("--backend", default=None, help="SEARCHSVC_LOCAL_BACKEND for the local embedder")
    args = parser.parse_args(argv)

    data = load_scifact(args.scifact)
    if args.docs:
        data.corpus = data.corpus[: args.docs]
        kept = {str(d["_id"]) for d in data.corpus}
        data.qrels = {q: rel for q, rel in data.qrels.items() if set(rel) <= kept}
    if args.backend:
        os.environ["SEARCHSVC_LOCAL_BACKEND"] = args.backend
    with exclusive_dir(data_dir()):
        return _main(args, data)


def _main(args, data: SciFact) -> dict[str, Any]:
    from kbsearch.models import Fusion
    from kbsearch.store.bm25 import Bm25Encoder

    query_ids = [q for q in data.queries if q in data.qrels]
    start_load = load_average()
    print(f"[retrieval] SciFact train: {len(data.corpus)} abstracts, {len(query_ids)} judged queries ({load_text()})")
    chunk_set = scifact_chunks(data, backend=args.backend)
    print(f"  {len(chunk_set.points)} chunks; dense vectors: {chunk_set.origin}")
    queries, query_origin = query_vectors(data, query_ids, args.backend)
    print(f"  query vectors: {query_origin}")
    store = load_store(chunk_set, args.backend)
    try:
        evaluator = Evaluator(store, data, query_ids, queries)
        modes = {mode: evaluator.run(mode) for mode in MODES}
        for mode, row in modes.items():
            print(f"  {mode:8s} nDCG@10 {row['ndcg@10']:.4f}  Recall@100 {row['recall@100']:.4f} ({load_text()})")
        hybrid: dict[str, Any] = {}
        for label, fusion in fusions_to_compare().items():
            hybrid[label] = {**describe_fusion(fusion), **evaluator.run("hybrid", fusion), "load": load_average()}
            row = hybrid[label]
            print(f"  hybrid {label:10s} nDCG@10 {row['ndcg@10']:.4f}  Recall@100 {row['recall@100']:.4f}")
        sweep: list[dict[str, Any]] = []
        if args.sweep:
            print(
                f"  sweep: fusion x rrf_k x dense weight x full scores, 100 candidates ({load_text()})",
                flush=True,
            )
            grid = [Fusion("dbsf", 2, w, 1.0, full) for w in SWEEP_DENSE_WEIGHT for full in (False, True)]
            grid += [
                Fusion("rrf", k, w, 1.0, full)
                for k in SWEEP_RRF_K
                for w in SWEEP_DENSE_WEIGHT
                for full in (False, True)
            ]
            sweep.extend(
                {**describe_fusion(fusion), "candidates": 100, **evaluator.run("hybrid", fusion)} for fusion in grid
            )
            for method in ("rrf", "dbsf"):
                top = max((r for r in sweep if r["fusion"] == method), key=lambda r: r["ndcg@10"])
                best = Fusion(method, top.get("rrf_k", 2), top["dense_weight"], 1.0, top["full_scores"])
                for candidates in SWEEP_CANDIDATES:
                    if candidates != 100:
                        row = evaluator.run("hybrid", best, candidates)
                        sweep.append({**describe_fusion(best), "candidates": candidates, **row})
            print(f"  sweep done ({load_text()})")
    finally:
        store.close()
        shutil.rmtree(data_dir() / COLLECTION, ignore_errors=True)

    default = hybrid["default"]
    result: dict[str, Any] = {
        "dataset": "SciFact train (BEIR)" + (f", SMOKE SUBSET: first {args.docs} abstracts" if args.docs else ""),
        "documents": len(data.corpus),
        "chunks": len(chunk_set.points),
        "queries": len(query_ids),
        "setup": {
            "store": "edge (Qdrant Edge, embedded), in process through EdgeStore.search",
            "embedder": "local all-MiniLM-L6-v2",
            "backend": args.backend or "default",
            "denseVectors": chunk_set.origin,
            "sparseEncoder": Bm25Encoder.name,
            "limit": LIMIT,
        },
        "loadAtStart": start_load,
        "modes": {**modes, "hybrid": default},
        "hybrid": hybrid,
        "sweep": sweep,
        "published": PUBLISHED,
        "target": {
            "keywordNdcg10": TARGET_KEYWORD,
            "hybridNdcg10": TARGET_HYBRID,
            "met": modes["keyword"]["ndcg@10"] >= TARGET_KEYWORD and default["ndcg@10"] >= TARGET_HYBRID,
        },
    }
    path = write_result(NAME, result)

    print(f"\n[retrieval] SciFact train, {len(query_ids)} queries, {len(chunk_set.points)} chunks ({load_text()})")
    rows = [[m, "", r["ndcg@10"], r["recall@100"]] for m, r in modes.items()]
    rows += [["hybrid", label, r["ndcg@10"], r["recall@100"]] for label, r in hybrid.items()]
    print_table(["mode", "fusion", "nDCG@10", "Recall@100"], rows)
    if sweep:
        print_table(
            ["fusion", "rrf_k", "dense w", "full scores", "candidates", "nDCG@10", "Recall@100"],
            [
                [
                    r["fusion"],
                    r.get("rrf_k", ""),
                    r["dense_weight"],
                    r["full_scores"],
                    r["candidates"],
                    r["ndcg@10"],
                    r["recall@100"],
                ]
                for r in sorted(sweep, key=lambda r: -r["ndcg@10"])[:15]
            ],
        )
    print(
        f"  targets: keyword >= {TARGET_KEYWORD}, default hybrid >= {TARGET_HYBRID}: "
        f"{'met' if result['target']['met'] else 'NOT met'}; published (test split): "
        + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items())
    )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
