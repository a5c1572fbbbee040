"""Sources of one repository, ref and credentials share one clone and one fetch per push; other
credentials never share. Counted on the wire by git's own smart-HTTP server."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from kboperator.errors import RepositoryAuthError
from kboperator.git.repo import RepoCache
from kboperator.models import Credentials, RepoSpec, SyncResult, SyncSpec
from kboperator.repourl import check_repo
from kboperator.searchclient import SearchClient
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import BASE_URL, asgi, listing, no_sleep, sha256
from tests.support.git import WorkRepo, git, serve_git_http
from tests.support.githttp import GitHttpServer

TEAMS = 50
TOKEN = "glpat-Shared0nlyWithTheSameSecret"


@pytest.fixture
def work(tmp_path: Path, served: GitHttpServer) -> WorkRepo:
    """A monorepo with one folder per team, published to the served bare repository."""
    repo = WorkRepo(tmp_path / "work")
    for team in range(TEAMS):
        repo.write(f"team{team}/guide.md", f"# Team {team} guide\n")
        repo.write(f"team{team}/faq.md", f"# Team {team} FAQ\n")
    repo.commit("every team's docs")
    git(served.root, "init", "--quiet", "--bare", "mono.git")
    git(repo.path, "remote", "add", "origin", str(served.root / "mono.git"))
    git(repo.path, "push", "--quiet", "origin", "main")
    return repo


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache"), concurrency=2)


def team_spec(served: GitHttpServer, team: int) -> SyncSpec:
    return SyncSpec(
        source_id=f"team{team}/docs", repo=RepoSpec(served.url("mono.git")), include=(f"team{team}/**/*.md",)
    )


async def sync_all(engine: SyncEngine, served: GitHttpServer, last: list[SyncResult] | None) -> list[SyncResult]:
    """Every source at once, four syncs at a time as the operator's sync slots allow."""
    slots = asyncio.Semaphore(4)

    async def one(team: int) -> SyncResult:
        async with slots:
            return await engine.sync(prepare(team_spec(served, team)), last[team].commit if last else None,
                                     baseline=last[team].baseline if last else None)  # fmt: skip

    return await asyncio.gather(*(one(team) for team in range(TEAMS)))


async def test_fifty_sources_share_one_clone_and_one_fetch_per_push(
    engine: SyncEngine, service: httpx.AsyncClient, served: GitHttpServer, work: WorkRepo, tmp_path: Path
) -> None:
    first = await sync_all(engine, served, None)
    assert all(result.ok and result.documents == 2 for result in first)
    clones = [p for p in (tmp_path / "cache").iterdir() if (p / "HEAD").is_file()]
    assert len(clones) == 1  # one clone for the fifty sources

    for team in range(TEAMS):  # one push that touches every team's folder
        work.write(f"team{team}/guide.md", f"# Team {team} guide, edited\n")
    work.write(f"team{TEAMS - 1}/new.md", "# A new page\n")
    pushed = work.commit("edit every guide")
    git(work.path, "push", "--quiet", "origin", "main")
    served.clear()
    fetches_before = engine.git.fetches.runs

    second = await sync_all(engine, served, first)
    assert all(result.ok and result.fetched and result.commit == pushed for result in second)
    # One `git fetch` for the fifty: every other source found the head its ls-remote saw already
    # in the shared clone. Each source asks ls-remote itself unless a question that started after
    # it asked is still the newest answer (so between 1 and 50), plus the fetch's own listing.
    assert engine.git.fetches.runs - fetches_before == 1
    assert served.count("fetch") == 1
    assert 2 <= served.count("ls-refs") <= TEAMS + 1

    for team in range(TEAMS):  # every index is its folder of the repository at the pushed commit
        documents = (await listing(service, f"team{team}/docs")).values()
        held = {doc["metadata"]["path"]: doc["checksum"] for doc in documents}
        expected = {
            path: sha256((work.path / path).read_bytes())
            for path in git(work.path, "ls-files", f"team{team}").splitlines()
        }
        assert held == expected

    served.clear()  # nothing new: one ls-remote's worth of questions at most, no fetch at all
    third = await sync_all(engine, served, second)
    assert not any(result.fetched for result in third)
    assert served.count("fetch") == 0 and 1 <= served.count("ls-refs") <= TEAMS


@pytest.fixture
def private(tmp_path: Path, work: WorkRepo) -> Iterator[str]:
    root = tmp_path / "private"
    root.mkdir()
    git(root, "clone", "--bare", "--quiet", str(work.path), "org/private.git")
    with serve_git_http(root, "robot", TOKEN) as base:
        yield f"{base}/org/private.git"


def test_sources_with_other_credentials_never_share_a_clone_or_an_answer(
    tmp_path: Path, private: str, work: WorkRepo
) -> None:
    cache = RepoCache(tmp_path / "cache")
    good = RepoSpec(private, credentials=Credentials(username="robot", token=TOKEN))
    with closing(cache.open("a/docs", check_repo(good, allow_local=False))) as checkout:
        assert checkout.head == work.head()
    assert cache.remote_head("a/docs", check_repo(good, allow_local=False)) == work.head()

    # The same URL and ref, a wrong token or none: the shared clone, which holds exactly that
    # head, and the answer ls-remote just gave are not theirs to read.
    for creds in (Credentials(username="robot", token="wrong"), None):
        other = RepoSpec(private, credentials=creds)
        assert cache.key(other) != cache.key(good)
        with pytest.raises(RepositoryAuthError):
            cache.remote_head("b/docs", check_repo(other, allow_local=False))
        with pytest.raises(RepositoryAuthError):
            cache.open("b/docs", check_repo(other, allow_local=False), expected=work.head())

    # Another Secret with the same content is the same access: it shares the clone, without a fetch.
    runs = cache.fetches.runs
    same = RepoSpec(private, credentials=Credentials(username="robot", token=TOKEN))
    with closing(cache.open("c/docs", check_repo(same, allow_local=False), expected=work.head())) as checkout:
        assert checkout.head == work.head() and checkout.folder.name == cache.key(good)
    assert cache.fetches.runs == runs


def test_a_clone_is_removed_when_its_last_source_lets_go(tmp_path: Path, private: str, work: WorkRepo) -> None:
    cache = RepoCache(tmp_path / "cache")
    spec = RepoSpec(private, credentials=Credentials(username="robot", token=TOKEN))
    for source in ("a/docs", "b/docs"):
        cache.open(source, check_repo(spec, allow_local=False)).close()
    clone = cache.root / cache.key(spec)
    cache.forget("a/docs", private)
    assert (clone / "HEAD").is_file()  # b still reads it
    # b moves to another ref: it lets go of the old clone, which nobody uses any more.
    moved = RepoSpec(private, ref="refs/heads/main", credentials=spec.credentials)
    cache.open("b/docs", check_repo(moved, allow_local=False)).close()
    assert not clone.exists()
    cache.forget("b/docs", private)
    assert not [p for p in cache.root.iterdir() if not p.name.startswith(".")]


def test_a_clone_of_the_per_source_layout_goes_when_its_source_opens(tmp_path: Path, private: str) -> None:
    cache = RepoCache(tmp_path / "cache")
    legacy = cache.root / hashlib.sha256(f"a/docs\0{private}".encode()).hexdigest()[:32]
    git(tmp_path, "init", "--quiet", "--bare", str(legacy))
    cache.open(
        "a/docs",
        check_repo(RepoSpec(private, credentials=Credentials(username="robot", token=TOKEN)), allow_local=False),
    ).close()
    assert not legacy.exists()
