"""On the real API server: the CRD takes status.progress and the Syncing condition as the operator
writes them (merge patch of /status), and `kubectl get ks` shows the Progress column."""

from __future__ import annotations

import json

from tests.kube.cluster import Release
from tests.support.controlplane import ControlPlane

NAMESPACE = "progress-column"


def test_kubectl_get_shows_a_running_syncs_progress(control_plane: ControlPlane, releases: dict[str, Release]) -> None:
    if control_plane.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
        control_plane.kubectl("create", "namespace", NAMESPACE)
    source = {
        "apiVersion": "kb.knowledgebase.dev/v1alpha1",
        "kind": "KnowledgeSource",
        "metadata": {"name": "docs", "namespace": NAMESPACE},
        "spec": {"repository": {"url": "https://git.example/org/docs"}, "suspend": True},
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(source))
    # What kube.progress.StatusProgress sends (StatusWriter.progress's patch).
    status = {
        "status": {
            "progress": {"done": 25, "total": 126, "startedAt": "2026-12-02T12:00:00Z", "summary": "25/126"},
            "conditions": [
                {"type": "Syncing", "status": "True", "reason": "SyncRunning", "message": "syncing 25 of 126 documents",
                 "lastTransitionTime": "2026-12-02T12:00:00Z"},
            ],
        }
    }  # fmt: skip
    control_plane.kubectl(
        "patch", "ks", "docs", "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    got = control_plane.kubectl("get", "ks", "docs", "-n", NAMESPACE)
    table = got.stdout.splitlines()
    assert len(table) == 2, got.stdout + got.stderr
    header, row = table
    at = header.index("PROGRESS")  # columns line up with the header; empty ones leave only spaces
    assert row[at:].split()[0] == "25/126", got.stdout
    stored = control_plane.get("ks", "docs", "-n", NAMESPACE)["status"]
    assert stored["progress"]["summary"] == "25/126"  # not pruned by the schema
    # The end removes it (a null in the merge patch): the column goes empty.
    control_plane.kubectl(
        "patch", "ks", "docs", "-n", NAMESPACE, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"progress": None}}),
    )  # fmt: skip
    assert "progress" not in control_plane.get("ks", "docs", "-n", NAMESPACE)["status"]
    control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
