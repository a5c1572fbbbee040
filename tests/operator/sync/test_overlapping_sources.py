"""Two sources over the same files: neither can overwrite or delete the other's documents."""

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
from tests.operator.search_service import BASE_URL, asgi, file_uri, listing, no_sleep, sha256
from tests.support.git import WorkRepo


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache"), concurrency=2)


def spec(work: WorkRepo, source_id: str, **fields: object) -> SyncSpec:
    return SyncSpec(source_id=source_id, repo=RepoSpec(str(work.path)), allow_local=True, **fields)  # type: ignore[arg-type]


async def test_the_first_owner_keeps_its_documents_and_the_second_sees_why(service, engine, tmp_path):
    work = WorkRepo(tmp_path / "shared")
    work.write("docs/x.md", "# X\n\nshared text\n")
    work.write("other.md", "# Other\n")
    work.commit("first")

    first = await engine.sync(prepare(spec(work, "ns1/a", include=("docs/**",))), None)
    assert first.ok
    second = await engine.sync(prepare(spec(work, "ns2/b")), None)
    assert second.ok  # a file another source owns is skipped, not retried until it changes
    assert [(issue.path, issue.code) for issue in second.skipped] == [("docs/x.md", "URI_OWNED_BY_OTHER_SOURCE")]
    # The skip reaches b's status and events: it says the URI is taken, never by which source.
    assert "ns1/a" not in second.skipped[0].reason and "another source" in second.skipped[0].reason

    x_uri = file_uri(work.path, "docs/x.md")
    assert set(await listing(service, "ns1/a")) == {x_uri}
    assert set(await listing(service, "ns2/b")) == {file_uri(work.path, "other.md")}

    # b syncing the file's deletion (incrementally, and in a full pass) never deletes a's copy
    work.remove("docs/x.md")
    work.write("docs/y.md", "# Y\n")
    work.commit("move on")
    await engine.sync(prepare(spec(work, "ns2/b")), second.commit)
    assert x_uri in await listing(service, "ns1/a")
    narrowed = await engine.sync(prepare(spec(work, "ns2/b", exclude=("docs/**",))), second.commit, force_full=True)
    assert narrowed.ok
    assert x_uri in await listing(service, "ns1/a")

    # and a, syncing the deletion, removes its own document
    caught_up = await engine.sync(prepare(spec(work, "ns1/a", include=("docs/**",))), first.commit)
    assert caught_up.ok
    assert {uri: d["checksum"] for uri, d in (await listing(service, "ns1/a")).items()} == {
        file_uri(work.path, "docs/y.md"): sha256(b"# Y\n")
    }
