"""The real kopf operator, in-process, against the kmock API emulator and the real search service."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kboperator.crd import FINALIZER, PLURAL, SYNC_REQUEST_ANNOTATION
from kbsearch.app import create_app
from kbsearch.settings import Settings
from tests.operator.kube.e2e_support import condition, has_event, synced_at, synced_source
from tests.operator.secrets import create_secret
from tests.operator.world import CLUSTERWIDE, NAMESPACE, NAMESPACED, World
from tests.support.hashing import HashingEmbedder
from tests.support.kube import KubeApi, eventually
from tests.support.service import make_store, serve

#: Run a test under both of the chart's install modes (and so against both sets of RBAC rules).
both_modes = pytest.mark.parametrize("world", [NAMESPACED, CLUSTERWIDE], indirect=True)


async def test_create_reaches_synced(world: World) -> None:
    repo = world.repo("docs")
    repo.write("README.md", "# Docs\n\nWelcome.\n")
    repo.write("guide/install.md", "# Install\n\nRun it.\n")
    repo.write("guide/logo.png", b"\x89PNG\r\n")
    repo.write("guide/broken.md", b"\xff\xfe not utf-8 \xc3\x28")
    commit = repo.commit("first")

    await world.api.create("docs", {"repository": {"url": str(repo.path)}, "schedule": "@every 1h"})

    status = await eventually(lambda: (s := world.api.status("docs")).get("phase") == "Synced" and s, what="Synced")
    assert status["lastSyncedCommit"] == commit and status["shortCommit"] == commit[:12]
    assert status["documentCount"] == 2
    assert status["lastSync"]["added"] == 2 and status["lastSync"]["full"] is True
    assert [f["path"] for f in status["skippedFiles"]] == ["guide/broken.md"]
    assert status["failedFiles"] == []
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True" and conditions["Synced"]["status"] == "True"
    assert conditions["Ready"]["observedGeneration"] == 1
    # Its progress was written while it ran (straight to /status) and closed with the final counts.
    assert conditions["Syncing"]["status"] == "False" and conditions["Syncing"]["reason"] == "SyncEnded"
    assert "went through 2 of 2 documents" in conditions["Syncing"]["message"]
    assert "progress" not in status and not world.kube.schema_problems
    assert status["nextSyncTime"] > status["lastSyncTime"]
    assert await world.listing("docs") == repo.expected("README.md", "guide/install.md")
    # The service's sources page shows the same outcome, reported by the operator.
    sync = await reported(world, "docs")
    assert (sync["phase"], sync["commit"], sync["documents"], sync["added"]) == ("ok", commit, 2, 2)
    assert [f["path"] for f in sync["skippedFiles"]] == ["guide/broken.md"]
    assert sync["syncedAt"] == f"{status['lastSyncTime'][:-1]}.000Z"
    assert sync["nextSyncAt"] == f"{status['nextSyncTime'][:-1]}.000Z"
    # With the freshness the status holds: the console's sources page shows it.
    assert sync["lastSuccessAt"] == f"{status['lastSuccessfulSyncTime'][:-1]}.000Z"
    fresh = status["freshness"]
    assert sync["freshness"]["remoteCommit"] == fresh["remoteCommit"] == commit
    assert sync["freshness"]["seenAt"] == f"{fresh['remoteCommitSeenTime'][:-1]}.000Z"
    assert sync["freshness"]["lagSeconds"] == fresh["lagSeconds"]
    await has_event(world, "docs", "SyncCompleted")
    assert world.syncs("success") == 1
    # Objects in namespaces the operator does not watch are left alone.
    other = KubeApi(world.kube, "elsewhere")
    await other.create("docs", {"repository": {"url": str(repo.path)}})
    await world.operator_kept_working()
    assert other.get("docs") and not other.status("docs")


async def reported(world: World, name: str) -> dict[str, Any]:
    """The sync status the operator reported to the service for a source.

    The operator reports before its status patch is applied, so once the status shows a sync, the
    service has its report.
    """
    response = await world.service.get("/api/v1/sources")
    assert response.status_code == 200, response.text
    found = {s["sourceIdentifier"]: s for s in response.json()["sources"]}.get(f"{NAMESPACE}/{name}")
    assert found is not None and found["sync"] is not None, f"no sync report for {name}"
    sync: dict[str, Any] = found["sync"]
    return sync


@both_modes
async def test_new_commits_are_reflected(world: World) -> None:
    repo = world.repo("changing")
    repo.write("README.md", "# One\n")
    repo.write("docs/guide.md", "# Guide\n\nHow to.\n")
    repo.write("docs/old.md", "# Old\n")
    first = repo.commit("first")
    await world.api.create("changing", {"repository": {"url": f"file://{repo.path}"}, "schedule": "@every 1s"})
    await eventually(synced_at(world, "changing", first), what="first sync")

    repo.write("README.md", "# One, edited\n")
    repo.move("docs/guide.md", "docs/manual.md")
    repo.remove("docs/old.md")
    repo.write("docs/new.md", "# New\n")
    second = repo.commit("edit, rename, delete, add")

    status = await eventually(synced_at(world, "changing", second), what="second commit synced")
    assert status["lastSync"] | {"durationSeconds": 0} == {
        "commit": second,
        "full": False,
        "added": 1,
        "modified": 1,
        "deleted": 1,
        "renamed": 1,
        "unchanged": 0,
        "skipped": 0,
        "failed": 0,
        "durationSeconds": 0,
    }
    assert status["documentCount"] == 3
    assert await world.listing("changing") == repo.expected("README.md", "docs/manual.md", "docs/new.md")
    await has_event(world, "changing", "DocumentsDeleted")


async def test_spec_narrowing_removes_orphans(world: World) -> None:
    repo = world.repo("narrow")
    for path in ("docs/a.md", "docs/drafts/b.md", "other/c.md"):
        repo.write(path, f"# {path}\n")
    commit = repo.commit("three")
    await world.api.create("narrow", {"repository": {"url": str(repo.path)}, "schedule": "@every 1h"})
    first = await eventually(synced_at(world, "narrow", commit))
    assert first["documentCount"] == 3

    await world.api.patch("narrow", {"spec": {"paths": ["docs/**/*.md"], "exclude": ["**/drafts/**"]}})

    status = await eventually(
        lambda: (
            (s := world.api.status("narrow")).get("specHash") not in (None, first["specHash"])
            and s.get("phase") == "Synced"
            and s
        ),
        what="narrowed sync",
    )
    assert status["lastSync"]["full"] is True and status["lastSync"]["deleted"] == 2
    assert status["documentCount"] == 1 and status["observedGeneration"] == 2
    assert await world.listing("narrow") == repo.expected("docs/a.md")


async def test_failing_service_is_retried_and_converges(world: World) -> None:
    repo, first, _ = await synced_source(world, "flaky", "@every 1s")

    # Some documents fail: the sync is partial, listed, retried, and the commit stays put.
    world.faults.failing_paths.add("b.md")
    repo.write("b.md", "# B\n")
    repo.write("c.md", "# C\n")
    second = repo.commit("two more")
    partial = await eventually(
        lambda: (s := world.api.status("flaky")).get("consecutiveFailures", 0) >= 2 and s, what="retried partial"
    )
    assert partial["phase"] == "Failed" and partial["lastSyncedCommit"] == first
    assert condition(partial, "Synced")["status"] == "False" and condition(partial, "Synced")["reason"] == "PartialSync"
    assert condition(partial, "Ready")["reason"] == "PartialSync"
    assert [f["path"] for f in partial["failedFiles"]] == ["b.md"]
    await has_event(world, "flaky", "SyncPartial")
    assert (await world.listing("flaky")).keys() == {"a.md", "c.md"}

    world.faults.heal()
    healed = await eventually(synced_at(world, "flaky", second), what="converged")
    assert healed["consecutiveFailures"] == 0 and healed["failedFiles"] == []
    assert await world.listing("flaky") == repo.expected("a.md", "b.md", "c.md")

    # The whole service down: a failed sync, retried, converging once it is back.
    world.faults.down = True
    repo.write("a.md", "# A, edited\n")
    third = repo.commit("edit")
    down = await eventually(
        lambda: (s := world.api.status("flaky")).get("phase") == "Failed" and s.get("consecutiveFailures", 0) >= 2 and s
    )
    # The documents fail, then so does reading the count back: the whole sync failed.
    assert condition(down, "Ready")["reason"] == "ServiceUnavailable"
    assert down["lastSyncedCommit"] == second
    world.faults.heal()
    await eventually(synced_at(world, "flaky", third), what="converged after the outage")
    assert await world.listing("flaky") == repo.expected("a.md", "b.md", "c.md")


async def test_manual_sync_request_and_suspend(world: World) -> None:
    repo, _, _ = await synced_source(world, "manual", "@every 1h")
    syncs = world.syncs("success")

    repo.write("b.md", "# B\n")
    second = repo.commit("two")
    await world.api.annotate("manual", SYNC_REQUEST_ANNOTATION, "2024-05-01T10:00:00Z")
    status = await eventually(synced_at(world, "manual", second), what="requested sync")
    assert status["lastHandledSyncRequest"] == "2024-05-01T10:00:00Z" and status["lastSync"]["full"] is True
    assert world.syncs("success") == syncs + 1

    # Its own status writes (and an unrelated label) never trigger another sync.
    await world.api.patch("manual", {"metadata": {"labels": {"team": "docs"}}})
    await world.operator_kept_working()
    assert world.syncs("success") == syncs + 1

    await world.api.patch("manual", {"spec": {"suspend": True}})
    suspended = await eventually(lambda: (s := world.api.status("manual")).get("phase") == "Suspended" and s)
    assert condition(suspended, "Ready")["reason"] == "Suspended" and "nextSyncTime" not in suspended
    repo.write("c.md", "# C\n")
    third = repo.commit("three")
    await world.api.annotate("manual", SYNC_REQUEST_ANNOTATION, "2024-05-01T11:00:00Z")
    await world.operator_kept_working()
    assert world.api.status("manual")["lastSyncedCommit"] == second
    assert world.api.status("manual")["phase"] == "Suspended"

    await world.api.patch("manual", {"spec": {"suspend": False}})
    resumed = await eventually(synced_at(world, "manual", third), what="resumed")
    assert resumed["lastHandledSyncRequest"] == "2024-05-01T11:00:00Z"
    assert await world.listing("manual") == repo.expected("a.md", "b.md", "c.md")


@both_modes
async def test_deletion_policies(world: World) -> None:
    # One repository each: a document's URI is its identity in the service.
    repos, commits = {}, {}
    for name, policy in (("deleted", "Delete"), ("retained", "Retain"), ("stubborn", "Delete")):
        repo = repos[name] = world.repo(name)
        repo.write("a.md", f"# A of {name}\n")
        repo.write("b.md", f"# B of {name}\n")
        commits[name] = repo.commit("two")
        await world.api.create(name, {"repository": {"url": str(repo.path)}, "deletionPolicy": policy})
    for name in repos:
        await eventually(synced_at(world, name, commits[name]), what=f"{name} synced")
        assert world.api.get(name)["metadata"]["finalizers"] == [FINALIZER]

    await world.api.delete("deleted")
    await world.api.delete("retained")
    await eventually(lambda: world.api.get("deleted") is None and world.api.get("retained") is None, what="gone")
    assert await world.listing("deleted") == {}
    assert await world.listing("retained") == repos["retained"].expected("a.md", "b.md")
    await has_event(world, "deleted", "DocumentsDeleted")
    await has_event(world, "retained", "DocumentsRetained")

    # Cleanup that fails keeps the finalizer, says why, and retries until it succeeds.
    world.faults.down = True
    await world.api.delete("stubborn")
    stuck = await eventually(
        lambda: (
            (o := world.api.get("stubborn"))
            and condition(o.get("status", {}), "Ready")["reason"] == "CleanupFailed"
            and o
        ),
        what="cleanup failure shown",
    )
    assert stuck["metadata"]["finalizers"] == [FINALIZER] and stuck["metadata"]["deletionTimestamp"]
    await has_event(world, "stubborn", "CleanupFailed")
    world.faults.heal()
    await eventually(lambda: world.api.get("stubborn") is None, what="deleted after healing")
    assert await world.listing("stubborn") == {}


@both_modes
async def test_missing_secret_and_invalid_spec_fail_clearly(world: World) -> None:
    repo = world.repo("strict")
    repo.write("a.md", "# A\n")
    commit = repo.commit("one")

    # A Secret that does not exist, then one without the key: Failed, said clearly, retried rarely.
    spec = {"repository": {"url": "https://git.example.com/acme/docs.git", "secretRef": {"name": "creds"}}}
    await world.api.create("nosecret", spec)
    missing = await eventually(lambda: (s := world.api.status("nosecret")).get("phase") == "Failed" and s)
    assert condition(missing, "Ready")["reason"] == "SecretUnavailable"
    assert "Secret kb/creds does not exist" in condition(missing, "Ready")["message"]
    assert missing.get("nextSyncTime")  # retried with backoff, in case the Secret appears
    await create_secret(world.api, "creds", {"username": "bot"}, "repository")
    keyless = await eventually(
        lambda: (
            "has no 'token' key" in condition(world.api.status("nosecret"), "Ready")["message"]
            and world.api.status("nosecret")
        ),
        what="the missing key reported",
    )
    assert keyless["phase"] == "Failed"
    await has_event(world, "nosecret", "SecretUnavailable")

    # A token never shows up anywhere, even when the repository is unreachable.
    await create_secret(world.api, "token", {"token": "s3cr3t-t0ken-value"}, "repository")
    spec = {"repository": {"url": "https://127.0.0.1:9/acme/docs.git", "secretRef": {"name": "token"}}}
    await world.api.create("unreachable", spec)
    unreachable = await eventually(lambda: (s := world.api.status("unreachable")).get("phase") == "Failed" and s)
    assert condition(unreachable, "Ready")["reason"] == "RepositoryUnavailable"
    everything = json.dumps([world.api.get("unreachable"), world.api.events("unreachable")])
    assert "s3cr3t" not in everything

    # Hostile and broken specs: Failed with the reason, and not retried until the spec changes.
    # The CRD refuses the first; it is stored anyway, as under an older CRD, to test the operator's own check.
    marker = world.tmp / "pwned"
    for name, ref in (("injection", f"--upload-pack=touch {marker}"), ("badref", "no-such-branch")):
        spec = {"repository": {"url": str(repo.path), "ref": ref}, "schedule": "@every 1s"}
        await world.api.create(name, spec, checked=name != "injection")
    for name in ("injection", "badref"):
        status = await eventually(lambda n=name: (s := world.api.status(n)).get("phase") == "Failed" and s)
        assert condition(status, "Ready")["reason"] == "InvalidSpec" and "nextSyncTime" not in status
        await has_event(world, name, "InvalidSpec")
    assert "must not start with '-'" in condition(world.api.status("injection"), "Ready")["message"]
    assert "no-such-branch" in condition(world.api.status("badref"), "Ready")["message"]
    await world.operator_kept_working()
    assert world.api.status("badref")["consecutiveFailures"] == 1
    assert world.api.status("injection")["consecutiveFailures"] == 1
    assert not marker.exists()  # the injected command never ran

    await world.api.patch("badref", {"spec": {"repository": {"ref": "main"}}})
    await eventually(synced_at(world, "badref", commit), what="fixed spec synced")


async def test_a_restarted_operator_resumes_without_resyncing(world: World) -> None:
    repo, _, before = await synced_source(world, "resumed", "@every 1h")

    await world.stop_operator()
    repo.write("b.md", "# B\n")
    second = repo.commit("two")
    await world.start_operator()
    await world.operator_kept_working()
    assert world.api.status("resumed") == before and world.syncs("success") == 0  # not due yet

    # A shorter schedule makes it overdue: an incremental sync from the commit kept in status.
    await world.api.patch("resumed", {"spec": {"schedule": "@every 1s"}})
    after = await eventually(synced_at(world, "resumed", second), what="incremental sync after restart")
    assert after["lastSync"]["full"] is False and after["lastSync"]["added"] == 1
    assert world.syncs("success") == 1


async def test_a_partial_sync_then_a_revert_converges(world: World) -> None:
    repo = world.repo("reverted")
    repo.write("x.md", "# X\n")
    repo.write("y.md", "# Y\n")
    first = repo.commit("x and y")
    await world.api.create("reverted", {"repository": {"url": str(repo.path)}, "schedule": "@every 1s"})
    await eventually(synced_at(world, "reverted", first))

    repo.remove("x.md")
    repo.write("y.md", "# Y, edited\n")
    world.faults.failing_paths.add("y.md")  # a 503 for y.md: a failure that may pass
    repo.commit("delete x, edit y")
    partial = await eventually(lambda: (s := world.api.status("reverted")).get("failedFiles") and s, what="partial")
    assert partial["lastSyncedCommit"] == first and [f["path"] for f in partial["failedFiles"]] == ["y.md"]
    sync = await reported(world, "reverted")
    assert sync["phase"] == "partial"
    assert [f["path"] for f in sync["failedFiles"]] == ["y.md"] and "503" in sync["failedFiles"][0]["reason"]
    assert (await world.listing("reverted")).keys() == {"y.md"}  # the deletion of x.md went through

    # The tree is the synced commit's again: no diff from it, yet the service lacks x.md.
    world.faults.heal()
    reverted = repo.revert()
    await eventually(synced_at(world, "reverted", reverted), what="converged after the revert")
    assert await world.listing("reverted") == repo.expected("x.md", "y.md")


async def test_a_file_the_service_refuses_is_skipped_and_the_commit_advances(world: World) -> None:
    repo = world.repo("refused")
    repo.write("a.md", "# A\n")
    repo.write("huge.md", "h" * (1_048_576 + 1))  # let through by the spec, past the service's 1 MiB: a 413
    first = repo.commit("one")
    spec = {"repository": {"url": str(repo.path)}, "schedule": "@every 1s", "maxFileSizeBytes": 4_000_000}
    await world.api.create("refused", spec)

    status = await eventually(synced_at(world, "refused", first), what="synced despite the refusal")
    assert status["failedFiles"] == [] and status["consecutiveFailures"] == 0
    assert [(f["path"], f["code"]) for f in status["skippedFiles"]] == [("huge.md", "DOCUMENT_TOO_LARGE")]
    assert "413" in status["skippedFiles"][0]["reason"] and status["skippedFilesOmitted"] == 0
    assert condition(status, "Ready")["status"] == "True"
    await has_event(world, "refused", "DocumentsRejected")
    assert await world.listing("refused") == repo.expected("a.md")

    repo.write("a.md", "# A, edited\n")
    second = repo.commit("two")
    after = await eventually(synced_at(world, "refused", second), what="the next commit")
    assert after["lastSync"]["full"] is False and after["lastSync"]["modified"] == 1  # no full retry owed
    assert after["skippedFiles"] == []
    assert await world.listing("refused") == repo.expected("a.md")


async def test_a_service_that_lost_its_collection_is_refilled_at_the_next_sync(world: World) -> None:
    repo = world.repo("drifted")
    repo.write("a.md", "# A\n")
    repo.write("b.md", "# B\n")
    commit = repo.commit("two")
    await world.api.create("drifted", {"repository": {"url": str(repo.path)}, "schedule": "@every 1s"})
    before = await eventually(synced_at(world, "drifted", commit))
    assert before["expectedDocumentCount"] == 2 and before["collectionEpoch"]

    # The service URL now reaches a service with an empty collection (a lost volume, another
    # release): no commit changes, yet the next scheduled sync notices and reconciles fully.
    fresh = create_app(Settings(data_dir=world.tmp / "fresh"), store=make_store("edge", world.tmp / "fresh"),
                       embedder=HashingEmbedder())  # fmt: skip
    original = world.faults.app
    async with serve(fresh) as service:
        world.faults.app = fresh
        try:
            refilled = await eventually(
                lambda: (
                    (s := world.api.status("drifted")).get("collectionEpoch") not in (None, before["collectionEpoch"])
                    and s
                ),
                what="the drift noticed",
            )
            assert refilled["lastSync"]["full"] is True and refilled["lastSync"]["added"] == 2
            assert "collection epoch" in refilled["lastSync"]["drift"] and refilled["lastSyncedCommit"] == commit
            assert "full reconcile after drift" in condition(refilled, "Synced")["message"]
            await has_event(world, "drifted", "DriftDetected")
            params = {"sourceIdentifier": f"{NAMESPACE}/drifted"}
            listed = (await service.get("/api/v1/documents", params=params)).json()["documents"]
            assert {d["metadata"]["path"]: d["checksum"] for d in listed} == repo.expected("a.md", "b.md")
        finally:
            world.faults.app = original  # the fresh app stops with this block


@both_modes
async def test_an_expired_watch_is_relisted_and_a_later_change_handled(world: World) -> None:
    repo, _, _ = await synced_source(world, "watched", "@every 1h")
    repo.write("b.md", "# B\n")
    second = repo.commit("two")
    before = len(world.kube.operator_requests)

    await world.kube.expire_watches()
    # Made after the expiry: the old stream cannot deliver it, only a re-list (or a watch from it) can.
    await world.api.annotate("watched", SYNC_REQUEST_ANNOTATION, "2024-05-01T10:00:00Z")

    await eventually(synced_at(world, "watched", second), what="the requested sync after the expiry")
    assert world.kube.expired_watches >= 1
    after = world.kube.operator_requests[before:]
    assert any(r.verb == "list" and r.resource == PLURAL for r in after), "the operator never re-listed"
