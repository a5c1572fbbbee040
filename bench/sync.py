"""The operator's sync benchmark: full first sync vs incremental sync after a 1-file edit.

A git repository of --files markdown files (default 2,000, about 10 MB) is generated from SciFact
abstracts with a history of commits (adds, modifications, renames, deletions). The operator's
`SyncEngine` (the engine behind both the kopf handlers and `knowledge-sync`) syncs it into the
real search service (uvicorn on 127.0.0.1, bundled MiniLM, Qdrant Edge in a temp dir, default
settings: a fresh app with an empty embed cache), then a 1-line edit to one file is committed
and synced incrementally, then a sync with no new commit.

Overhead figures:
- service busy time: the union of the intervals during which some request was inside the app
  (measured around the ASGI app), so time outside it is git, file reading, the client and HTTP;
- HTTP: client-observed request time minus the app's own time, per request;
- git alone: fetch into an empty cache + list + read every matching blob, without the service.

    python -m bench.sync --scifact ../shared/eval/scifact-train [--files 2000]
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
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
from bench.corpus import markdown_documents
from tests.support.git import git

NAME = "sync"
# The first sync of the full-size repository (2,000 files, ~10 MB) should take at most 8 minutes.
FULL_SYNC_TARGET_S = 480.0
SOURCE_ID = "bench/sync"


# --- the repository -------------------------------------------------------------------------


def make_repo(repo: Path, data, files: int, per_file: int = 3) -> dict[str, Any]:
    """`files` markdown files at head after five commits: add 60%, add the rest (+10 extra),
    modify 50, rename 20 (fewer for tiny repositories), delete the 10 extra."""
    rng = random.Random(5)
    docs = list(markdown_documents(data, files + 10, per_doc=per_file, seed=13))
    paths = [f"docs/area-{n % 20:02d}/topic-{(n // 20) % 10}/{name}" for n, (name, _) in enumerate(docs)]
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "config", "commit.gpgsign", "false")

    def write(path: str, text: str) -> None:
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    first = int(files * 0.6)
    for path, (_, text) in zip(paths[:first], docs[:first], strict=True):
        write(path, text)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "Add the first documents")
    for path, (_, text) in zip(paths[first:], docs[first:], strict=True):
        write(path, text)
    (repo / "README.txt").write_text("Generated benchmark repository (not markdown: outside the globs).\n")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "Add the remaining documents")
    for path in rng.sample(paths[:files], min(50, files // 4)):
        with open(repo / path, "a", encoding="utf-8") as fh:
            fh.write("\n## Revision note\n\nUpdated after review.\n")
    git(repo, "commit", "--quiet", "-am", "Revise documents")
    renamed = rng.sample(paths[:files], min(20, files // 10))
    for path in renamed:
        git(repo, "mv", path, path.replace(".md", "-renamed.md"))
    git(repo, "commit", "--quiet", "-m", "Rename documents")
    git(repo, "rm", "--quiet", *paths[files:])
    git(repo, "commit", "--quiet", "-m", "Delete 10 documents")
    tracked = [p for p in git(repo, "ls-files").splitlines() if p.endswith(".md")]
    size = sum((repo / p).stat().st_size for p in tracked)
    return {"files": len(tracked), "bytes": size, "commits": int(git(repo, "rev-list", "--count", "HEAD").strip())}


def edit_one_file(repo: Path) -> str:
    tracked = sorted(p for p in git(repo, "ls-files").splitlines() if p.endswith(".md"))
    path = tracked[len(tracked) // 2]
    lines = (repo / path).read_text(encoding="utf-8").split("\n")
    i = next(
        i
        for i in range(len(lines) // 2, len(lines))
        if len(lines[i]) > 100 and not lines[i].startswith(("#", "-", "|"))
    )
    lines[i] = lines[i].replace(" ", " (revised) ", 1)
    (repo / path).write_text("\n".join(lines), encoding="utf-8")
    git(repo, "commit", "--quiet", "-am", f"Edit one line of {path}")
    return path


# --- timing helpers -----------------------------------------------------------------------------


class TimingTransport(httpx.AsyncBaseTransport):
    """Records each request's client-side time (send to body read), by method."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.times: list[tuple[str, float]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        self.times.append((request.method, (time.perf_counter() - started) * 1000))
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=body,
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    def take(self) -> list[tuple[str, float]]:
        out, self.times = self.times, []
        return out


