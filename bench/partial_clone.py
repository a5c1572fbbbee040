"""A big monorepo whose documents are a small folder: full clones against partial clones.

A repository of --files files (default 100,000: source files of ~1 KB, plus --docs markdown
files under docs/) is generated with `git fast-import` and served by git's own `http-backend`
(tests/support/githttp.py, `uploadpack.allowFilter` on). For each mode (full, then partial:
`--filter=blob:none` plus the selected blobs), the operator's sync engine (as in
`knowledge-sync`) syncs `docs/**/*.md` into the real search service (the tests' hashing
embedder, so that the figures are git's, not the model's): first sync (clone), then one commit
that edits one document and 100 source files (fetch + incremental sync). Reported: times, the
cache's disk use after each step, and what went over the wire.

    python -m bench.partial_clone [--files 100000] [--docs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import load_average, load_text, print_table, run_service, write_result
from tests.support.git import git

NAME = "partial_clone"


def commit(mark: int, paths: dict[str, bytes], parent: bool) -> bytes:
    """A fast-import stream of one commit on main."""
    out = [b"commit refs/heads/main\n", f"mark :{mark}\n".encode()]
    out.append(b"committer bench <bench@example.invalid> 1764000000 +0000\ndata 4\nbump\n")
    if parent:
        out.append(b"from refs/heads/main^0\n")
    for path, text in paths.items():
        out.append(f"M 100644 inline {path}\ndata {len(text)}\n".encode() + text + b"\n")
    return b"".join(out)


def generate(bare: Path, files: int, docs: int) -> None:
    """One commit with `files` files, through fast-import."""
    git(bare.parent, "init", "--quiet", "--bare", bare.name)
    git(bare, "config", "uploadpack.allowFilter", "true")
    first = {f"docs/area-{n % 10}/page-{n:04d}.md": f"# Page {n}\n\n{'words ' * 120}\n".encode() for n in range(docs)}
    for n in range(files - docs):
        first[f"src/pkg{n // 1000:03d}/mod{n:06d}.py"] = f"# module {n}\n".encode() + b"value = 1\n" * 100
    git(bare, "fast-import", "--quiet", input=commit(1, first, False))


def push_change(bare: Path, n: int) -> None:
    """A commit that edits one document and 100 source files."""
    second = {"docs/area-0/page-0000.md": f"# Page 0, edit {n}\n".encode()}
    second |= {f"src/pkg000/mod{k:06d}.py": f"# changed {n} {k}\n".encode() for k in range(100)}
    git(bare, "fast-import", "--quiet", input=commit(n + 2, second, True))


def disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def run_mode(url: str, service_url: str, cache: Path, partial: bool, bare: Path) -> dict[str, Any]:
    from kboperator.git.repo import RepoCache
    from kboperator.models import RepoSpec, SyncSpec
    from kboperator.searchclient import SearchClient
    from kboperator.sync.engine import SyncEngine
    from kboperator.sync.prepared import prepare

    source = f"bench/{'partial' if partial else 'full'}"
    async with SearchClient(service_url) as client:
        engine = SyncEngine(client, RepoCache(cache, partial=partial))
        spec = SyncSpec(source_id=source, repo=RepoSpec(url, ref="main"), include=("docs/**/*.md",))
        t0 = time.perf_counter()
        one = await engine.sync(prepare(spec), None)
        clone_s, clone_disk = time.perf_counter() - t0, disk(cache)
        push_change(bare, 1 if partial else 0)
        t0 = time.perf_counter()
        two = await engine.sync(prepare(spec), one.commit, baseline=one.baseline)
        fetch_s = time.perf_counter() - t0
    return {
        "firstSyncSeconds": round(clone_s, 2), "diskAfterFirstSync": clone_disk, "documents": one.documents,
        "incrementalSeconds": round(fetch_s, 3), "diskAfterIncremental": disk(cache),
        "incrementalModified": two.modified, "load": load_text(),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000, help="files in the repository (default 100000)")
    parser.add_argument("--docs", type=int, default=200, help="of which markdown documents under docs/ (default 200)")
    args = parser.parse_args(argv)
    from kbsearch.settings import Settings
    from tests.support.githttp import GitHttpServer
    from tests.support.hashing import HashingEmbedder

    with tempfile.TemporaryDirectory(prefix="bench-partial-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "served").mkdir()
        bare = tmp / "served" / "mono.git"
        t0 = time.perf_counter()
        generate(bare, args.files, args.docs)
        print(f"[partial_clone] {args.files} files generated in {time.perf_counter() - t0:.1f}s ({load_text()})")
        repo_disk = disk(bare)
        runs: dict[str, Any] = {}
        with GitHttpServer(tmp / "served") as served:
            for partial in (False, True):  # a service each: two sources may not hold the same URIs
                mode = "partial" if partial else "full"
                served.clear()
                data = Settings(data_dir=tmp / f"data-{mode}", collection="bench", api_token=None, read_token=None)
                with run_service(data, embedder=HashingEmbedder()) as svc:
                    url = served.url("mono.git")
                    runs[mode] = asyncio.run(run_mode(url, svc.base_url, tmp / mode, partial, bare))
                runs[mode]["gitRequests"] = {c: served.count(c) for c in ("ls-refs", "fetch")}
                print(f"  {mode}: {runs[mode]}", flush=True)
    result = {"files": args.files, "docs": args.docs, "servedRepositoryBytes": repo_disk, "runs": runs,
              "load": load_average(), "embedder": "hashing (the tests'): git's cost, not the model's"}  # fmt: skip
    write_result(NAME, result)
    print_table(
        ["mode", "first sync s", "cache MB after", "incremental s", "cache MB after", "git fetches"],
        [[mode, r["firstSyncSeconds"], round(r["diskAfterFirstSync"] / 1e6, 1), r["incrementalSeconds"],
          round(r["diskAfterIncremental"] / 1e6, 1), r["gitRequests"]["fetch"]] for mode, r in runs.items()],
    )  # fmt: skip
    return result


if __name__ == "__main__":
    main()
