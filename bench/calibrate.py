"""Fit the relevance model (services/search/ranking.py) on judged docs questions, and measure its calibration.

Two steps, so the expensive one (syncing a corpus, embedding it) runs once per set:

    python -m bench.calibrate dump --eval ../shared/eval/argocd-docs --name argocd-docs
    python -m bench.calibrate dump --eval ../shared/eval/cert-manager-docs --name cert-manager-docs --fold-versions
    python -m bench.calibrate_beir --beir ../shared/eval/scifact-train --name scifact-train
    python -m bench.calibrate_beir --beir ../shared/eval/mlquestions-dev --name mlquestions-dev
    python -m bench.calibrate fit /tmp/kb-calibrate/*.jsonl [--write]   # the shipped model: all four sets

`dump` syncs the set's corpus into the real service (as bench/docsqa.py does), asks every question
and the off-topic ones (hybrid, 10 pages), and writes one row per returned page: the evidence the
service exposes (page score, best cosine, more matches, rank) and whether the page is judged right
(cert-manager: version-folded, `content/vX.Y-docs/P` counts as `content/docs/P`).

`fit` fits a logistic regression (scikit-learn, here only: the service applies the coefficients with
plain arithmetic) with leave-one-corpus-out folds, prints each held-out fold's hit@1/hit@5/MRR@10
before (the service's order) and after (ordered by the model), ECE over 10 bins and a reliability
table, then (`--write`) fits on every set and writes the coefficients to
searchsvc/kbsearch/services/search/relevance_models.json under the embedder's name.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

DUMP_DIR = Path("/tmp/kb-calibrate")
MODELS = (
    Path(__file__).resolve().parent.parent / "searchsvc" / "kbsearch" / "services" / "search" / "relevance_models.json"
)
_FOLD = re.compile(r"content/v\d+\.\d+-docs/")


def fold(path: str) -> str:
    return _FOLD.sub("content/docs/", path)


def dump(args: argparse.Namespace) -> None:
    from bench.common import CACHE_DIR, http_client, load_text, local_embedder, model_tag, run_service
    from bench.docsqa import OFF_TOPIC, DiskVectorCache, clone_corpus
    from kboperator.cli import main as knowledge_sync
    from kbsearch.embedders.factory import relevance_calibration
    from kbsearch.services.search.ranking import coverage
    from kbsearch.settings import Settings
    from kbsearch.store.bm25 import Bm25Encoder

    tokens = Bm25Encoder().tokens

    questions = [json.loads(line) for line in (args.eval / "questions.jsonl").read_text().splitlines() if line]
    work = Path(tempfile.mkdtemp(prefix="calibrate-"))
    DUMP_DIR.mkdir(parents=True, exist_ok=True)
    out = DUMP_DIR / f"{args.name}.jsonl"
    try:
        repo = clone_corpus(args.eval, work)
        inner = local_embedder(None)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        cache = DiskVectorCache(inner, CACHE_DIR / f"docsqa-vectors-{model_tag(inner.model)}{inner.backend}.npz")
        # The curve, whatever is shipped, shallow so that the cosine reads back from its relevance precisely.
        settings = Settings(
            data_dir=work / "data",
            onnx_dir=CACHE_DIR / "onnx",
            query_log="off",
            relevance_model="curve",
            relevance_midpoint=0.0,
            relevance_steepness=4.0,
        )
        midpoint, steepness = relevance_calibration(settings.embedding, settings.search)
        with run_service(settings, embedder=cache.provider) as svc:
            started = time.perf_counter()
            sync = ["--repo", str(repo), "--ref", "main", "--source-id", args.name, "--service", svc.base_url]
            code = knowledge_sync([*sync, "--include", args.include, "--cache-dir", str(work / "git-cache")])
            cache.save()
            if code != 0:
                raise SystemExit(f"knowledge-sync exited {code}")
            print(f"synced in {time.perf_counter() - started:.0f} s, load {load_text()}")
            rows: list[dict[str, Any]] = []
            asked = [(q["id"], q["question"], set(q["relevant"])) for q in questions]
            asked += [(f"off{i}", text, set()) for i, text in enumerate(OFF_TOPIC)]
            with http_client(svc.base_url) as client:
                for qid, text, relevant in asked:
                    body = client.post("/api/v1/search", json={"query": text, "limit": 10, "mode": "hybrid"})
                    query_stems = tokens(text)
                    for rank, hit in enumerate(body.raise_for_status().json()["results"]):
                        path = str(hit.get("metadata", {}).get("path", ""))
                        page = fold(path) if args.fold_versions else path
                        title = " ".join([hit.get("title") or "", *hit.get("headings", []), path.rsplit("/", 1)[-1]])
                        rows.append(
                            {
                                "set": args.name,
                                "q": qid,
                                "rank": rank,
                                "page": page,
                                "right": page in relevant,
                                "score": hit["score"],
                                "cosine": _inverse(hit["relevance"], midpoint, steepness),
                                "more": hit.get("moreMatches", 0),
                                "coverage": coverage(query_stems, tokens(title + " " + hit["content"])),
                                "title_coverage": coverage(
                                    query_stems, tokens(title.replace("-", " ").replace("_", " "))
                                ),
                                "stems": len(set(query_stems)),
                                # The page's own stems, for offline second-stage experiments (IDF over the candidates).
                                "query_stems": sorted(set(query_stems)),
                                "title_stems": sorted(set(tokens(title.replace("-", " ").replace("_", " ")))),
                                "text_stems": sorted(set(tokens(title + " " + hit["content"]))),
                            }
                        )
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{len(rows)} rows -> {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _inverse(relevance: float, midpoint: float, steepness: float) -> float:
    """The cosine behind the old curve's relevance (the REST face shows relevance, not the cosine)."""
    r = min(max(relevance, 1e-4), 1 - 1e-4)
    return midpoint + math.log(r / (1 - r)) / steepness


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--eval", type=Path, required=True)
    d.add_argument("--name", required=True)
    d.add_argument("--include", default="**/*.md")
    d.add_argument("--fold-versions", action="store_true")
    f = sub.add_parser("fit")
    f.add_argument("dumps", nargs="+", type=Path)
    f.add_argument("--write", action="store_true")
    f.add_argument("--variant", default="rank-on-topic", help="which feature set to ship (see calibrate_fit.VARIANTS)")
    f.add_argument("--embedder", default="all-MiniLM-L6-v2")
    args = parser.parse_args(argv)
    if args.step == "dump":
        dump(args)
    else:
        from bench.calibrate_fit import fit

        fit(args)


if __name__ == "__main__":
    main()
