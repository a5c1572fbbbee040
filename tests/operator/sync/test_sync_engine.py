"""The sync engine on real git repositories and the real service: the index equals the repo."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from kboperator.errors import InvalidSpecError, MassDeletionRefusedError
from kboperator.git.repo import RepoCache
from kboperator.models import RepoSpec, SyncResult, SyncSpec
from kboperator.searchclient import SearchClient
from kboperator.sync.engine import SyncEngine
from kboperator.sync.prepared import prepare
from tests.operator.search_service import (
    BASE_URL,
    asgi,
    file_uri,
    listing,
    no_sleep,
    sha256,
)
from tests.support.git import WorkRepo

SOURCE = "team/handbook"


def is_doc(path: str) -> bool:
    """The oracle for the default spec (`**/*.md`, nothing excluded), written independently."""
    return path.endswith(".md")


@pytest.fixture
def repo(tmp_path: Path) -> WorkRepo:
    return WorkRepo(tmp_path / "handbook")


@pytest.fixture
async def engine(service: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[SyncEngine]:
    async with SearchClient(BASE_URL, transport=asgi(service), sleep=no_sleep) as client:
        yield SyncEngine(client, RepoCache(tmp_path / "cache"), concurrency=3)


def spec_for(work: WorkRepo, /, **overrides: object) -> SyncSpec:
    fields: dict[str, object] = {"source_id": SOURCE, "repo": RepoSpec(str(work.path)), "allow_local": True}
    fields.update(overrides)
    return SyncSpec(**fields)  # type: ignore[arg-type]


async def assert_mirrors(
    service: httpx.AsyncClient, repo: WorkRepo, result: SyncResult, keep: Callable[[str], bool] = is_doc
) -> None:
    """The service's listing equals the repository's matching files, by URI and checksum."""
    expected = {file_uri(repo.path, path): sha256(data) for path, data in repo.files().items() if keep(path)}
    documents = await listing(service, SOURCE)
    assert {uri: doc["checksum"] for uri, doc in documents.items()} == expected
    for uri, doc in documents.items():
        path = doc["metadata"]["path"]
        assert uri == file_uri(repo.path, path)
        assert doc["metadata"]["sourceIdentifier"] == SOURCE and doc["metadata"]["ref"] == "main"
    assert result.ok, result.failed
    assert result.commit == repo.head()
    assert result.documents == len(expected)  # read back from the service, not counted by us


async def test_every_change_type_keeps_the_index_exact(engine: SyncEngine, service, repo: WorkRepo) -> None:
    spec = spec_for(repo)

    async def step(last: str | None) -> SyncResult:
        result = await engine.sync(prepare(spec), last)
        await assert_mirrors(service, repo, result)
        return result

    # empty: a commit with no files at all
    repo.commit("empty")
    result = await step(None)
    assert result.full and result.documents == 0

    # empty -> full
    repo.write("README.md", "# Handbook\n\nWelcome.\n")
    repo.write("guide/install.md", "# Install\n\nRun make.\n")
    repo.write("guide/deep/nested/page.md", "# Nested\n\ndeep text\n")
    repo.write("guide/old-name.md", "# Renamed soon\n\nsame content\n")
    repo.write("notes.txt", "not a document\n")
    repo.write("crlf.md", "line one\r\nline two\r\n\ufeffbom inside\r\n")
    repo.commit("add handbook")
    result = await step(result.commit)
    assert not result.full and result.added == 5

    # modify and delete
    repo.write("README.md", "# Handbook\n\nWelcome, again.\n")
    repo.remove("guide/install.md")
    repo.commit("modify and delete")
    result = await step(result.commit)
    assert (result.added, result.modified, result.deleted, result.renamed) == (0, 1, 1, 0)

    # rename: the old URI goes, the new one comes
    repo.move("guide/old-name.md", "guide/new-name.md")
    repo.commit("rename")
    result = await step(result.commit)
    assert (result.renamed, result.deleted, result.added) == (1, 0, 0)

    # a file becomes a symlink (pointing outside the repository): the document goes away
    repo.symlink("guide/deep/nested/page.md", "/etc/passwd")
    repo.commit("file to symlink")
    result = await step(result.commit)
    assert result.deleted == 1
    assert [(s.path, s.reason) for s in result.skipped] == [("guide/deep/nested/page.md", "symlink")]

    # a file moves out of the globs, another moves in
    repo.move("crlf.md", "crlf.txt")
    repo.move("notes.txt", "notes.md")
    repo.commit("out of and into the globs")
    result = await step(result.commit)
    assert (result.deleted, result.added) == (1, 1)

    # nothing changed: nothing sent
    again = await step(result.commit)
    assert (again.added, again.modified, again.deleted, again.renamed) == (0, 0, 0, 0)

    # full -> empty: every file deleted in a commit is mirrored (no mass-deletion refusal)
    for path in list(repo.files()):
        repo.remove(path)
    repo.remove("guide/deep/nested/page.md")
    repo.commit("delete everything")
    result = await step(result.commit)
    assert result.documents == 0 and result.deleted == 3

    # a full reconcile of a genuinely empty tree agrees
    result = await engine.sync(prepare(spec), None, force_full=True)
    await assert_mirrors(service, repo, result)


async def test_force_push_falls_back_to_a_full_reconcile(engine: SyncEngine, service, repo: WorkRepo) -> None:
    spec = spec_for(repo)
    repo.write("keep.md", "keep\n")
    base = repo.commit("base")
    first = await engine.sync(prepare(spec), None)
    repo.write("doomed.md", "only in the rewritten history\n")
    repo.write("keep.md", "keep, edited\n")
    doomed = repo.commit("doomed")
    synced = await engine.sync(prepare(spec), first.commit)
    await assert_mirrors(service, repo, synced)

    repo.reset_hard(base)  # history rewritten: `doomed` is gone from the branch
    repo.write("fresh.md", "after the force-push\n")
    repo.commit("rewrite")
    repo.gc_prune()
    result = await engine.sync(prepare(spec), doomed)
    assert result.full
    await assert_mirrors(service, repo, result)
    assert (result.added, result.modified, result.deleted) == (1, 1, 1)

    # the same holds with a fresh cache that never saw the lost commit
    fresh = SyncEngine(engine.client, RepoCache(repo.path.parent / "fresh-cache"))
    result = await fresh.sync(prepare(spec), doomed)
    assert result.full and result.unchanged == 2
    await assert_mirrors(service, repo, result)


async def test_spec_narrowing_removes_orphans_and_metadata_changes_reach_every_document(
    engine: SyncEngine, service, repo: WorkRepo
) -> None:
    repo.write("docs/a.md", "a\n")
    repo.write("docs/drafts/b.md", "b\n")
    repo.write("other/c.md", "c\n")
    repo.commit()
    await engine.sync(prepare(spec_for(repo)), None)

    narrowed = spec_for(repo, include=("docs/**/*.md",), exclude=("**/drafts/**",), metadata={"team": "platform"})
    result = await engine.sync(prepare(narrowed), None)  # a spec change means a full reconcile
    await assert_mirrors(service, repo, result, keep=lambda p: p == "docs/a.md")
    assert (result.deleted, result.modified) == (2, 1)
    documents = await listing(service, SOURCE)
    assert [doc["metadata"]["team"] for doc in documents.values()] == ["platform"]

    again = await engine.sync(prepare(narrowed), None)
    assert (again.unchanged, again.modified, again.added, again.deleted) == (1, 0, 0, 0)


async def test_mass_deletion_guard(engine: SyncEngine, service, repo: WorkRepo) -> None:
    repo.write("a.md", "a\n")
    repo.write("b.md", "b\n")
    repo.commit()
    await engine.sync(prepare(spec_for(repo)), None)
    # a glob typo: the repository still has files but none would be a document
    with pytest.raises(MassDeletionRefusedError, match="refusing to delete all 2 documents"):
        await engine.sync(prepare(spec_for(repo, include=("**/*.mdx",))), None)
    # a limit that skips everything looks the same
    with pytest.raises(MassDeletionRefusedError, match="2 skipped"):
        await engine.sync(prepare(spec_for(repo, max_file_size=1)), None)
    assert len(await listing(service, SOURCE)) == 2  # nothing was deleted


async def test_hostile_content_is_skipped_with_reasons(
    engine: SyncEngine, service, repo: WorkRepo, tmp_path: Path
) -> None:
    secret = tmp_path / "outside-secret.md"
    secret.write_text("TOPSECRET outside the checkout\n")
    repo.write("ok.md", "fine\n")
    repo.write("binary.md", b"PNG\x00\x01\x02")
    repo.write("latin1.md", "caf\xe9\n".encode("latin-1"))
    repo.write("big.md", "x" * 200)
    repo.symlink("leak.md", str(secret))
    repo.symlink("inside.md", "ok.md")
    (repo.path / os.fsdecode(b"caf\xe9.md")).write_text("a name that is not UTF-8\n")
    repo.commit()
    result = await engine.sync(prepare(spec_for(repo, max_file_size=100)), None)
    reasons = {issue.path: issue.reason for issue in result.skipped}
    assert reasons["caf\ufffd.md"] == "path is not valid UTF-8"
    assert reasons["binary.md"].startswith("binary")
    assert reasons["latin1.md"].startswith("not UTF-8")
    assert reasons["big.md"] == "too large: 200 bytes (limit 100)"
    assert reasons["leak.md"] == reasons["inside.md"] == "symlink"
    assert result.ok and result.documents == 1
    await assert_mirrors(service, repo, result, keep=lambda p: p == "ok.md")
    hits = await service.post("/api/v1/search", json={"query": "TOPSECRET", "mode": "keyword"})
    assert hits.json()["results"] == []

    # incremental: hostile files changing or going away are handled the same way
    (repo.path / os.fsdecode(b"caf\xe9.md")).unlink()
    repo.write("binary.md", "now it is text\n")
    repo.write("big.md", "small now\n")
    repo.commit()
    result = await engine.sync(prepare(spec_for(repo, max_file_size=100)), result.commit)
    assert not result.full and result.added == 2
    await assert_mirrors(service, repo, result, keep=lambda p: p in ("ok.md", "binary.md", "big.md"))


async def test_service_failing_for_a_while_then_converging(
    service: httpx.AsyncClient, repo: WorkRepo, tmp_path: Path
) -> None:
    real = asgi(service)
    failing = {"on": False, "writes": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        if failing["on"] and request.method in ("PUT", "DELETE"):
            failing["writes"] += 1
            return httpx.Response(503, json={"error": {"code": "STORE_UNAVAILABLE", "message": "down"}})
        return await real.handle_async_request(request)

    async with SearchClient(BASE_URL, transport=httpx.MockTransport(handler), sleep=no_sleep, max_attempts=3) as client:
        engine = SyncEngine(client, RepoCache(tmp_path / "cache"), concurrency=1, give_up_after=2)
        spec = spec_for(repo)
        repo.write("a.md", "a\n")
        repo.write("b.md", "b\n")
        repo.commit()
        synced = (await engine.sync(prepare(spec), None)).commit

        repo.write("a.md", "a, edited\n")
        repo.remove("b.md")
        for i in range(8):
            repo.write(f"new/{i}.md", f"new {i}\n")
        repo.commit()
        failing["on"] = True
        partial = await engine.sync(prepare(spec), synced)
        assert not partial.ok
        assert sorted(issue.path for issue in partial.failed) == sorted(
            ["a.md", "b.md", *(f"new/{i}.md" for i in range(8))]
        )
        reasons = [issue.reason for issue in partial.failed]
        assert sum("STORE_UNAVAILABLE" in reason for reason in reasons) == 2
        assert sum("not attempted" in reason for reason in reasons) == 8
        assert failing["writes"] == 2 * 3  # two documents, three attempts each, then the breaker opened
        # the caller keeps `synced`; once the service is back, the same sync converges
        failing["on"] = False
        result = await engine.sync(prepare(spec), synced)
        await assert_mirrors(service, repo, result)
        assert (result.added, result.modified, result.deleted) == (8, 1, 1)


TOO_LARGE = "y" * (1_048_576 + 10)  # over the service's 1 MiB limit: a 413


def refusals(result: SyncResult) -> dict[str, str | None]:
    return {issue.path: issue.code for issue in result.skipped}


async def test_files_the_service_refuses_for_good_are_skips_and_the_commit_advances(
    engine: SyncEngine, service, repo: WorkRepo
) -> None:
    repo.write("small.md", "small\n")
    repo.write("huge.md", TOO_LARGE)
    repo.write("shared.md", "# Shared\n")
    repo.write("grows.md", "# Grows\n\nsmall for now\n")
    repo.commit()
    # Another source mirrors the same checkout and claimed shared.md first: its URI is theirs (409).
    owner = await engine.sync(prepare(spec_for(repo, source_id="team/owner", include=("shared.md",))), None)
    assert owner.ok and owner.documents == 1
    spec = spec_for(repo, max_file_size=4_000_000)  # the spec lets through what the service will refuse

    first = await engine.sync(prepare(spec), None)
    assert first.ok and first.failed == []  # a refusal is not a failure: the caller advances its commit
    assert refusals(first) == {"huge.md": "DOCUMENT_TOO_LARGE", "shared.md": "URI_OWNED_BY_OTHER_SOURCE"}
    reasons = {issue.path: issue.reason for issue in first.skipped}
    assert "413" in reasons["huge.md"] and "team/owner" not in reasons["shared.md"]  # never the owner
    await assert_mirrors(service, repo, first, keep=lambda p: p in ("small.md", "grows.md"))
    assert list(await listing(service, "team/owner")) == [file_uri(repo.path, "shared.md")]

    # A document that grows past the limit leaves the index (its older version would be stale).
    repo.write("grows.md", TOO_LARGE)
    repo.write("new.md", "# New\n")
    repo.commit()
    grown = await engine.sync(prepare(spec), first.commit, baseline=first.baseline)
    assert grown.ok and not grown.full  # incremental: the files refused before are not sent again
    assert refusals(grown) == {"grows.md": "DOCUMENT_TOO_LARGE"}
    assert (grown.added, grown.deleted) == (1, 1)
    await assert_mirrors(service, repo, grown, keep=lambda p: p in ("small.md", "new.md"))

    # An unrelated change: nothing refused before is retried, nothing is listed.
    repo.write("small.md", "small, edited\n")
    repo.commit()
    quiet = await engine.sync(prepare(spec), grown.commit, baseline=grown.baseline)
    assert quiet.ok and not quiet.full and quiet.skipped == [] and quiet.modified == 1

    # A refused file that changes again is in the next diff, and tried again.
    repo.write("huge.md", "# Huge\n\nnot any more\n")
    repo.commit()
    shrunk = await engine.sync(prepare(spec), quiet.commit, baseline=quiet.baseline)
    assert shrunk.ok and not shrunk.full and shrunk.added == 1 and shrunk.skipped == []
    await assert_mirrors(service, repo, shrunk, keep=lambda p: p in ("small.md", "new.md", "huge.md"))

    # A full reconcile tries every refused file again.
    full = await engine.sync(prepare(spec), shrunk.commit, force_full=True)
    assert full.ok and refusals(full) == {"grows.md": "DOCUMENT_TOO_LARGE", "shared.md": "URI_OWNED_BY_OTHER_SOURCE"}
    await assert_mirrors(service, repo, full, keep=lambda p: p in ("small.md", "new.md", "huge.md"))


async def test_invalid_documents_are_skipped_and_their_earlier_version_stays(
    engine: SyncEngine, service, repo: WorkRepo
) -> None:
    repo.write("a.md", "# A\n")
    repo.commit()
    first = await engine.sync(prepare(spec_for(repo)), None)
    # A metadata value over the service's per-value limit: every PUT is refused with a 422.
    result = await engine.sync(prepare(spec_for(repo, metadata={"note": "n" * 5000})), None)
    assert result.ok and refusals(result) == {"a.md": "VALIDATION_ERROR"}
    assert "an earlier version stays" in result.skipped[0].reason
    # The cause may be the spec rather than the file: what the service held is not thrown away.
    assert {uri: doc["checksum"] for uri, doc in (await listing(service, SOURCE)).items()} == {
        file_uri(repo.path, "a.md"): sha256(b"# A\n")
    }
    assert result.documents == first.documents == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"repo": RepoSpec("https://example.com/o/r", ref="--upload-pack=evil")}, "must not start with '-'"),
        ({"include": ("docs/**x",)}, "invalid glob"),
        ({"exclude": ("[",)}, "invalid glob"),
        ({"metadata": {"path": "x"}}, "reserved"),
        ({"allow_local": False}, "not allowed"),
        ({"source_id": ""}, "source id"),
    ],
)
async def test_invalid_specs_fail_before_anything_is_sent(
    engine: SyncEngine, service, repo: WorkRepo, overrides: dict, message: str
) -> None:
    repo.write("a.md", "a\n")
    repo.commit()
    with pytest.raises(InvalidSpecError, match=message):
        await engine.sync(prepare(spec_for(repo, **overrides)), None)
    assert await listing(service, SOURCE) == {}
