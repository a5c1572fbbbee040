"""A watch that really expires: the operator's watch resumes from a resourceVersion that etcd has
compacted, the real API server answers 410 Gone, and the operator lists again and catches up.

The session's control plane cannot show this: its kube-apiserver serves watches from the watch
cache, which keeps its own history (at least 75 s and 100 events) whatever etcd has compacted; a
watch from a compacted revision is answered from that cache, not with 410. So this module starts a
control plane of its own (about 3 s: no kube-controller-manager) whose kube-apiserver serves
watches straight from etcd (`--watch-cache=false`) and ends every watch after 5 to 10 s
(`--min-request-timeout`, since kopf names no timeout), as a server with a long history and many
clients does after minutes. Its audit log records every list and watch the operator makes.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.kube.cluster import Release, SearchService, eventually, install, operators
from tests.kube.support import apply, expected, source_manifest, synced_at
from tests.support.controlplane import ControlPlane, running_control_plane
from tests.support.git import WorkRepo

RELEASE = Release("kbexp", "kb-expiry", ())
NAMESPACE = "expiry"
OPERATOR_USER = f"system:serviceaccount:{RELEASE.namespace}:{RELEASE.operator_account}"
KNOWLEDGESOURCES = "/apis/kb.knowledgebase.dev/v1alpha1/knowledgesources"
#: What kopf logs (at debug level) when a watch answers 410 Gone, and only then.
RESTARTED = "Restarting the watch-stream for knowledgesources"
AUDIT_POLICY = """
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: kb.knowledgebase.dev, resources: [knowledgesources]}]
    verbs: [list, watch]
  - level: None
"""


@pytest.fixture(scope="module")
def expiring_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    root = tmp_path_factory.mktemp("expiring")
    policy = root / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    flags = (
        "--watch-cache=false",  # watches come from etcd itself, so they expire with its compaction
        "--etcd-compaction-interval=0",  # the test compacts, at the moment it chooses
        "--min-request-timeout=5",  # each watch ends after 5 to 10 s and kopf resumes it
        f"--audit-policy-file={policy}",
        f"--audit-log-path={root / 'plane' / 'audit.log'}",
    )
    with running_control_plane(root / "plane", apiserver_args=flags, controller_manager=False) as plane:
        install(plane, RELEASE)
        plane.kubectl("create", "namespace", NAMESPACE)
        yield plane


def audited(plane: ControlPlane) -> list[dict[str, Any]]:
    """The audit log's events for the operator's lists and watches of KnowledgeSources, in order."""
    lines = (plane.root / "audit.log").read_text().splitlines()
    return [event for event in map(json.loads, lines) if event["user"]["username"] == OPERATOR_USER]


def open_watches(plane: ControlPlane) -> set[str]:
    """The operator's watches that the API server has started answering and not yet ended."""
    stages: dict[str, set[str]] = {}
    for event in audited(plane):
        if event["verb"] == "watch":
            stages.setdefault(event["auditID"], set()).add(event["stage"])
    return {audit_id for audit_id, seen in stages.items() if "ResponseComplete" not in seen}


