"""Cheap checks before any fetch, counted on the wire: git's own smart-HTTP server records each
`ls-refs` (git ls-remote) and `fetch` the operator's git layer sends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kboperator.git.repo import RepoCache, resolve_advertised
from kboperator.kube.metrics import OperatorMetrics
from kboperator.models import RepoSpec, SyncSpec
from kboperator.searchclient import SearchClient
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import BASE_URL, asgi, listing, no_sleep
from tests.support.git import WorkRepo, git
from tests.support.githttp import GitHttpServer

SOURCE = "team/handbook"


@pytest.fixture
def work(tmp_path: Path, served: GitHttpServer) -> WorkRepo:
    """A working repository whose `push()` publishes to the served bare one."""
    repo = WorkRepo(tmp_path / "work")
    for n in range(4):
        repo.write(f"page{n}.md", f"# Page {n}\n")
        repo.commit(f"page {n}")
    git(served.root, "init", "--quiet", "--bare", "handbook.git")
    git(repo.path, "remote", "add", "origin", str(served.root / "handbook.git"))
    push(repo)
    return repo


def push(repo: WorkRepo, *refs: str) -> None:
    git(repo.path, "push", "--quiet", "--force", "origin", *(refs or ("main",)))


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache"))


def spec(served: GitHttpServer, ref: str = "main") -> SyncSpec:
    return SyncSpec(source_id=SOURCE, repo=RepoSpec(served.url("handbook.git"), ref=ref))


async def test_an_unmoved_branch_costs_one_ls_remote_and_no_fetch(
    engine: SyncEngine, served: GitHttpServer, work: WorkRepo, tmp_path: Path
) -> None:
    first = await engine.sync(prepare(spec(served)), None)
    assert first.full and first.fetched and first.documents == 4
    assert (served.count("ls-refs"), served.count("fetch")) == (1, 1)  # the fetch's own ref listing
    cache = next(p for p in (tmp_path / "cache").iterdir() if (p / "HEAD").is_file())
    # A first sync is a full reconcile: the clone holds the head commit, not the history.
    assert git(cache, "rev-list", "--count", "refs/kb/fetched") == "1"

    served.clear()
    metrics = OperatorMetrics()
    again = await engine.sync(prepare(spec(served)), first.commit, baseline=first.baseline)
    metrics.record_sync(again)
    assert not again.fetched and again.commit == first.commit and again.documents == 4
    assert (again.added, again.modified, again.deleted) == (0, 0, 0)
    assert (served.count("ls-refs"), served.count("fetch")) == (1, 0)
    assert metrics.registry.get_sample_value("kb_operator_fetches_skipped_total") == 1

    # A push moves the branch: one ls-remote, then one fetch of what is new on top of the shallow clone.
    served.clear()
    work.write("page1.md", "# Page 1, edited\n")
    work.write("page9.md", "# Page 9\n")
    push_commit = work.commit("edit")
    push(work)
    moved = await engine.sync(prepare(spec(served)), first.commit, baseline=first.baseline)
    metrics.record_sync(moved)
    assert moved.fetched and not moved.full and moved.commit == push_commit
    assert (moved.added, moved.modified, moved.documents) == (1, 1, 5)
    assert served.count("fetch") == 1
    assert metrics.registry.get_sample_value("kb_operator_fetches_skipped_total") == 1


async def test_drift_or_a_forced_full_reconcile_syncs_without_refetching_what_the_clone_holds(
    engine: SyncEngine,
    service: httpx.AsyncClient,
    served: GitHttpServer,
    work: WorkRepo,
) -> None:
    first = await engine.sync(prepare(spec(served)), None)
    uri = next(iter(await listing(service, SOURCE)))
    deleted = await service.delete("/api/v1/documents", params={"uri": uri})
    assert deleted.status_code in (200, 204), deleted.text
    served.clear()
    repaired = await engine.sync(prepare(spec(served)), first.commit, baseline=first.baseline)
    assert repaired.fetched and repaired.full and repaired.drift and repaired.added == 1
    # ls-remote only: the clone already holds the head it saw, so `git fetch` is not run.
    assert (served.count("ls-refs"), served.count("fetch")) == (1, 0)

    served.clear()
    forced = await engine.sync(prepare(spec(served)), first.commit, force_full=True, baseline=repaired.baseline)
    assert forced.fetched and forced.full and forced.unchanged == 4
    assert (served.count("ls-refs"), served.count("fetch")) == (1, 0)  # the fetch's listing, no ls-remote


async def test_an_annotated_tag_is_compared_by_the_commit_it_names(
    engine: SyncEngine, served: GitHttpServer, work: WorkRepo
) -> None:
    work.tag("v1", annotated=True)
    push(work, "v1")
    first = await engine.sync(prepare(spec(served, "v1")), None)
    assert first.commit == work.head()
    served.clear()
    again = await engine.sync(prepare(spec(served, "v1")), first.commit, baseline=first.baseline)
    assert not again.fetched and served.count("fetch") == 0


def test_advertised_refs_resolve_by_gits_own_order() -> None:
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    lines = f"{a}\trefs/heads/v2\n{b}\trefs/tags/v2\n{c}\trefs/tags/v2^{{}}\n{a}\tHEAD\n"
    assert resolve_advertised("v2", lines) == c  # a tag wins over a branch, peeled to its commit
    assert resolve_advertised("refs/heads/v2", lines) == a
    assert resolve_advertised("HEAD", lines) == a
    assert resolve_advertised("main", lines) is None
    assert resolve_advertised("v2", "garbage\tline\n") is None
