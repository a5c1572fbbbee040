"""The operator recovers from a real API server restart (kill -9) in the middle of a sync: the
index ends equal to the repository."""

from __future__ import annotations

from tests.kube.cluster import eventually, log_time
from tests.kube.support import Clusterwide, expected, source_manifest, synced_at


def test_an_api_server_restart_mid_sync_ends_with_the_index_equal_to_the_repository(
    clusterwide: Clusterwide,
) -> None:
    plane, search = clusterwide.plane, clusterwide.search
    namespace = clusterwide.namespace("restart")
    repo = clusterwide.repo("big")
    paths = [f"notes/note-{i:03}.md" for i in range(150)]
    for index, path in enumerate(paths):
        repo.write(path, f"# Note {index}\n\nBody of note {index}.\n")
    first = repo.commit("many")
    operator = clusterwide.start_operator()
    clusterwide.apply(source_manifest("big", namespace, repo.path, schedule="@every 2s"))
    # The operator has taken the object in hand (its finalizer is on) and is syncing: kill now.
    eventually(
        lambda: plane.get("ks", "big", "-n", namespace)["metadata"].get("finalizers"), what="the operator to pick it up"
    )

    began = log_time()
    plane.restart_apiserver()
    operator.restarts.append((began, log_time(2)))

    # Meanwhile the repository moves on; the next syncs must catch up.
    repo.remove(paths[0])
    repo.write("notes/new.md", "# New\n")
    second = repo.commit("after the restart")
    eventually(synced_at(plane, namespace, "big", second), what="the sync of the later commit", timeout_s=180)
    assert search.listing(f"{namespace}/big") == expected(repo, *paths[1:], "notes/new.md")
    assert first != second and operator.proc is not None and operator.proc.poll() is None
    plane.kubectl("delete", "ks", "big", "-n", namespace, "--timeout=90s")
