"""Drift: a reset collection, another service behind the URL, or documents changed behind the
operator's back turn the next sync into a full reconcile that repairs the index."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from kboperator.git.repo import RepoCache
from kboperator.models import Baseline, RepoSpec, SyncSpec
from kboperator.searchclient import SearchClient, SourceStats
from kboperator.sync.drift import drift_reason
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import BASE_URL, asgi, file_uri, listing, no_sleep, sha256
from tests.support.git import WorkRepo
from tests.support.service import running_service

SOURCE = "team/drift"


def stats(documents: int = 3, incomplete: int = 0, epoch: str = "e1") -> SourceStats:
    return SourceStats(SOURCE, documents=documents, chunks=documents, incomplete=incomplete,
                       last_ingested_at=None, epoch=epoch)  # fmt: skip


@pytest.mark.parametrize(
    ("found", "baseline", "why"),
    [
        (stats(), Baseline("e1", 3), None),
        (stats(), Baseline(), None),  # nothing recorded yet (first sync, or an older operator)
        (stats(documents=7, epoch="e2"), Baseline(None, None), None),
        (stats(epoch="e2"), Baseline("e1", 3), "collection epoch is 'e2'"),
        (stats(documents=2), Baseline("e1", 3), "holds 2 documents of this source, the last sync left 3"),
        (stats(documents=2), Baseline(None, 3), "holds 2 documents"),
        (stats(incomplete=1), Baseline("e1", 3), "1 documents of this source are incomplete"),
        (stats(incomplete=1), Baseline(), "incomplete"),
        (None, Baseline(), None),  # an older service, and nothing recorded: synced as before
        (None, Baseline(None, 3), None),
        (None, Baseline("e1", 3), "no longer reports a collection epoch"),  # the URL reaches another service
    ],
)
def test_drift_reason(found: SourceStats | None, baseline: Baseline, why: str | None) -> None:
    reason = drift_reason(found, baseline)
    if why is None:
        assert reason is None
    else:
        assert reason is not None and why in reason


def spec_for(repo: WorkRepo) -> SyncSpec:
    return SyncSpec(source_id=SOURCE, repo=RepoSpec(str(repo.path)), allow_local=True)


@asynccontextmanager
async def engine_on(
    data_dir: Path, cache: Path, *, transport=None
) -> AsyncIterator[tuple[SyncEngine, httpx.AsyncClient]]:
    """A real service on `data_dir`, and an engine that reaches it at BASE_URL."""
    async with (
        running_service("edge", data_dir) as service,
        SearchClient(BASE_URL, transport=transport or asgi(service), sleep=no_sleep) as client,
    ):
        yield SyncEngine(client, RepoCache(cache)), service


@pytest.fixture
def repo(tmp_path: Path) -> WorkRepo:
    work = WorkRepo(tmp_path / "repo")
    for name in ("a", "b", "c"):
        work.write(f"{name}.md", f"# {name}\n")
    work.commit()
    return work


async def mirrors(service: httpx.AsyncClient, repo: WorkRepo) -> bool:
    expected = {file_uri(repo.path, p): sha256(d) for p, d in repo.files().items() if p.endswith(".md")}
    return {uri: doc["checksum"] for uri, doc in (await listing(service, SOURCE)).items()} == expected


async def test_without_drift_the_next_sync_stays_incremental(repo: WorkRepo, tmp_path: Path) -> None:
    async with engine_on(tmp_path / "data", tmp_path / "cache") as (engine, service):
        first = await engine.sync(prepare(spec_for(repo)), None)
        status = (await service.get("/api/v1/status")).json()
        assert first.baseline == Baseline(epoch=status["collectionEpoch"], documents=3)
        repo.write("d.md", "# d\n")
        repo.commit()
        second = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)
        assert second.ok and not second.full and second.drift is None and second.added == 1
        assert second.baseline == Baseline(epoch=first.baseline.epoch, documents=4)


async def test_a_reset_collection_is_noticed_and_refilled(repo: WorkRepo, tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with engine_on(data, tmp_path / "cache") as (engine, _service):
        first = await engine.sync(prepare(spec_for(repo)), None)
    shutil.rmtree(data)  # the volume was lost: the service starts on an empty collection
    async with engine_on(data, tmp_path / "cache") as (engine, service):
        assert await listing(service, SOURCE) == {}
        again = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)  # no new commit
        assert again.ok and again.full and again.added == 3
        assert again.drift is not None and "collection epoch" in again.drift
        assert again.baseline.epoch != first.baseline.epoch
        assert await mirrors(service, repo)


async def test_a_restarted_service_is_not_drift(repo: WorkRepo, tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with engine_on(data, tmp_path / "cache") as (engine, _service):
        first = await engine.sync(prepare(spec_for(repo)), None)
    async with engine_on(data, tmp_path / "cache") as (engine, _service):  # same volume: same collection
        again = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)
        assert again.ok and not again.full and again.drift is None


async def test_a_url_that_reaches_another_service_is_noticed(repo: WorkRepo, tmp_path: Path) -> None:
    async with engine_on(tmp_path / "one", tmp_path / "cache") as (engine, _one):
        first = await engine.sync(prepare(spec_for(repo)), None)
    # The same URL now answers from another service (DNS moved, another release): it holds nothing.
    async with engine_on(tmp_path / "two", tmp_path / "cache") as (engine, two):
        again = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)
        assert again.full and again.drift is not None and "collection epoch" in again.drift
        assert await mirrors(two, repo)


async def test_documents_deleted_behind_the_operators_back_are_restored(repo: WorkRepo, tmp_path: Path) -> None:
    async with engine_on(tmp_path / "data", tmp_path / "cache") as (engine, service):
        first = await engine.sync(prepare(spec_for(repo)), None)
        gone = await service.delete("/api/v1/documents", params={"uri": file_uri(repo.path, "b.md")})
        assert gone.status_code == 200
        again = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)
        assert again.full and again.added == 1 and again.baseline.documents == 3
        assert again.drift is not None and "holds 2 documents" in again.drift
        assert await mirrors(service, repo)


def older_service(service: httpx.AsyncClient) -> httpx.MockTransport:
    """The real app behind a service version that has no GET /api/v1/sources/{id} (a 404)."""
    real = asgi(service)

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.startswith("/api/v1/sources/"):
            return httpx.Response(404, json={"error": {"code": "NOT_FOUND", "message": "Not Found", "details": {}}})
        return await real.handle_async_request(request)

    return httpx.MockTransport(handler)


async def test_an_older_service_is_synced_as_before(
    repo: WorkRepo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kboperator")
    async with (
        running_service("edge", tmp_path / "data") as service,
        SearchClient(BASE_URL, transport=older_service(service), sleep=no_sleep) as client,
    ):
        engine = SyncEngine(client, RepoCache(tmp_path / "cache"))
        first = await engine.sync(prepare(spec_for(repo)), None)
        assert first.ok and first.documents == 3  # counted from the list of sources instead
        assert first.baseline == Baseline(epoch=None, documents=3)
        repo.write("d.md", "# d\n")
        repo.commit()
        second = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)
        assert second.ok and not second.full and second.drift is None and second.documents == 4
        # One line says why drift goes unnoticed, not one per sync.
        told = [r for r in caplog.records if "GET /api/v1/sources/{id}" in r.getMessage()]
        assert len(told) == 1 and "older version" in told[0].getMessage()
        # A source last synced against a service that knew its epoch: this is another service.
        third = await engine.sync(prepare(spec_for(repo)), second.commit, baseline=Baseline("e1", 4))
        assert third.full and third.drift is not None and "no longer reports" in third.drift
        assert await mirrors(service, repo)


async def test_the_check_between_syncs_finds_the_drift_the_next_sync_repairs(repo: WorkRepo, tmp_path: Path) -> None:
    # SyncEngine.drift is what the operator asks between syncs: the same drift_reason, one GET.
    async with engine_on(tmp_path / "data", tmp_path / "cache") as (engine, service):
        first = await engine.sync(prepare(spec_for(repo)), None)
        assert await engine.drift(SOURCE, first.baseline) is None
        gone = await service.delete("/api/v1/documents", params={"uri": file_uri(repo.path, "c.md")})
        assert gone.status_code == 200
        found = await engine.drift(SOURCE, first.baseline)
        assert found is not None and "holds 2 documents of this source, the last sync left 3" in found
        again = await engine.sync(prepare(spec_for(repo)), first.commit, baseline=first.baseline)
        assert again.drift == found and again.full and await mirrors(service, repo)
        assert await engine.drift(SOURCE, again.baseline) is None
