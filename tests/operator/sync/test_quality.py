"""Judged questions (.kb/questions.yaml) asked after a sync, on a real git repository and the real service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kboperator.git.repo import RepoCache
from kboperator.models import RepoSpec, SyncSpec
from kboperator.schedule import format_time, utcnow
from kboperator.searchclient import SearchClient
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import BASE_URL, asgi, no_sleep, service  # noqa: F401 - a fixture
from tests.operator.sync.questions_support import handbook
from tests.support.git import WorkRepo, git
from tests.support.githttp import GitHttpServer

SOURCE = "team/handbook"


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:  # noqa: F811
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache"))


def spec_for(work: WorkRepo) -> SyncSpec:
    return SyncSpec(source_id=SOURCE, repo=RepoSpec(str(work.path)), allow_local=True)


async def listed(service: httpx.AsyncClient) -> dict:  # noqa: F811
    """The source as GET /api/v1/sources shows it, read with plain HTTP."""
    response = await service.get("/api/v1/sources")
    assert response.status_code == 200, response.text
    return next(s for s in response.json()["sources"] if s["sourceIdentifier"] == SOURCE)


async def test_the_questions_are_asked_after_a_sync_and_reach_the_service(
    engine: SyncEngine,
    service: httpx.AsyncClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    repo = handbook(tmp_path / "handbook")
    prepared = prepare(spec_for(repo))
    result = await engine.sync(prepared, None)
    assert result.ok and result.documents == 3  # the questions file is no document
    quality = result.quality
    assert quality is not None and quality.error is None
    by_text = {o.question: o for o in quality.outcomes}
    install = by_text["How do I install the operator with helm?"]
    restore = by_text["How are snapshots of the collection restored?"]
    flux = by_text["Which flux capacitor setting needs gigawatts?"]
    assert install.rank == 1 and install.missing_facts == ()
    assert restore.rank == 1 and restore.facts == ()  # either expected page counts
    assert flux.rank is None and flux.missing_facts == ("1.21 gigawatts",)  # no such page, no such fact
    assert (quality.questions, quality.hit_at_1, quality.hit_at_5) == (3, 0.6667, 0.6667)
    assert (quality.with_facts, quality.facts_share) == (2, 0.5)
    assert [o.question for o in quality.failed] == [flux.question]

    assert await engine.report(SOURCE, result, None, synced_at=format_time(utcnow()))
    source = await listed(service)
    assert source["quality"] == 0.6667  # the resolve slot: hit@5
    reported = source["sync"]["quality"]
    assert reported["questions"] == 3 and reported["hitAt1"] == 0.6667 and reported["factsShare"] == 0.5
    assert reported["failedQuestions"] == [
        {"question": flux.question, "expected": ["docs/flux.md"], "rank": None, "missingFacts": ["1.21 gigawatts"]}
    ]

    # Nothing new: nothing is asked, and the service keeps the figures of the commit.
    again = await engine.sync(prepared, result.commit)
    assert not again.fetched and again.quality is None
    assert await engine.report(SOURCE, again, None, synced_at=format_time(utcnow()))
    assert (await listed(service))["sync"]["quality"] == reported
    judged = await engine.judge(prepared, result.commit)  # asked on demand, from the cached clone
    assert judged is not None and judged.to_json() == quality.to_json()

    # A commit without the file has no figures, and the service drops the older commit's.
    repo.remove(".kb/questions.yaml")
    repo.commit()
    third = await engine.sync(prepared, result.commit)
    assert third.ok and third.fetched and third.quality is None
    assert await engine.report(SOURCE, third, None, synced_at=format_time(utcnow()))
    source = await listed(service)
    assert source["quality"] is None and source["sync"]["quality"] is None


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("questions: [", "questions.yaml: expected the node content"),
        ("questions:\n  - question: Why?\n", "questions[0].expected: Field required"),
        ("a: &x [1]\nquestions: *x\n", "YAML anchors"),
    ],
)
async def test_a_refused_questions_file_is_an_error_in_the_quality_never_a_failed_sync(
    engine: SyncEngine,
    service: httpx.AsyncClient,  # noqa: F811
    tmp_path: Path,
    content: str,
    said: str,
) -> None:
    repo = handbook(tmp_path / "handbook")
    repo.write(".kb/questions.yaml", content)
    repo.commit()
    result = await engine.sync(prepare(spec_for(repo)), None)
    assert result.ok and result.documents == 3
    assert result.quality is not None and result.quality.questions == 0
    assert result.quality.error is not None and said in result.quality.error
    assert await engine.report(SOURCE, result, None, synced_at=format_time(utcnow()))
    reported = (await listed(service))["sync"]["quality"]
    assert said in reported["error"] and reported["hitAt5"] is None


async def test_a_partial_clone_fetches_the_questions_blob(
    service: httpx.AsyncClient,  # noqa: F811
    served: GitHttpServer,
    tmp_path: Path,
) -> None:
    repo = handbook(tmp_path / "handbook")
    repo.write("src/code.py", "x = 1\n" * 1000)  # a blob the partial clone must not fetch
    repo.commit()
    bare = served.root / "handbook.git"
    git(served.root, "init", "--quiet", "--bare", bare.name)
    git(bare, "config", "uploadpack.allowFilter", "true")
    git(repo.path, "remote", "add", "origin", str(bare))
    git(repo.path, "push", "--quiet", "origin", "main")
    spec = SyncSpec(source_id=SOURCE, repo=RepoSpec(served.url("handbook.git")))
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        engine = SyncEngine(client, RepoCache(tmp_path / "cache", partial=True))
        result = await engine.sync(prepare(spec), None)
    assert result.ok and result.documents == 3
    assert result.quality is not None and result.quality.error is None and result.quality.questions == 3
    (clone,) = [p for p in (tmp_path / "cache").iterdir() if (p / "HEAD").is_file()]
    missing = git(clone, "rev-list", "--objects", "--missing=print", "--no-walk", "refs/kb/fetched").splitlines()
    assert len([line for line in missing if line.startswith("?")]) == 1  # src/code.py's blob alone
