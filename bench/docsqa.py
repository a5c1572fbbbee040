"""Docs QA: retrieval and answer quality on a real documentation repository (the Argo CD dev set).

The corpus (a git bundle) is synced the way a user syncs it, with `knowledge-sync`, into the real
service (Qdrant Edge, the bundled MiniLM), and the 80 judged questions are asked through REST:

- retrieval, per mode: hit@1, hit@5 and MRR@10 over distinct pages, distinct pages in the top 10;
- answers (extractive, offline): the share whose text holds every expected fact, and how many are
  marked grounded; plus off-topic questions, which should come back ungrounded;
- the chunk-size distribution of the synced corpus.

`--versioned` syncs a copy with three versions of every page (Hugo layout, `content/docs/<v>/`,
small edits between them) and counts a hit only for the newest version's page.
`--eval ../shared/eval/cert-manager-docs` syncs that site as-is (`content/**/*.md`, the pattern its
README loads it with: the current docs and five `content/vX.Y-docs/` copies); `--include` names
another glob. Every set reports its strict figures (only the current version's page is a hit) and,
beside them, the version-folded ones (every older copy counts as its current page, before the
distinct-page step: the sets' README's lenient variant). The gap between the two is what version
handling loses; on a set without copies they are equal.

Vectors are kept in a file cache between runs (keyed by backend and text), so a re-run after a
chunker change embeds only the texts that changed.

    python -m bench.docsqa --eval ../shared/eval/argocd-docs [--versioned] [--modes hybrid dense keyword]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CACHE_DIR, http_client, load_text, model_tag, print_table, run_service, verdict, write_result
from bench.common import parser as common_parser
from tests.support.git import git

DEFAULT_EVAL = Path(__file__).resolve().parent.parent.parent / "shared" / "eval" / "argocd-docs"
VERSIONS = ("2.9", "2.10", "2.12")  # 2.12 is the newest: ordered as versions, not as strings
SOURCE = "argocd"

# Questions nothing in the Argo CD docs answers: an answer to any of them must not be grounded.
OFF_TOPIC = [
    "What is the capital of France?",
    "asdkjh qwe zzxq",
    "how do I bake sourdough bread with a starter",
    "who won the football world cup in 2014",
    "what is the boiling point of water at sea level",
    "recommend a good book about the roman empire",
    "how many moons does jupiter have",
    "translate 'good morning' into japanese",
    "how do I change a flat tyre on a bicycle",
    "what is the best way to learn to play the guitar",
    "how tall is mount everest",
    "what is photosynthesis",
    "how do I make cold brew coffee at home",
    "what does a cardiologist do",
    "how do I repot an orchid",
    "lorem ipsum dolor sit amet",
    "what is the plot of hamlet",
    "how do I knit a scarf for beginners",
    "which planet is closest to the sun",
    "what is the population of brazil",
]


class DiskVectorCache:
    """The real embedder behind a persistent text -> vector cache (bench only: reruns embed only new texts)."""

    def __init__(self, inner: Any, path: Path) -> None:
        from kbsearch.embedders.base import EmbeddingProvider

        self.inner = inner
        self.path = path
        self.lock = threading.Lock()
        self.vectors: dict[str, np.ndarray] = {}
        self.dirty = False
        if path.exists():
            data = np.load(path)
            self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        outer = self

        class Cached(EmbeddingProvider):
            provider = inner.provider
            model = inner.model
            dimensions = inner.dimensions
            backend = inner.backend
            query_prefix = inner.query_prefix

            def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
                return outer.embed(texts)

        self.provider = Cached()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        keys = [hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        with self.lock:
            missing = list(dict.fromkeys(k for k in keys if k not in self.vectors))
        if missing:
            by_key = dict(zip(keys, texts, strict=True))
            fresh = self.inner.embed_documents([by_key[k] for k in missing])
            with self.lock:
                for key, vector in zip(missing, fresh, strict=True):
                    self.vectors[key] = np.asarray(vector, dtype=np.float32)
                self.dirty = True
        with self.lock:
            return [self.vectors[k].tolist() for k in keys]

    def save(self) -> None:
        if not self.dirty:
            return
        keys = list(self.vectors)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(self.path)


def clone_corpus(eval_dir: Path, into: Path) -> Path:
    repo = into / "argocd-docs"
    subprocess.run(["git", "clone", "-q", str(eval_dir / "corpus.bundle"), str(repo)], check=True)
    return repo


def make_versioned(single: Path, into: Path, seed: int = 5) -> Path:
    """Three copies of every page under content/docs/<version>/, older ones with small edits."""
    repo = into / "argocd-versioned"
    rng = random.Random(seed)
    for path in sorted(single.rglob("*.md")):
        rel = path.relative_to(single / "docs")
        text = path.read_text(encoding="utf-8")
        for age, version in enumerate(reversed(VERSIONS)):
            edited = text
            for _ in range(age):
                edited = _small_edit(edited, rng)
            target = repo / "content" / "docs" / version / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(edited, encoding="utf-8")
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "three versions")
    return repo


def _small_edit(text: str, rng: random.Random) -> str:
    """Drop one prose line and reword one: how an older version of a page usually differs."""
    lines = text.split("\n")
    prose = [i for i, line in enumerate(lines) if len(line) > 60 and line[:1].isalpha()]
    if len(prose) >= 2:
        drop, reword = rng.sample(prose, 2)
        lines[reword] = lines[reword].replace(" the ", " this ", 1)
        del lines[drop]
    return "\n".join(lines)


def page_of(hit: dict[str, Any], versioned: bool) -> str:
    """The judged page a hit is, as `docs/...` (versioned: only the newest version counts)."""
    path = str(hit.get("metadata", {}).get("path", ""))
    if not versioned:
        return path
    match = re.match(r"content/docs/([^/]+)/(.*)", path)
    if not match:
        return path
    version, rest = match.groups()
    return f"docs/{rest}" if version == VERSIONS[-1] else f"v{version}:docs/{rest}"


def fold_version(path: str) -> str:
    """An older copy as its current page: cert-manager's `content/vX.Y-docs/P` as `content/docs/P`, the
    versioned Argo CD copy's `v2.9:docs/P` as `docs/P` (the sets' version-folded variant)."""
    return re.sub(r"^content/v\d+\.\d+-docs/", "content/docs/", re.sub(r"^v[\d.]+:", "", path))


def retrieval_metrics(ranked_pages: list[list[str]], chunk_pages: list[list[str]], questions: list[dict]) -> dict:
    hit1 = hit5 = mrr = 0.0
    distinct = []
    per_kind: dict[str, list[float]] = defaultdict(list)
    for pages, chunks, q in zip(ranked_pages, chunk_pages, questions, strict=True):
        relevant = set(q["relevant"])
        unique = list(dict.fromkeys(pages))
        h1 = float(bool(unique[:1]) and unique[0] in relevant)
        hit1 += h1
        hit5 += float(any(p in relevant for p in unique[:5]))
        rank = next((i + 1 for i, p in enumerate(unique[:10]) if p in relevant), None)
        mrr += 1 / rank if rank else 0.0
        distinct.append(len(set(chunks[:10])))
        per_kind[q["kind"]].append(h1)
    n = len(questions)
    return {
        "hit@1": round(hit1 / n, 3),
        "hit@5": round(hit5 / n, 3),
        "MRR@10": round(mrr / n, 3),
        "distinctPagesTop10": round(statistics.fmean(distinct), 2),
        "hit@1ByKind": {k: round(statistics.fmean(v), 2) for k, v in sorted(per_kind.items())},
    }


def holds_every_fact(answer: str, facts: list[list[str]]) -> bool:
    text = answer.casefold()
    return all(any(alt.casefold() in text for alt in fact) for fact in facts)


def chunk_sizes(repo: Path, include_root: str) -> dict[str, Any]:
    """The chunk-size distribution of the corpus, chunked by the service's own chunker and settings."""
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.settings import Settings

    settings = Settings()
    chunker = MarkdownChunker(*settings.chunk_range, settings.chunking.chunk_overlap_chars)
    sizes = [
        len(chunk.text)
        for path in sorted((repo / include_root).rglob("*.md"))
        for chunk in chunker.chunk(path.read_text(encoding="utf-8")).chunks
    ]
    ordered = sorted(sizes)
    return {
        "chunks": len(sizes),
        "p10": ordered[len(ordered) // 10],
        "median": ordered[len(ordered) // 2],
        "under100": sum(s < 100 for s in sizes),
        "shareUnder100": round(sum(s < 100 for s in sizes) / len(sizes), 4),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("docsqa", __doc__, "ignored (run_all passes it to every benchmark); no SciFact needed")
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="the argocd-docs folder (questions + bundle)")
    parser.add_argument("--versioned", action="store_true", help="three versions of every page, Hugo layout")
    parser.add_argument("--modes", nargs="+", default=["hybrid", "dense", "keyword"])
    parser.add_argument("--no-ask", action="store_true", help="retrieval only")
    parser.add_argument("--backend", default=None, help="local embedder backend (default: the service's)")
    parser.add_argument("--show", type=int, default=0, help="print the first N questions' top pages")
    parser.add_argument("--misses", action="store_true", help="print each answer missing a fact")
    parser.add_argument("--keep", type=Path, default=None, help="keep the service's data directory here")
    parser.add_argument(
        "--include", default=None, help="the sync's include glob (default docs/**/*.md; cert-manager: content/**/*.md)"
    )
    args = parser.parse_args(argv)

    from bench.common import local_embedder
    from kbsearch.settings import Settings

    questions = [json.loads(line) for line in (args.eval / "questions.jsonl").read_text().splitlines() if line]
    work = Path(tempfile.mkdtemp(prefix="docsqa-"))
    try:
        repo = clone_corpus(args.eval, work)
        include = "docs/**/*.md"
        if args.versioned:
            repo = make_versioned(repo, work)
            include = "content/docs/**/*.md"
        elif not (repo / "docs").is_dir() and (repo / "content").is_dir():
            include = "content/**/*.md"  # cert-manager's site: content/docs/ and content/vX.Y-docs/ copies
        include = args.include or include
        inner = local_embedder(args.backend)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        cache = DiskVectorCache(inner, CACHE_DIR / f"docsqa-vectors-{model_tag(inner.model)}{inner.backend}.npz")
        data_dir = args.keep or work / "data"
        settings = Settings(data_dir=data_dir, onnx_dir=CACHE_DIR / "onnx", query_log="off")
        with run_service(settings, embedder=cache.provider) as svc:
            from kboperator.cli import main as knowledge_sync

            started = time.perf_counter()
            code = knowledge_sync(
                [
                    "--repo",
                    str(repo),
                    "--ref",
                    "main",
                    "--source-id",
                    SOURCE,
                    "--service",
                    svc.base_url,
                    "--include",
                    include,
                    "--cache-dir",
                    str(work / "git-cache"),
                ]
            )
            sync_s = time.perf_counter() - started
            cache.save()
            if code != 0:
                raise SystemExit(f"knowledge-sync exited {code}")
            result: dict[str, Any] = {"set": args.eval.name, "versioned": args.versioned}
            result["syncSeconds"] = round(sync_s, 1)
            result["chunkSizes"] = chunk_sizes(repo, include.split("/")[0])
            with http_client(svc.base_url) as client:
                for mode in args.modes:
                    result[mode] = _retrieval(client, questions, mode, args)
                if not args.no_ask:
                    result["ask"] = _answers(client, questions, show_misses=args.misses)
        result["load"] = load_text()
        _print(result, args.modes)
        write_result(_result_name(args), result)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _result_name(args: argparse.Namespace) -> str:
    """docsqa[-versioned] for the Argo CD set (run_all's), docsqa-<set> for another."""
    name = "docsqa-versioned" if args.versioned else "docsqa"
    return name if args.eval.resolve() == DEFAULT_EVAL.resolve() else f"{name}-{args.eval.name}"


def _retrieval(client: Any, questions: list[dict], mode: str, args: argparse.Namespace) -> dict[str, Any]:
    ranked, chunks = [], []
    top_relevance: dict[str, list[float]] = {"relevantFirst": [], "otherFirst": [], "offTopic": []}
    for i, q in enumerate(questions):
        body = client.post("/api/v1/search", json={"query": q["question"], "limit": 10, "mode": mode})
        hits = body.raise_for_status().json()["results"]
        pages = [page_of(h, args.versioned) for h in hits]
        ranked.append(pages)
        chunks.append(pages)
        if hits:
            first = "relevantFirst" if pages[0] in q["relevant"] else "otherFirst"
            top_relevance[first].append(hits[0].get("relevance", 0.0))
        if i < args.show:
            print(f"{q['id']} {q['relevant'][0]} <- {pages[:5]}")
    for question in OFF_TOPIC:
        hits = client.post("/api/v1/search", json={"query": question, "limit": 10, "mode": mode}).json()["results"]
        top_relevance["offTopic"].append(hits[0].get("relevance", 0.0) if hits else 0.0)
    metrics = retrieval_metrics(ranked, chunks, questions)
    folded = [[fold_version(p) for p in pages] for pages in ranked]  # every copy of a page counts as the page
    metrics["versionFolded"] = retrieval_metrics(folded, folded, questions)
    metrics["topRelevance"] = {
        k: {"n": len(v), "p10": _pct(v, 10), "median": _pct(v, 50), "p90": _pct(v, 90)}
        for k, v in top_relevance.items()
    }
    return metrics


def _pct(values: list[float], q: int) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, len(ordered) * q // 100)], 3) if ordered else None


def _answers(client: Any, questions: list[dict], *, show_misses: bool = False) -> dict[str, Any]:
    held, grounded, relevant_cited = 0, 0, 0
    by_kind: dict[str, list[bool]] = defaultdict(list)
    for q in questions:
        answer = client.post("/api/v1/ask", json={"question": q["question"]}).raise_for_status().json()
        ok = holds_every_fact(answer["answer"], q["answer_facts"])
        held += ok
        by_kind[q["kind"]].append(ok)
        grounded += answer["grounded"]
        relevant_cited += any(_path(c) in q["relevant"] for c in answer["citations"])
        if show_misses and not ok:
            cited = list(dict.fromkeys(_path(c) for c in answer["citations"]))
            print(f"--- {q['id']} {q['question']}\n facts {q['answer_facts']}; judged {q['relevant']}; cited {cited}")
            print("   " + answer["answer"][:1200].replace("\n", "\n   "))
    off_grounded = 0
    for question in OFF_TOPIC:
        answer = client.post("/api/v1/ask", json={"question": question}).raise_for_status().json()
        off_grounded += answer["grounded"]
    n = len(questions)
    return {
        "factsHeld": round(held / n, 3),
        "factsHeldCount": held,
        "grounded": grounded,
        "citesARelevantPage": relevant_cited,
        "offTopicGrounded": f"{off_grounded} of {len(OFF_TOPIC)}",
        "factsHeldByKind": {k: round(statistics.fmean(v), 2) for k, v in sorted(by_kind.items())},
    }


def _path(citation: dict[str, Any]) -> str:
    """The judged page a citation points at (the URI holds the clone's path, then the page's)."""
    match = re.search(r"argocd-(?:docs|versioned)/(.+\.md)", citation["uri"])
    if not match:
        return citation["uri"]
    versioned = re.match(r"content/docs/([^/]+)/(.*)", match.group(1))
    if versioned is None:
        return match.group(1)
    return f"docs/{versioned.group(2)}" if versioned.group(1) == VERSIONS[-1] else match.group(1)


def _print(result: dict[str, Any], modes: list[str]) -> None:
    print(f"docs QA {result['set']} ({'versioned' if result['versioned'] else 'single-version'}), {result['load']}")
    rows = [
        [f"{m} ({variant})", f["hit@1"], f["hit@5"], f["MRR@10"], f["distinctPagesTop10"]]
        for variant, key in (("strict", None), ("version-folded", "versionFolded"))
        for m in modes
        for f in [result[m] if key is None else result[m][key]]
    ]
    print_table(["mode", "hit@1", "hit@5", "MRR@10", "distinct/10"], rows)
    print("chunks:", result["chunkSizes"])
    for m in modes:
        print(f"{m} hit@1 by kind:", result[m]["hit@1ByKind"])
        print(f"{m} top relevance:", result[m]["topRelevance"])
    if "ask" in result:
        print("ask:", {k: v for k, v in result["ask"].items() if k != "factsHeldByKind"})


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary."""
    hybrid, ask = result["hybrid"], result.get("ask", {})
    figure = (
        f"{result.get('set', 'argocd-docs')}, hybrid hit@1 {hybrid['hit@1']} hit@5 {hybrid['hit@5']} "
        f"MRR@10 {hybrid['MRR@10']}, "
        f"{hybrid['distinctPagesTop10']} distinct pages in the top 10; ask holds every fact "
        f"{ask.get('factsHeld')}, off-topic grounded {ask.get('offTopicGrounded')}"
    )
    met = hybrid["hit@1"] >= 0.85 and hybrid["hit@5"] >= 0.95 and hybrid["MRR@10"] >= 0.90
    met = met and hybrid["distinctPagesTop10"] >= 6 and ask.get("factsHeld", 0) >= 0.60
    return figure, "hit@1 >= 0.85, hit@5 >= 0.95, MRR@10 >= 0.90; facts >= 0.60", verdict(met)


if __name__ == "__main__":
    main()
