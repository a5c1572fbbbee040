"""bench/calibrate.py's dump for a BEIR-layout set (SciFact train, MLQuestions dev), in process.

    python -m bench.calibrate_beir --beir ../shared/eval/mlquestions-dev --name mlquestions-dev [--questions N]

The corpus is chunked and embedded as bench/retrieval.py does (bench/vectors.py, vectors cached in
bench/results/cache/), loaded into a fresh Edge collection through the store interface, and each question
runs the search service's own read path after embedding: EdgeStore.search (hybrid, the service's fetch
size and fusion), then collapse_pages with the service's page evidence. One row per page, as the docs dump
writes them; a page is right when the qrels judge its passage (or an identical copy of it) relevant.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from bench.calibrate import DUMP_DIR


def load(folder: Path) -> Any:
    from bench.common import SciFact

    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines() if line.strip()]
    queries = {str(q["_id"]): q["text"] for q in map(json.loads, filter(str.strip, (folder / "queries.jsonl").open()))}
    qrels: dict[str, dict[str, int]] = {}
    for tsv in sorted((folder / "qrels").glob("*.tsv")):
        for line in tsv.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) < 3 or parts[0].lower() == "query-id":
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return SciFact(corpus=corpus, queries=queries, qrels=qrels)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calibrate_beir", description=__doc__)
    parser.add_argument("--beir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--questions", type=int, default=0, help="a seeded sample of this many questions (0: all)")
    args = parser.parse_args(argv)

    from bench.common import load_text
    from bench.retrieval import load_store, query_vectors
    from bench.vectors import scifact_chunks
    from kbsearch.models import SearchFilter
    from kbsearch.services.search.pageweights import PathWeights
    from kbsearch.services.search.ranking import PageEvidence, Relevance, collapse_pages, coverage
    from kbsearch.services.search.service import FETCH_PER_PAGE, MAX_FETCH, configured_fusion
    from kbsearch.settings import Settings
    from kbsearch.store.bm25 import Bm25Encoder

    data = load(args.beir)
    ids = sorted(q for q in data.qrels if q in data.queries)
    if args.questions:
        ids = sorted(random.Random(7).sample(ids, min(args.questions, len(ids))))
    text_of = {str(d["_id"]): d["text"] for d in data.corpus}
    chunk_set = scifact_chunks(data)
    print(f"{len(chunk_set.points)} chunks ({chunk_set.origin}), load {load_text()}", flush=True)
    store = load_store(chunk_set)
    dense, how = query_vectors(data, ids, None)
    print(f"{len(ids)} query vectors {how}", flush=True)
    settings = Settings()
    encoder = Bm25Encoder()
    weights = PathWeights(encoder.tokens, defaults=settings.search.default_path_weights)
    fusion = configured_fusion(settings.search)
    fetch = min(MAX_FETCH, max(settings.search.search_candidates, 10 * FETCH_PER_PAGE))
    curve = Relevance(midpoint=0.0, steepness=4.0)
    rows: list[dict[str, Any]] = []
    for i, qid in enumerate(ids):
        text = data.queries[qid]
        hits = store.search(
            mode="hybrid",
            dense=[float(x) for x in dense[i]],
            sparse=encoder.encode_query(text),
            filter=SearchFilter(),
            limit=fetch,
            candidates=max(settings.search.search_candidates, fetch),
            fusion=fusion,
        )
        stems = encoder.tokens(text)
        pages = collapse_pages(hits, 10, curve, PageEvidence(stems, encoder.tokens, weights.for_query(text)))
        judged = data.qrels[qid]
        right_texts = {text_of.get(d) for d, g in judged.items() if g > 0}
        for rank, hit in enumerate(pages):
            doc = hit.uri.removeprefix("scifact:")
            title = " ".join([hit.title or "", *hit.headings])
            rows.append(
                {
                    "set": args.name,
                    "q": qid,
                    "rank": rank,
                    "page": doc,
                    "right": judged.get(doc, 0) > 0 or text_of.get(doc) in right_texts,
                    "gain": judged.get(doc, 0),
                    "judged": sum(1 for g in judged.values() if g > 0),
                    "score": hit.score,
                    "cosine": hit.similarity if hit.similarity is not None else 0.0,
                    "more": hit.more_matches,
                    "coverage": coverage(stems, encoder.tokens(title + " " + hit.content)),
                    "title_coverage": coverage(stems, encoder.tokens(title)),
                    "stems": len(set(stems)),
                    "query_stems": sorted(set(stems)),
                    "title_stems": sorted(set(encoder.tokens(title))),
                    "text_stems": sorted(set(encoder.tokens(title + " " + hit.content))),
                }
            )
    DUMP_DIR.mkdir(parents=True, exist_ok=True)
    out = DUMP_DIR / f"{args.name}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} rows -> {out}, load {load_text()}")


if __name__ == "__main__":
    main()
