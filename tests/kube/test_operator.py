"""The operator on a real API server, driven with kubectl as a user would.

The operator runs as `python -m kboperator` with a TokenRequest token of the chart's own
ServiceAccount, so every call it makes is judged by the chart's RBAC (any 403 fails the test).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kube.cluster import Operator, Release, SearchService, eventually, install
from tests.kube.support import Clusterwide, apply, expected, namespace_for, source_manifest, status, synced_at
from tests.support.controlplane import ControlPlane
from tests.support.git import WorkRepo

StartOperator = Callable[..., Operator]


@pytest.mark.parametrize("mode", ["clusterwide", "namespaced"])
def test_a_source_lives_its_whole_life_through_kubectl(
    control_plane: ControlPlane,
    releases: dict[str, Release],
    search: SearchService,
    run_operator: StartOperator,
    operator_root: Path,
    tmp_path: Path,
    mode: str,
) -> None:
    plane, release = control_plane, releases[mode]
    namespace = namespace_for(plane, release, f"life-{mode}")
    name = f"docs-{mode}"
    source_id = f"{namespace}/{name}"
    repo = WorkRepo(operator_root.parent / "repos" / name)
    repo.write("README.md", "# Docs\n\nWelcome.\n")
    repo.write("guide/install.md", "# Install\n\nRun it.\n")
    first = repo.commit("first")
    run_operator(release)

    assert "created" in apply(plane, tmp_path, source_manifest(name, namespace, repo.path))
    synced = eventually(synced_at(plane, namespace, name, first), what="the first sync")
    assert synced["documentCount"] == 2 and synced["shortCommit"] == first[:12]
    assert search.listing(source_id) == expected(repo, "README.md", "guide/install.md")

    # What a user sees: the printer columns, and the conditions and events.
    table = plane.kubectl("get", "ks", "-n", namespace).stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "READY", "COMMIT", "DOCUMENTS", "PROGRESS", "LAST"]
    row = next(line.split() for line in table if line.startswith(name))
    assert row[1:4] == ["True", first[:12], "2"]  # no progress once the sync is done: that cell is empty
    wide = plane.kubectl("get", "ks", name, "-n", namespace, "-o", "wide").stdout
    assert "PHASE" in wide and "Synced" in wide and "NEXT SYNC" in wide
    described = plane.kubectl("describe", "ks", name, "-n", namespace).stdout
    assert "Conditions:" in described and "Ready" in described

    def described_with_event() -> str | None:
        text = plane.kubectl("describe", "ks", name, "-n", namespace).stdout
        return text if "SyncCompleted" in text else None

    eventually(described_with_event, what="the SyncCompleted event in kubectl describe")

    # A spec change narrows the document set at once.
    plane.kubectl("patch", "ks", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"paths":["guide/**/*.md"]}}')
    eventually(lambda: search.listing(source_id) == expected(repo, "guide/install.md"), what="the narrowed set")

    # Sync now: a new commit is picked up without waiting for the hourly schedule.
    repo.write("guide/upgrade.md", "# Upgrade\n\nStep by step.\n")
    second = repo.commit("second")
    request = "2026-01-01T00:00:00Z"
    plane.kubectl("annotate", "ks", name, "-n", namespace, f"kb.knowledgebase.dev/sync-requested-at={request}")
    done = eventually(synced_at(plane, namespace, name, second), what="the requested sync")
    assert done["lastHandledSyncRequest"] == request
    assert search.listing(source_id) == expected(repo, "guide/install.md", "guide/upgrade.md")

    # Suspend: the phase says so; resuming syncs what was committed meanwhile.
    plane.kubectl("patch", "ks", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    eventually(lambda: status(plane, namespace, name).get("phase") == "Suspended", what="Suspended")
    repo.remove("guide/install.md")
    third = repo.commit("third")
    plane.kubectl("patch", "ks", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    plane.kubectl(
        "annotate", "ks", name, "-n", namespace, "--overwrite", "kb.knowledgebase.dev/sync-requested-at=now-2"
    )
    eventually(synced_at(plane, namespace, name, third), what="the sync after resuming")
    assert search.listing(source_id) == expected(repo, "guide/upgrade.md")

    # Delete (the default policy): the finalizer removes the documents, then the object goes.
    plane.kubectl("delete", "ks", name, "-n", namespace, "--timeout=90s")
    assert search.listing(source_id) == {}
    assert plane.kubectl("get", "ks", name, "-n", namespace, check=False).returncode != 0


def test_retain_keeps_the_documents_after_delete(
    clusterwide: Clusterwide,
) -> None:
    plane, search = clusterwide.plane, clusterwide.search
    namespace = clusterwide.namespace("retain")
    repo = clusterwide.repo("kept")
    repo.write("a.md", "# A\n")
    commit = repo.commit("only")
    clusterwide.start_operator()
    clusterwide.apply(source_manifest("kept", namespace, repo.path, deletionPolicy="Retain"))
    eventually(synced_at(plane, namespace, "kept", commit), what="the sync")
    plane.kubectl("delete", "ks", "kept", "-n", namespace, "--timeout=90s")
    assert search.listing(f"{namespace}/kept") == expected(repo, "a.md")


def test_deleting_a_namespace_removes_its_sources_and_their_documents(
    clusterwide: Clusterwide,
) -> None:
    plane, search = clusterwide.plane, clusterwide.search
    namespace = clusterwide.namespace("doomed")
    commits = {}
    for name in ("one", "two"):  # a repository each: a document belongs to one source only
        repo = clusterwide.repo(name)
        repo.write("a.md", "# A\n")
        repo.write("b.md", "# B\n")
        commits[name] = repo.commit("only")
        clusterwide.apply(source_manifest(name, namespace, repo.path))
    clusterwide.start_operator()
    for name in ("one", "two"):
        eventually(synced_at(plane, namespace, name, commits[name]), what=f"the sync of {name}")
        assert len(search.listing(f"{namespace}/{name}")) == 2

    plane.kubectl("delete", "namespace", namespace, "--wait=false")
    # The namespace controller deletes the sources, the operator's finalizer cleans up, and the
    # namespace goes: nothing hangs on a finalizer.
    eventually(
        lambda: plane.kubectl("get", "namespace", namespace, check=False).returncode != 0,
        what="the namespace to disappear",
        timeout_s=120,
    )
    assert search.listing(f"{namespace}/one") == {} and search.listing(f"{namespace}/two") == {}


def test_a_permission_missing_from_the_chart_fails_the_sync_clearly(
    control_plane: ControlPlane,
    search: SearchService,
    run_operator: StartOperator,
    tmp_path: Path,
) -> None:
    # A release whose Role lacks `get secrets`, as a chart with a broken rule would install it.
    plane = control_plane
    release = install(plane, Release("kblocked", "kb-locked", ("team-locked",)))
    (namespace,) = release.watch
    role = plane.get("role", release.operator_account, "-n", namespace)
    kept = [rule for rule in role["rules"] if "secrets" not in rule["resources"]]
    assert len(kept) == len(role["rules"]) - 1
    plane.kubectl(
        "patch", "role", release.operator_account, "-n", namespace, "--type=merge", "-p", json.dumps({"rules": kept})
    )
    plane.kubectl("create", "secret", "generic", "creds", "-n", namespace, "--from-literal=token=t")
    plane.kubectl("label", "secret", "creds", "-n", namespace, "kb.knowledgebase.dev/secret-type=repository")
    run_operator(release)
    body = {
        "apiVersion": "kb.knowledgebase.dev/v1alpha1",
        "kind": "KnowledgeSource",
        "metadata": {"name": "locked", "namespace": namespace},
        "spec": {"repository": {"url": "https://127.0.0.1:9/acme/docs.git", "secretRef": {"name": "creds"}}},
    }
    apply(plane, tmp_path, json.dumps(body))
    failed = eventually(
        lambda: (s := status(plane, namespace, "locked")).get("phase") == "Failed" and s, what="the Failed phase"
    )
    ready = {c["type"]: c for c in failed["conditions"]}["Ready"]
    assert ready["reason"] == "SecretUnavailable", ready
    assert "may not read Secret team-locked/creds (RBAC)" in ready["message"], ready["message"]
    plane.kubectl("delete", "ks", "locked", "-n", namespace, "--timeout=90s")
