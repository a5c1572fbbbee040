"""Partial clones: a monorepo whose documents are a small folder moves only their blobs.

git's own smart-HTTP server serves the repository with `uploadpack.allowFilter`; what the cached
clone holds is read back with `git rev-list --missing=print`, which never fetches anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kboperator.git.repo import RepoCache
from kboperator.models import RepoSpec, SyncSpec
from kboperator.searchclient import SearchClient
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import BASE_URL, asgi, listing, no_sleep
from tests.support.git import WorkRepo, git
from tests.support.githttp import GitHttpServer

SOURCE = "team/monorepo"
CODE_FILES = 60


@pytest.fixture
def work(tmp_path: Path, served: GitHttpServer) -> WorkRepo:
    repo = WorkRepo(tmp_path / "work")
    for n in range(CODE_FILES):
        repo.write(f"src/module{n:03d}.py", f"# module {n}\n" + "x = 1\n" * 2000)
    repo.write("docs/index.md", "# Index\n")
    repo.write("docs/guide/setup.md", "# Setup\n")
    repo.write("docs/guide/big.md", "# Big\n" + "word " * 400)
    repo.commit("monorepo")
    bare = served.root / "mono.git"
    git(served.root, "init", "--quiet", "--bare", bare.name)
    git(bare, "config", "uploadpack.allowFilter", "true")
    git(repo.path, "remote", "add", "origin", str(bare))
    git(repo.path, "push", "--quiet", "origin", "main")
    return repo


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache", partial=True))


def spec(served: GitHttpServer, **overrides: object) -> SyncSpec:
    fields: dict[str, object] = {
        "source_id": SOURCE,
        "repo": RepoSpec(served.url("mono.git")),
        "include": ("docs/**/*.md",),
        "max_file_size": 1000,
    }
    return SyncSpec(**(fields | overrides))  # type: ignore[arg-type]


def held_blobs(cache_root: Path) -> tuple[set[str], int]:
    """(paths whose blobs the clone holds at its head, blobs it lacks) without fetching anything."""
    (clone,) = [p for p in cache_root.iterdir() if (p / "HEAD").is_file()]
    listed = git(clone, "rev-list", "--objects", "--missing=print", "--no-walk", "refs/kb/fetched").splitlines()
    missing = {line[1:] for line in listed if line.startswith("?")}
    tree = git(clone, "ls-tree", "-r", "--full-tree", "refs/kb/fetched").splitlines()
    held = {line.split("\t", 1)[1] for line in tree if line.split()[2] not in missing}
    return held, len(missing)


async def test_only_the_selected_files_blobs_are_fetched(
    engine: SyncEngine, service: httpx.AsyncClient, served: GitHttpServer, work: WorkRepo, tmp_path: Path
) -> None:
    first = await engine.sync(prepare(spec(served)), None)
    assert first.ok and first.full and (first.added, first.documents) == (2, 2)
    assert [issue.path for issue in first.skipped] == ["docs/guide/big.md"]  # over 1000 bytes: its size is read
    held, missing = held_blobs(tmp_path / "cache")
    assert held == {"docs/index.md", "docs/guide/setup.md", "docs/guide/big.md"}
    assert missing == CODE_FILES

    # An incremental sync: a document renamed and edited, code changed; only document blobs move.
    work.move("docs/guide/setup.md", "docs/guide/install.md")
    work.write("docs/index.md", "# Index, edited\n")
    work.write("src/module000.py", "# changed\n")
    work.commit("edit")
    git(work.path, "push", "--quiet", "origin", "main")
    second = await engine.sync(prepare(spec(served)), first.commit, baseline=first.baseline)
    assert second.ok and not second.full
    # Without rename detection (it would read unwanted blobs) a rename is a deletion and an addition.
    assert (second.added, second.modified, second.deleted, second.documents) == (1, 1, 1, 2)
    paths = sorted(doc["metadata"]["path"] for doc in (await listing(service, SOURCE)).values())
    assert paths == ["docs/guide/install.md", "docs/index.md"]
    held, missing = held_blobs(tmp_path / "cache")
    assert held == {"docs/index.md", "docs/guide/install.md", "docs/guide/big.md"}
    assert missing == CODE_FILES


async def test_a_spec_that_selects_more_fetches_the_newly_selected_blobs(
    engine: SyncEngine, served: GitHttpServer, work: WorkRepo, tmp_path: Path
) -> None:
    first = await engine.sync(prepare(spec(served)), None)
    wider = spec(served, include=("docs/**/*.md", "src/module00*.py"), max_file_size=1_000_000)
    second = await engine.sync(prepare(wider), first.commit, force_full=True, baseline=first.baseline)
    assert second.ok and second.documents == 3 + 10
    held, missing = held_blobs(tmp_path / "cache")
    assert len(held) == 3 + 10 and missing == CODE_FILES - 10


async def test_drift_found_before_the_fetch_brings_every_wanted_blob(
    engine: SyncEngine, service: httpx.AsyncClient, served: GitHttpServer, work: WorkRepo, tmp_path: Path
) -> None:
    first = await engine.sync(prepare(spec(served)), None)
    uri = next(iter(await listing(service, SOURCE)))
    assert (await service.delete("/api/v1/documents", params={"uri": uri})).status_code in (200, 204)
    work.write("docs/new.md", "# New\n")
    work.write("docs/index.md", "# Index, again\n")
    work.commit("more")
    git(work.path, "push", "--quiet", "origin", "main")
    second = await engine.sync(prepare(spec(served)), first.commit, baseline=first.baseline)
    assert second.ok and second.full and second.drift and second.documents == 3
    held, missing = held_blobs(tmp_path / "cache")
    assert held == {"docs/index.md", "docs/guide/setup.md", "docs/guide/big.md", "docs/new.md"}
    assert missing == CODE_FILES
