"""Drift between syncs on a real API server: documents deleted in the search service behind the
operator's back are noticed by its drift check (KBOPERATOR_DRIFT_CHECK_INTERVAL_SECONDS, here 1s),
not at the next hourly sync. spec.driftPolicy Auto re-syncs at once; Manual shows the
DriftDetected condition and a Warning event, and waits for a requested sync."""

from __future__ import annotations

import json
from typing import Any

from tests.kube.cluster import SearchService, eventually
from tests.kube.support import Clusterwide, expected, source_manifest, status, synced_at
from tests.support.controlplane import ControlPlane
from tests.support.git import WorkRepo

PATHS = ("a.md", "b.md", "c.md")


def drift_condition(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    conditions = status(plane, namespace, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "DriftDetected"), None)


def drift_events(plane: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason=DriftDetected"
    listed = plane.kubectl("get", "events", "-n", namespace, "--field-selector", selector, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def delete_behind_the_operators_back(search: SearchService, source_id: str, path: str) -> None:
    """DELETE /api/v1/documents of one document, as another writer of the service would."""
    params = {"sourceIdentifier": source_id, "limit": "1000"}
    documents = search.get("/api/v1/documents", params=params).json()["documents"]
    uri = next(d["uri"] for d in documents if d["metadata"]["path"] == path)
    headers = {"Authorization": f"Bearer {search.api_token}"}
    gone = search.process.client.delete("/api/v1/documents", params={"uri": uri}, headers=headers)
    assert gone.status_code == 200 and gone.json()["chunksDeleted"] >= 1, gone.text


def test_drift_between_syncs_is_repaired_at_once_under_auto_and_waits_for_a_request_under_manual(
    clusterwide: Clusterwide,
) -> None:
    plane, search = clusterwide.plane, clusterwide.search
    namespace = clusterwide.namespace("drift")
    clusterwide.start_operator(DRIFT_CHECK_INTERVAL_SECONDS="1")
    repos: dict[str, WorkRepo] = {}
    for policy in ("Auto", "Manual"):
        name = f"drift-{policy.lower()}"
        repos[name] = repo = clusterwide.repo(name)
        for path in PATHS:
            repo.write(path, f"# {path}\n\nAbout {path}.\n")
        repo.commit("three")
        clusterwide.apply(source_manifest(name, namespace, repo.path, driftPolicy=policy))
    first: dict[str, dict[str, Any]] = {}
    for name, repo in repos.items():
        first[name] = eventually(synced_at(plane, namespace, name, repo.head()), what=f"the first sync of {name}")
        assert first[name]["expectedDocumentCount"] == 3
        # The checks run: the first one that finds nothing says so in the condition.
        clean = eventually(lambda n=name: drift_condition(plane, namespace, n), what=f"the first check of {name}")
        assert (clean["status"], clean["reason"]) == ("False", "NoDrift") and "(3 documents)" in clean["message"]
    auto, manual = f"{namespace}/drift-auto", f"{namespace}/drift-manual"

    # Auto: the check notices, warns, and a full re-sync puts the document back.
    delete_behind_the_operators_back(search, auto, "b.md")
    warned = eventually(lambda: drift_events(plane, namespace, "drift-auto"), what="the DriftDetected event (Auto)")
    assert warned[0]["type"] == "Warning" and "holds 2 documents of this source, the last sync left 3" in warned[0][
        "message"
    ] and "a full re-sync starts now" in warned[0]["message"]  # fmt: skip

    def repaired(name: str) -> dict[str, Any] | None:
        found = drift_condition(plane, namespace, name)
        return found if found and found["reason"] == "DriftRepaired" else None

    fixed = eventually(lambda: repaired("drift-auto"), what="the drift repaired (Auto)")
    assert fixed["status"] == "False" and "holds 2 documents" in fixed["message"]
    after = status(plane, namespace, "drift-auto")
    assert after["phase"] == "Synced" and after["lastSync"]["full"] is True and after["lastSync"]["added"] == 1
    assert after["expectedDocumentCount"] == 3
    assert search.listing(auto) == expected(repos["drift-auto"], *PATHS)

    # Manual: the condition turns True with a Warning event, and no sync runs.
    delete_behind_the_operators_back(search, manual, "b.md")

    def drifted(name: str, held: int) -> dict[str, Any] | None:
        found = drift_condition(plane, namespace, name)
        ok = found and found["status"] == "True" and f"holds {held} documents" in found["message"]
        return found if ok else None

    shown = eventually(lambda: drifted("drift-manual", 2), what="the DriftDetected condition (Manual)")
    assert shown["reason"] == "ServiceDrifted" and "kb.knowledgebase.dev/sync-requested-at" in shown["message"]
    events = eventually(lambda: drift_events(plane, namespace, "drift-manual"), what="the DriftDetected event")
    assert events[0]["type"] == "Warning"
    # Later checks keep looking (they see the next deletion too), and still nothing re-syncs.
    delete_behind_the_operators_back(search, manual, "c.md")
    eventually(lambda: drifted("drift-manual", 1), what="a later check's finding (Manual)")
    waiting = status(plane, namespace, "drift-manual")
    assert waiting["lastSyncTime"] == first["drift-manual"]["lastSyncTime"] and waiting["phase"] == "Synced"
    assert search.listing(manual) == expected(repos["drift-manual"], "a.md")
    assert sum(e.get("count", 1) for e in drift_events(plane, namespace, "drift-manual")) == 1  # one per finding

    # A requested sync repairs it, and clears the condition.
    request = "2026-02-01T00:00:00Z"
    plane.kubectl(
        "annotate", "ks", "drift-manual", "-n", namespace, f"kb.knowledgebase.dev/sync-requested-at={request}"
    )
    fixed = eventually(lambda: repaired("drift-manual"), what="the requested sync's repair (Manual)")
    done = status(plane, namespace, "drift-manual")
    assert done["lastHandledSyncRequest"] == request and done["lastSync"]["full"] is True
    assert search.listing(manual) == expected(repos["drift-manual"], *PATHS)
    for name in repos:
        plane.kubectl("delete", "ks", name, "-n", namespace, "--timeout=90s")
