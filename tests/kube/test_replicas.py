"""Two operator replicas with kopf peering (operator.replicas=2): exactly one works; kill -9 the
working one and the other takes over once its peering record expires. No sync is lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.kube.cluster import Operator, Release, SearchService, eventually, install
from tests.kube.support import apply, expected, source_manifest, synced_at
from tests.support.controlplane import ControlPlane
from tests.support.git import WorkRepo

HA = Release("kbha", "kb-ha", ("team-ha",))
LIFETIME = 10  # seconds; the chart's default is 60


def test_the_standby_replica_takes_over_after_a_kill_9(
    control_plane: ControlPlane,
    releases: dict[str, Release],
    search: SearchService,
    run_operator: Callable[..., Operator],
    operator_root: Path,
    tmp_path: Path,
) -> None:
    plane = control_plane
    install(plane, HA, "operator.replicas=2", f"operator.peering.lifetimeSeconds={LIFETIME}")
    (namespace,) = HA.watch
    peering = plane.get("kopfpeering", HA.operator_account, "-n", namespace)
    assert peering["kind"] == "KopfPeering"
    deployment = plane.get("deployment", HA.operator_account, "-n", HA.namespace)
    assert deployment["spec"]["replicas"] == 2
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KBOPERATOR_PEERING_NAME"] == HA.operator_account
    peers = {"PEERING_NAME": HA.operator_account, "PEERING_LIFETIME_SECONDS": str(LIFETIME)}

    repo = WorkRepo(operator_root.parent / "repos" / "ha")
    repo.write("a.md", "# A\n")
    first = repo.commit("first")
    active = run_operator(HA, PEERING_PRIORITY="200", **peers)
    apply(plane, tmp_path, source_manifest("ha", namespace, repo.path, schedule="@every 2s"))
    eventually(synced_at(plane, namespace, "ha", first), what="the active replica's sync")

    standby = run_operator(HA, PEERING_PRIORITY="100", **peers)

    def priorities() -> list[int]:
        peers = plane.get("kopfpeering", HA.operator_account, "-n", namespace).get("status") or {}
        return sorted(int(peer["priority"]) for peer in peers.values())

    # kopf starts every replica paused and resumes only the one with no higher-priority peer.
    eventually(lambda: priorities() == [100, 200], what="both replicas in the peering object")
    repo.write("b.md", "# B\n")
    second = repo.commit("second")
    eventually(synced_at(plane, namespace, "ha", second), what="the active replica's next sync")
    # The standby has not resumed, nor touched the source, while the active one lives.
    assert "Resuming operations" not in standby.text()
    assert f"[{namespace}/ha]" not in standby.text()

    active.kill()  # kill -9: no goodbye, its peering record stays until it expires
    repo.write("c.md", "# C\n")
    third = repo.commit("third")
    eventually(synced_at(plane, namespace, "ha", third), what="the standby to take over", timeout_s=120)
    assert "Resuming operations after the pause" in standby.text()
    assert search.listing(f"{namespace}/ha") == expected(repo, "a.md", "b.md", "c.md")
    plane.kubectl("delete", "ks", "ha", "-n", namespace, "--timeout=90s")
