"""Back up the embedded store and restore it, as docs/operations/backup.md says, on the real service.

The documents, the sync statuses and the query log live only in the store; the backup is a tar of
the data directory's collections taken while the service is stopped, and the restore unpacks it
into an empty data directory that a new service opens.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from tests.support.service_process import ServiceProcess
from tests.support.sync_reports import report, status_path

TOKEN = "backup-admin-token-123"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SOURCE = "team/handbook"
DOCS = {
    f"https://git.example/handbook/{name}.md": f"# {name.title()}\n\n{text}"
    for name, text in {
        "deploys": "Roll back a release with helm rollback and check the pods.",
        "oncall": "The on-call engineer answers pages within fifteen minutes.",
        "backups": "Snapshots of the store are taken nightly and kept for a week.",
    }.items()
}
QUERIES = ["helm rollback", "on-call pages", "nightly snapshots"]


def start(root: Path, data: Path) -> ServiceProcess:
    env = {"SEARCHSVC_DATA_DIR": str(data), "SEARCHSVC_API_TOKEN": TOKEN}
    process = ServiceProcess(root / f"{data.name}.log", env).start()
    process.wait_ready()
    return process


def state(process: ServiceProcess) -> dict[str, object]:
    """What a restore must bring back: documents, sources with their sync status, searches, the query log.

    The query log is read first, before this call's own searches are logged (in the background).
    """
    client = process.client
    insights = client.get("/api/v1/insights", params={"window": "24h"}, headers=AUTH).json()
    documents = client.get("/api/v1/documents", headers=AUTH).json()["documents"]
    sources = client.get("/api/v1/sources", headers=AUTH).json()["sources"]
    searches = {
        # Sorted: chunks with equal scores may come in either order.
        q: sorted(
            (r["id"], round(r["score"], 6)) for r in client.get("/api/v1/search", params={"q": q}).json()["results"]
        )
        for q in QUERIES
    }
    return {
        "documents": documents,
        "sources": sources,
        "searches": searches,
        "logged": sorted((q["query"], q["count"]) for q in insights["topQueries"]),
    }


def back_up(data: Path, archive: Path) -> None:
    # The collections only: data/.onnx holds the exported model, made again at start.
    with tarfile.open(archive, "w:gz") as tar:
        for collection in sorted(p for p in data.iterdir() if not p.name.startswith(".")):
            tar.add(collection, arcname=collection.name)


def restore(archive: Path, data: Path) -> None:
    data.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(data, filter="data")


def test_a_stopped_services_data_directory_backs_up_and_restores_everything(tmp_path):
    original = tmp_path / "data"
    process = start(tmp_path, original)
    try:
        for uri, text in DOCS.items():
            body = {"uri": uri, "content": text, "metadata": {"sourceIdentifier": SOURCE}}
            assert process.client.put("/api/v1/documents", json=body, headers=AUTH).status_code == 200
        assert process.client.put(status_path(SOURCE), json=report(), headers=AUTH).status_code == 200
        for query in QUERIES:  # the query log records them
            assert process.client.get("/api/v1/search", params={"q": query}).status_code == 200
    finally:
        assert process.stop(), "the service did not shut down cleanly"
    # A second run on the original directory shows what the backup must hold (its own searches are
    # logged too, so the backup is taken after it, from the directory as it then is).
    process = start(tmp_path, original)
    try:
        before = state(process)
    finally:
        assert process.stop()
    assert len(before["documents"]) == 3 and before["sources"][0]["sync"]["phase"] == "partial"
    assert all(before["searches"].values()) and ("helm rollback", 1) in before["logged"]

    archive = tmp_path / "kb-backup.tar.gz"
    back_up(original, archive)
    restored = tmp_path / "restored"
    restore(archive, restored)
    process = start(tmp_path, restored)
    try:
        after = state(process)
    finally:
        process.stop()
    assert after["documents"] == before["documents"]
    assert after["sources"] == before["sources"]
    assert after["searches"] == before["searches"]
    # The restored log has what was logged before the backup: the first run's searches and the
    # second run's (state()'s, flushed when that service stopped).
    assert after["logged"] == sorted((query, count + 1) for query, count in before["logged"])
