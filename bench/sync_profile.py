"""Where a full sync's time goes, against the raw embedder measured in the same run.

The operator's `SyncEngine` syncs a repository into the real service (uvicorn on 127.0.0.1, MiniLM,
Qdrant Edge in a temp dir, an empty embed cache), as `bench.sync` does, while the service's write
path is timed phase by phase from outside (the bench wraps the methods; the product is unchanged):

- conversion (`DocumentPreparer._convert`), chunking (`DocumentWork.chunk`), the lookup of stored
  vectors by text hash (`vectors_by_text_hash`), embedding as a write waits for it
  (`EmbeddingBatcher.embed`: turns and queueing included), the model's own calls (the raw
  embedder's `embed_documents`, with the texts it was given), BM25 (`encode_chunks`) and the store
  writes of a prepared document (`DocumentService._write`);
- for each: calls, the sum of durations (concurrent requests overlap) and the wall time during which
  at least one call was running ("busy");
- chunks: every chunk of every PUT, the distinct embedded texts among them (by SHA-256 of the text
  embedded), and how many the model actually embedded: the rest were reused (stored vector, a vector
  another request was computing, or the embed cache);
- the raw embedder's chunks/s on a sample of the repository's own distinct texts, before and after
  the sync, so the sync is judged as a ratio: wall / (distinct texts / raw chunks/s).

Repositories: `argocd` is the Argo CD dev set's 455 pages in `--versions` copies
(`content/docs/<v>/`, each older copy with one more small edit per page, as `bench.docsqa
--versioned` builds three); `generated` is `bench.sync`'s repository of `--files` SciFact digests.

    python -m bench.sync_profile --repo argocd --eval ../shared/eval/argocd-docs [--versions 6]
    python -m bench.sync_profile --repo generated --scifact ../shared/eval/scifact-train [--files 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import load_scifact, load_text, local_embedder, print_table, run_service, service_cache, write_result
from bench.docsqa import _small_edit
from bench.sync import SOURCE_ID, TimingTransport, make_repo, run_sync
from tests.support.git import git

NAME = "sync_profile"
TARGET_RATIO = 1.5  # the bound: wall within 1.5x of distinct texts / raw chunks/s
RAW_SAMPLE = 256  # texts the raw embedder is timed on, before and after the sync


class Phases:
    """Intervals per phase, from any thread: sums and the union of each phase's intervals."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self.items: dict[str, int] = {}

    def add(self, name: str, start: float, end: float, items: int = 0) -> None:
        with self.lock:
            self.spans.setdefault(name, []).append((start, end))
            self.items[name] = self.items.get(name, 0) + items

    def reset(self) -> None:
        with self.lock:
            self.spans.clear()
            self.items.clear()

    def summary(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {
                name: {
                    "calls": len(spans),
                    "sumSeconds": round(sum(b - a for a, b in spans), 3),
                    "busySeconds": round(_union(spans), 3),
                    "items": self.items.get(name, 0),
                }
                for name, spans in self.spans.items()
            }


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@contextlib.contextmanager
def patched(obj: Any, name: str, wrapper: Callable[[Any], Any]) -> Iterator[None]:
    original = getattr(obj, name)
    setattr(obj, name, wrapper(original))
    try:
        yield
    finally:
        setattr(obj, name, original)


def timed_async(phases: Phases, phase: str, count: Callable[..., int] | None = None):
    def wrap(fn):
        @functools.wraps(fn)
        async def inner(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                phases.add(phase, t0, time.perf_counter(), count(*args, **kwargs) if count else 0)

        return inner

    return wrap


def timed_sync(phases: Phases, phase: str, count: Callable[..., int] | None = None):
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases.add(phase, t0, time.perf_counter(), count(*args, **kwargs) if count else 0)

        return inner

    return wrap


@contextlib.contextmanager
def instrumented(phases: Phases, raw_embedder: Any, texts: dict[str, int]) -> Iterator[None]:
    """The write path's phases timed; `texts` counts every chunk text a PUT prepared, by hash."""
    from kbsearch.services.documents.batching import EmbeddingBatcher
    from kbsearch.services.documents.budget import DocumentWork
    from kbsearch.services.documents.prep import DocumentPreparer
    from kbsearch.services.documents.service import DocumentService
    from kbsearch.store.bm25 import Bm25Encoder
    from kbsearch.store.points import PointStore

    def note_chunks(self, parsed, hashes, *args, **kwargs) -> int:
        with phases.lock:
            for h in hashes:
                texts[h] = texts.get(h, 0) + 1
        return len(hashes)

    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(DocumentPreparer, "_convert", timed_async(phases, "conversion")))
        stack.enter_context(patched(DocumentWork, "chunk", timed_async(phases, "chunking")))
        stack.enter_context(
            patched(DocumentPreparer, "_dense_vectors", timed_async(phases, "vectors (lookup + embed)", note_chunks))
        )
        stack.enter_context(
            patched(
                PointStore,
                "vectors_by_text_hash",
                timed_sync(phases, "stored-vector lookup", lambda self, hashes, *a: len(hashes)),
            )
        )
        stack.enter_context(
            patched(EmbeddingBatcher, "embed", timed_async(phases, "embedding, as waited for", lambda s, t, *a: len(t)))
        )
        stack.enter_context(
            patched(raw_embedder, "embed_documents", timed_sync(phases, "model calls", lambda t: len(t)))
        )
        stack.enter_context(patched(Bm25Encoder, "encode_chunks", timed_sync(phases, "BM25", lambda s, t: len(t))))
        stack.enter_context(patched(DocumentService, "_write", timed_async(phases, "store writes")))
        stack.enter_context(patched(DocumentService, "put", timed_async(phases, "PUT in the service")))
        yield


def raw_chunks_per_second(embedder: Any, texts: list[str]) -> float:
    embedder.embed_documents(texts[:16])  # warm
    t0 = time.perf_counter()
    embedder.embed_documents(texts)
    return len(texts) / (time.perf_counter() - t0)


def make_versioned_argocd(
    eval_dir: Path, into: Path, versions: int, pages: int | None = None, seed: int = 5
) -> dict[str, Any]:
    """`versions` copies of each page (the first `pages`) under content/docs/v<n>/; the k-th oldest, k small edits."""
    single = into / "argocd-docs"
    subprocess.run(["git", "clone", "-q", str(eval_dir / "corpus.bundle"), str(single)], check=True)
    repo = into / "argocd-versioned"
    rng = random.Random(seed)
    names = [f"v2.{n}" for n in range(versions)]
    distinct: set[str] = set()
    count = size = 0
    for path in sorted((single / "docs").rglob("*.md"))[:pages]:
        rel = path.relative_to(single / "docs")
        text = path.read_text(encoding="utf-8")
        edited = text
        for version in reversed(names):  # the newest as it is, each older one edited once more
            target = repo / "content" / "docs" / version / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(edited, encoding="utf-8")
            distinct.add(hashlib.sha256(edited.encode()).hexdigest())
            count, size = count + 1, size + len(edited.encode())
            edited = _small_edit(edited, rng)
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "versions")
    return {
        "path": repo,
        "files": count,
        "bytes": size,
        "distinctFiles": len(distinct),
        "versions": names,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", choices=["argocd", "generated"], default="argocd")
    parser.add_argument("--eval", type=Path, default=Path("../shared/eval/argocd-docs"))
    parser.add_argument("--versions", type=int, default=6)
    parser.add_argument("--pages", type=int, default=None, help="argocd: only the first N pages (default all 455)")
    parser.add_argument(
        "--layout",
        choices=["one-source", "source-per-version"],
        default="one-source",
        help="argocd: one source for the tree, or one source per version folder (a team's sources), synced in turn",
    )
    parser.add_argument(
        "--reuse",
        choices=["readable", "source", "off"],
        default=None,
        help="SEARCHSVC_VECTOR_REUSE (default: its default)",
    )
    parser.add_argument("--scifact", default="../shared/eval/scifact-train")
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--label", default="", help="a tag for the result file (before/after)")
    args = parser.parse_args(argv)

    from kboperator.git.repo import RepoCache
    from kboperator.models import RepoSpec, SyncSpec
    from kboperator.searchclient import SearchClient
    from kboperator.sync.engine import SyncEngine
    from kbsearch.deps import context_of
    from kbsearch.settings import Settings

    raw = local_embedder()
    phases = Phases()
    texts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-syncprof-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        if args.repo == "argocd":
            shape = make_versioned_argocd(args.eval, tmp, args.versions, args.pages)
        else:
            repo = tmp / "repo"
            shape = {"path": repo, **make_repo(repo, load_scifact(args.scifact), args.files)}
        repo_path = shape.pop("path")
        print(f"[sync_profile] {args.repo}: {shape} in {time.perf_counter() - t0:.1f} s ({load_text()})", flush=True)
        reuse = {"vector_reuse": args.reuse} if args.reuse else {}
        settings = Settings(data_dir=tmp / "data", collection="bench", api_token=None, read_token=None, **reuse)
        cache = service_cache(raw, settings.embedding.embed_cache_size)

        def specs() -> list[SyncSpec]:
            repo_spec = RepoSpec(url=str(repo_path), ref="main")
            if args.layout == "one-source" or args.repo != "argocd":
                return [SyncSpec(source_id=SOURCE_ID, repo=repo_spec, allow_local=True)]
            return [  # one team's sources, one per version, as separate KnowledgeSources would be
                SyncSpec(
                    source_id=f"{SOURCE_ID}-{v}",
                    repo=repo_spec,
                    include=(f"content/docs/{v}/**/*.md",),
                    allow_local=True,
                )
                for v in shape["versions"]
            ]

        with run_service(settings, embedder=cache) as svc, instrumented(phases, raw, texts):

            async def scenario() -> dict[str, Any]:
                transport = TimingTransport()
                runs = []
                async with SearchClient(svc.base_url, transport=transport) as client:
                    engine = SyncEngine(client, RepoCache(tmp / "git-cache"), concurrency=args.concurrency)
                    for one in specs():  # in turn: each source's sync reuses what the ones before stored
                        label = f"full sync of {one.source_id}"
                        runs.append(await run_sync(engine, one, None, svc, transport, label))
                keys = ("seconds", "serviceBusySeconds", "outsideServiceSeconds", "puts", "failed")
                total = {k: round(sum(r[k] for r in runs), 3) for k in keys}
                per_put = [r["httpOverheadPerPutMs"] * r["puts"] for r in runs if r["httpOverheadPerPutMs"] is not None]
                total["httpOverheadPerPutMs"] = round(sum(per_put) / max(1, total["puts"]), 3)
                return total

            sample_source = _sample_texts(context_of(svc.app).serving.chunker, repo_path)
            phases.reset()
            raw_before = raw_chunks_per_second(raw, sample_source)
            phases.reset()
            load_before = load_text()
            full = asyncio.run(scenario())
            load_after = load_text()
            profile = phases.summary()
            phases.reset()
        raw_after = raw_chunks_per_second(raw, sample_source)

    raw_cps = (raw_before + raw_after) / 2
    chunks = sum(texts.values())
    distinct = len(texts)
    embedded = profile.get("model calls", {}).get("items", 0)
    ideal = distinct / raw_cps
    result = {
        "repo": args.repo,
        "label": args.label,
        "layout": args.layout,
        "vectorReuse": settings.documents.vector_reuse,
        "shape": shape,
        "concurrency": args.concurrency,
        "loadBefore": load_before,
        "loadAfter": load_after,
        "rawChunksPerSecond": {"before": round(raw_before, 1), "after": round(raw_after, 1)},
        "wallSeconds": full["seconds"],
        "serviceBusySeconds": full["serviceBusySeconds"],
        "outsideServiceSeconds": full["outsideServiceSeconds"],
        "httpOverheadPerPutMs": full["httpOverheadPerPutMs"],
        "puts": full["puts"],
        "failed": full["failed"],
        "chunks": chunks,
        "distinctTexts": distinct,
        "embedded": embedded,
        "reused": chunks - embedded,
        "reusedShare": round((chunks - embedded) / chunks, 4) if chunks else None,
        "idealSeconds": round(ideal, 1),
        "ratioToIdeal": round(full["seconds"] / ideal, 2),
        "phases": profile,
    }
    write_result(f"{NAME}-{args.repo}-{args.layout}{'-' + args.label if args.label else ''}", result)
    print(
        f"\n{args.repo} ({args.layout}, reuse {settings.documents.vector_reuse}) {shape}: "
        f"wall {full['seconds']:.1f} s; {chunks} chunks, {distinct} distinct texts, "
        f"{embedded} embedded ({result['reusedShare']:.1%} reused); raw {raw_before:.1f}/{raw_after:.1f} chunks/s "
        f"-> ideal {ideal:.1f} s, ratio {result['ratioToIdeal']} (target <= {TARGET_RATIO}); "
        f"load {load_before} / {load_after}"
    )
    wall = full["seconds"]
    print_table(
        ["phase", "calls", "items", "sum s", "busy s", "busy % of wall"],
        [
            [name, p["calls"], p["items"], p["sumSeconds"], p["busySeconds"], round(100 * p["busySeconds"] / wall, 1)]
            for name, p in profile.items()
        ]
        + [["outside the service (git, client)", "-", "-", "-", full["outsideServiceSeconds"], "-"]],
    )
    return result


def _sample_texts(chunker: Any, repo: Path) -> list[str]:
    """RAW_SAMPLE chunk texts of the repository as the service embeds them (the service's own chunker)."""
    files = sorted(repo.rglob("*.md"))
    out: list[str] = []
    for path in random.Random(3).sample(files, min(len(files), 400)):
        out += [c.embed_text for c in chunker.chunk(path.read_text(encoding="utf-8"), name=str(path)).chunks]
        if len(out) >= RAW_SAMPLE:
            break
    return out[:RAW_SAMPLE]


if __name__ == "__main__":
    main()