def etcd(plane: ControlPlane, call: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call to etcd's v3 API through its JSON gateway."""
    request = urllib.request.Request(
        f"{plane.etcd_url}/v3/{call}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd's history up to its current revision, as kube-apiserver's compactor does every
    5 minutes; returns that revision, the oldest one a watch can still start after."""
    revision = int(etcd(plane, "kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    etcd(plane, "kv/compaction", {"revision": revision, "physical": True})
    return revision


def watch_events(plane: ControlPlane, resource_version: str) -> list[dict[str, Any]]:
    """What a one-second watch of KnowledgeSources from `resource_version` receives (as the admin)."""
    raw = f"{KNOWLEDGESOURCES}?watch=true&resourceVersion={resource_version}&timeoutSeconds=1"
    return [json.loads(line) for line in plane.kubectl("get", "--raw", raw).stdout.splitlines() if line.strip()]


def test_an_expired_watch_is_listed_again_and_the_index_ends_equal_to_the_repository(
    expiring_plane: ControlPlane, search: SearchService, tmp_path: Path
) -> None:
    plane = expiring_plane
    repos = {name: WorkRepo(tmp_path / "repos" / name) for name in ("kept", "gone", "new")}
    for name, repo in repos.items():
        repo.write("README.md", f"# {name}\n")
        repo.write("guide/install.md", f"# Install {name}\n")
    first = {name: repo.commit("first") for name, repo in repos.items()}

    with operators(plane, search, tmp_path / "operator") as start:
        operator = start(RELEASE, LOG_LEVEL="DEBUG")
        for name in ("kept", "gone"):
            apply(plane, tmp_path, source_manifest(name, NAMESPACE, repos[name].path))
        for name in ("kept", "gone"):
            eventually(synced_at(plane, NAMESPACE, name, first[name]), what=f"the first sync of {name}")
        assert operator.proc is not None
        # Uncompacted, every ended watch resumed where it left off: none has expired yet.
        assert RESTARTED not in operator.text()

        os.killpg(operator.proc.pid, signal.SIGSTOP)  # the operator and any git it runs
        try:
            # The server ends the watch that was open; stopped, the operator cannot open another.
            eventually(lambda: not open_watches(plane), what="the operator's open watch to end", timeout_s=60)
            # Meanwhile: a new commit, a narrower spec and a sync request for one source, another
            # deleted, a third created. The operator hears none of it.
            repos["kept"].write("guide/upgrade.md", "# Upgrade\n")
            repos["kept"].remove("guide/install.md")
            second = repos["kept"].commit("second")
            patch = {"spec": {"paths": ["guide/**/*.md"]}}
            plane.kubectl("patch", "ks", "kept", "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))
            plane.kubectl("annotate", "ks", "kept", "-n", NAMESPACE, "kb.knowledgebase.dev/sync-requested-at=gap")
            plane.kubectl("delete", "ks", "gone", "-n", NAMESPACE, "--wait=false")
            apply(plane, tmp_path, source_manifest("new", NAMESPACE, repos["new"].path))
            compacted = compact_etcd(plane)  # those changes can now only be listed, not replayed
            before = len(audited(plane))
        finally:
            os.killpg(operator.proc.pid, signal.SIGCONT)

        eventually(lambda: RESTARTED in operator.text(), what="kopf to restart its expired watch")
        eventually(synced_at(plane, NAMESPACE, "kept", second), what="the sync of the commit made in the gap")
        eventually(synced_at(plane, NAMESPACE, "new", first["new"]), what="the sync of the source made in the gap")
        eventually(
            lambda: plane.kubectl("get", "ks", "gone", "-n", NAMESPACE, check=False).returncode != 0,
            what="the source deleted in the gap to be cleaned up and go",
        )
        assert search.listing(f"{NAMESPACE}/kept") == expected(repos["kept"], "guide/upgrade.md")
        assert search.listing(f"{NAMESPACE}/new") == expected(repos["new"], "README.md", "guide/install.md")
        assert search.listing(f"{NAMESPACE}/gone") == {}

        # The API server's own account: the operator resumed its watch from a resourceVersion
        # older than the compaction, that watch got 410 Gone, and the operator listed again.
        after = audited(plane)[before:]
        resumed = next(e for e in after if e["verb"] == "watch")
        since = parse_qs(urlsplit(resumed["requestURI"]).query)["resourceVersion"][0]
        assert int(since) + 1 < compacted, (since, compacted)
        (gone,) = watch_events(plane, since)
        assert gone["type"] == "ERROR" and gone["object"]["code"] == 410, gone
        assert gone["object"]["reason"] == "Expired"
        relist = after.index(resumed) + 1
        assert any(e["verb"] == "list" for e in after[relist:]), "the operator did not list again"
        plane.kubectl("delete", "ks", "kept", "new", "-n", NAMESPACE, "--timeout=90s")