async def run_sync(engine, spec, last_commit, svc, transport, label: str) -> dict[str, Any]:
    from kboperator.sync.prepared import prepare

    svc.times.take("PUT /api/v1/documents")
    transport.take()
    t0 = time.perf_counter()
    result = await engine.sync(prepare(spec), last_commit)
    t1 = time.perf_counter()
    wall = t1 - t0
    busy = svc.times.busy_seconds(t0, t1)
    put_server = svc.times.take("PUT /api/v1/documents")
    client = transport.take()
    put_client = [ms for method, ms in client if method == "PUT"]
    docs_sent = len(put_server)
    out = {
        "label": label,
        "full": result.full,
        "commit": result.commit,
        "seconds": round(wall, 3),
        "counts": {
            k: v
            for k, v in result.to_json().items()
            if k in ("added", "modified", "deleted", "renamed", "unchanged", "documents")
        },
        "skipped": len(result.skipped),
        "failed": len(result.failed),
        "requests": len(client),
        "puts": docs_sent,
        "serviceBusySeconds": round(busy, 3),
        "outsideServiceSeconds": round(wall - busy, 3),
        "putServerMs": summary_ms(put_server) if put_server else None,
        "putClientMs": summary_ms(put_client) if put_client else None,
        "httpOverheadPerPutMs": round((sum(put_client) - sum(put_server)) / docs_sent, 3) if docs_sent else None,
        "outsideServicePerDocumentMs": round((wall - busy) * 1000 / docs_sent, 3) if docs_sent else None,
        "serviceBusyPerDocumentMs": round(busy * 1000 / docs_sent, 3) if docs_sent else None,
        "load": load_average(),
    }
    if result.failed:
        out["failedFiles"] = [f.to_json() for f in result.failed[:10]]
    return out


