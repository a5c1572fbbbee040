"""Fifty sources on one repository and branch: what one push costs on the git server.

A monorepo of --sources team folders (--files-per-source markdown files each) is served by git's
own `http-backend` (tests/support/githttp.py, which counts each `ls-refs` and `fetch` request).
Each team's source (`team<N>/**/*.md`) is synced by the operator's sync engine into the real
search service (the tests' hashing embedder: git's cost, not the model's), four at a time as the
operator's sync slots allow. Then one push edits a file in every folder and every source syncs
again. Two modes: `shared` (one RepoCache: sources of one URL, ref and credentials share a clone)
and `per-source` (a RepoCache per source: one clone each, as before the clones were shared).
Reported per mode: git requests and wall time of the first sync and of the push's sync, and the
clone cache's disk use. Then a round with no push (the no-op check).

    python -m bench.shared_fetch [--sources 50] [--files-per-source 20]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import load_average, load_text, parser, print_table, run_service, verdict, write_result
from tests.support.git import git

NAME = "shared_fetch"


def make_repo(work: Path, bare: Path, sources: int, files: int) -> None:
    work.mkdir(parents=True)
    git(work, "init", "--quiet", "--initial-branch=main")
    for team in range(sources):
        for n in range(files):
            page = work / f"team{team:02d}/page{n:03d}.md"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(f"# Team {team} page {n}\n\n{'words ' * 80}\n", encoding="utf-8")
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "-m", "every team's docs")
    git(bare.parent, "init", "--quiet", "--bare", bare.name)
    git(work, "remote", "add", "origin", str(bare))
    git(work, "push", "--quiet", "origin", "main")


def push_everywhere(work: Path, sources: int, round_: int) -> None:
    for team in range(sources):
        page = work / f"team{team:02d}/page000.md"
        page.write_text(page.read_text(encoding="utf-8") + f"\nEdit {round_}.\n", encoding="utf-8")
    git(work, "commit", "--quiet", "-am", f"edit {round_}")
    git(work, "push", "--quiet", "origin", "main")


def disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def run_mode(
    shared: bool, url: str, service_url: str, cache: Path, sources: int, served: Any, work: Path
) -> dict[str, Any]:
    from kboperator.git.repo import RepoCache
    from kboperator.models import RepoSpec, SyncResult, SyncSpec
    from kboperator.searchclient import SearchClient
    from kboperator.sync.engine import SyncEngine
    from kboperator.sync.prepared import prepare

    specs = [
        SyncSpec(source_id=f"team{t:02d}/docs", repo=RepoSpec(url), include=(f"team{t:02d}/**/*.md",))
        for t in range(sources)
    ]
    slots = asyncio.Semaphore(4)  # the operator's default KBOPERATOR_MAX_CONCURRENT_SYNCS
    async with SearchClient(service_url) as client:
        one_cache = RepoCache(cache)
        engines = [SyncEngine(client, one_cache if shared else RepoCache(cache / str(t))) for t in range(sources)]

        async def sync_all(last: list[SyncResult] | None) -> tuple[list[SyncResult], dict[str, Any]]:
            async def one(t: int) -> SyncResult:
                async with slots:
                    if last is None:
                        return await engines[t].sync(prepare(specs[t]), None)
                    return await engines[t].sync(prepare(specs[t]), last[t].commit, baseline=last[t].baseline)

            served.clear()
            t0 = time.perf_counter()
            results = await asyncio.gather(*(one(t) for t in range(sources)))
            seconds = time.perf_counter() - t0
            assert all(r.ok for r in results), [r.failed for r in results if not r.ok][:1]
            wire = {"lsRefs": served.count("ls-refs"), "fetch": served.count("fetch"), "requests": len(served.requests)}
            return results, {"seconds": round(seconds, 2), **wire, "load": load_text()}

        first, first_figures = await sync_all(None)
        await asyncio.to_thread(push_everywhere, work, sources, 1)
        pushed, push_figures = await sync_all(first)
        assert all(r.fetched and not r.full for r in pushed)
        _, noop_figures = await sync_all(pushed)
    return {"firstSync": first_figures, "push": push_figures, "noop": noop_figures, "cacheBytes": disk(cache)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args_parser = parser(NAME, __doc__, scifact=None)
    args_parser.add_argument("--sources", type=int, default=50, help="sources, one team folder each (default 50)")
    args_parser.add_argument("--files-per-source", type=int, default=20, help="markdown files per folder (default 20)")
    args = args_parser.parse_args(argv)
    from kbsearch.settings import Settings
    from tests.support.githttp import GitHttpServer
    from tests.support.hashing import HashingEmbedder

    with tempfile.TemporaryDirectory(prefix="bench-shared-fetch-") as tmp_name:
        tmp = Path(tmp_name)
        runs: dict[str, Any] = {}
        for mode in ("shared", "per-source"):  # a repository and a service each: the same start
            (tmp / mode / "served").mkdir(parents=True)
            work = tmp / mode / "work"
            make_repo(work, tmp / mode / "served" / "mono.git", args.sources, args.files_per_source)
            data = Settings(data_dir=tmp / mode / "data", collection="bench", api_token=None, read_token=None)
            with GitHttpServer(tmp / mode / "served") as served, run_service(data, embedder=HashingEmbedder()) as svc:
                runs[mode] = asyncio.run(
                    run_mode(mode == "shared", served.url("mono.git"), svc.base_url, tmp / mode / "cache",
                             args.sources, served, work)
                )  # fmt: skip
            print(f"  {mode}: {runs[mode]}", flush=True)
    result = {
        "sources": args.sources,
        "filesPerSource": args.files_per_source,
        "runs": runs,
        "target": "one git fetch per push for all sources of one repository, ref and credentials",
        "load": load_average(),
        "embedder": "hashing (the tests'): git's cost, not the model's",
    }
    write_result(NAME, result)
    print_table(
        ["mode", "step", "git fetch", "ls-refs", "HTTP requests", "seconds", "load"],
        [[mode, step, r[step]["fetch"], r[step]["lsRefs"], r[step]["requests"], r[step]["seconds"], r[step]["load"]]
         for mode, r in runs.items() for step in ("firstSync", "push", "noop")],
    )  # fmt: skip
    return result


def headline(result: dict[str, Any]) -> tuple[str, str, str]:
    shared, alone = result["runs"]["shared"]["push"], result["runs"]["per-source"]["push"]
    figure = (
        f"{result['sources']} sources, one push: {shared['fetch']} git fetch, {shared['lsRefs']} ls-refs "
        f"({alone['fetch']} and {alone['lsRefs']} with a clone per source)"
    )
    return figure, "1 fetch per push", verdict(shared["fetch"] == 1)


if __name__ == "__main__":
    main()