def git_alone(repo: Path, spec_factory, cache_root: Path) -> dict[str, Any]:
    """The engine's git work without the service: fetch into an empty cache, list, read every matching blob."""
    from kboperator.git.repo import RepoCache
    from kboperator.sync.documents import DocumentReader
    from kboperator.sync.prepared import prepare

    prepared = prepare(spec_factory())
    spec = prepared.spec
    t0 = time.perf_counter()
    checkout = RepoCache(cache_root).open(spec.source_id, prepared.repo)
    t1 = time.perf_counter()
    try:
        reader = DocumentReader(spec, checkout, prepared.filter, prepared.version)
        entries = [e for e in checkout.list_files() if reader.matches(e)]
        t2 = time.perf_counter()
        docs = [reader.read(e) for e in entries]
        t3 = time.perf_counter()
    finally:
        checkout.close()
    return {
        "fetchSeconds": round(t1 - t0, 3),
        "listSeconds": round(t2 - t1, 3),
        "readSeconds": round(t3 - t2, 3),
        "documents": len(docs),
        "perDocumentMs": round((t3 - t0) * 1000 / max(1, len(docs)), 3),
    }


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    """(figure, target, verdict) for run_all's summary. A reduced repository cannot meet the full-sync target."""
    full = result["runs"]["full"]["seconds"]
    figure = (
        f"{result['sizeNote']}: full {full:.1f} s, incremental "
        f"{result['runs']['incremental']['seconds']:.3f} s = {result['incrementalToFullRatio']:.4%}"
    )
    full_met = full <= FULL_SYNC_TARGET_S and "REDUCED" not in result["sizeNote"]
    target = f"incremental <= 1% of full; full <= {FULL_SYNC_TARGET_S:.0f} s at 2,000 files"
    return figure, target, verdict(result["target"]["met"] and full_met)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = common_parser("sync", __doc__, "SciFact train folder (BEIR layout): the source of the generated texts")
    parser.add_argument("--files", type=int, default=2000, help="markdown files at head (default 2000, ~10 MB)")
    parser.add_argument(
        "--abstracts-per-file", type=int, default=3, help="file size: 3 gives ~5 KB files, ~10 MB at 2000 files"
    )
    parser.add_argument(
        "--concurrency", type=int, default=4, help="SyncEngine concurrency (the operator's default is 4)"
    )
    parser.add_argument(
        "--backend", choices=["torch", "onnx", "onnx-int8"], help="local backend (default: the service's)"
    )
    args = parser.parse_args(argv)

    from kboperator.git.repo import RepoCache
    from kboperator.models import RepoSpec, SyncSpec
    from kboperator.searchclient import SearchClient
    from kboperator.sync.engine import SyncEngine
    from kbsearch.settings import Settings

    data = load_scifact(args.scifact)
    embedder = local_embedder(args.backend)
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        t0 = time.perf_counter()
        shape = make_repo(repo, data, args.files, args.abstracts_per_file)
        print(
            f"[sync] generated repository: {shape['files']} markdown files, {shape['bytes'] / 1e6:.1f} MB, "
            f"{shape['commits']} commits in {time.perf_counter() - t0:.1f} s ({load_text()})",
            flush=True,
        )

        def spec() -> SyncSpec:
            return SyncSpec(source_id=SOURCE_ID, repo=RepoSpec(url=str(repo), ref="main"), allow_local=True)

        settings = Settings(data_dir=tmp / "data", collection="bench", api_token=None, read_token=None)
        cache = service_cache(embedder, settings.embedding.embed_cache_size)  # as the service builds it; empty
        runs: dict[str, Any] = {}
        with run_service(settings, embedder=cache) as svc:

            async def scenario() -> None:
                transport = TimingTransport()
                async with SearchClient(svc.base_url, transport=transport) as client:
                    engine = SyncEngine(client, RepoCache(tmp / "git-cache"), concurrency=args.concurrency)
                    print(
                        f"  full first sync of {shape['files']} files (concurrency {args.concurrency}) ...", flush=True
                    )
                    full = runs["full"] = await run_sync(engine, spec(), None, svc, transport, "full first sync")
                    print(f"    {full['seconds']:.1f} s, {full['puts']} PUTs ({load_text()})", flush=True)
                    edited = edit_one_file(repo)
                    incr = runs["incremental"] = await run_sync(
                        engine, spec(), full["commit"], svc, transport, f"incremental, 1-line edit of {edited}"
                    )
                    print(f"    incremental: {incr['seconds']:.3f} s, {incr['puts']} PUT ({load_text()})", flush=True)
                    runs["noChange"] = await run_sync(
                        engine, spec(), incr["commit"], svc, transport, "incremental, no new commit"
                    )

            asyncio.run(scenario())
            with httpx.Client(base_url=svc.base_url) as http:
                listed = http.get("/api/v1/sources").json()["sources"]
        git_full = git_alone(repo, spec, tmp / "git-alone")

    full, incr = runs["full"], runs["incremental"]
    ratio = incr["seconds"] / full["seconds"]
    result = {
        "repository": shape,
        "sizeNote": f"{shape['files']} files, {shape['bytes'] / 1e6:.1f} MB"
        + (
            ""
            if args.files >= 2000 and shape["bytes"] >= 9_000_000
            else " (REDUCED: the issue's size is >= 2000 files, ~10 MB)"
        ),
        "engine": "kboperator.sync.engine.SyncEngine (as used by knowledge-sync)",
        "backend": getattr(embedder, "backend", None) or "torch",
        "concurrency": args.concurrency,
        "service": (
            "real kbsearch app over HTTP on 127.0.0.1, local MiniLM, Qdrant Edge, fresh app and empty embed cache"
        ),
        "runs": runs,
        "gitAlone": git_full,
        "sourcesAfter": listed,
        "incrementalToFullRatio": round(ratio, 5),
        "target": {"ratioMax": 0.01, "met": ratio <= 0.01},
    }
    path = write_result(NAME, result)
    print(f"\n[sync] {result['sizeNote']}, backend {result['backend']}, {shape['commits']} commits ({load_text()})")
    print_table(
        ["sync", "seconds", "PUTs", "service busy s", "outside service s", "outside/doc ms", "HTTP/PUT ms"],
        [
            [
                r["label"][:48],
                r["seconds"],
                r["puts"],
                r["serviceBusySeconds"],
                r["outsideServiceSeconds"],
                r["outsideServicePerDocumentMs"] if r["outsideServicePerDocumentMs"] is not None else "-",
                r["httpOverheadPerPutMs"] if r["httpOverheadPerPutMs"] is not None else "-",
            ]
            for r in runs.values()
        ],
    )
    print(f"  incremental / full = {ratio:.4%} (target <= 1%: {'met' if ratio <= 0.01 else 'NOT met'})")
    print(
        f"  git alone (fetch+list+read {git_full['documents']} docs): {git_full['perDocumentMs']} ms/doc; "
        f"service PUT p50 {full['putServerMs']['p50'] if full['putServerMs'] else '-'} ms (server side)"
    )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
