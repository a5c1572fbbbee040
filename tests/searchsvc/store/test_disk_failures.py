"""A full disk or a deleted data directory, on the real service process and a real filesystem.

Edge maps its files into memory: a write into a full volume used to kill the process with
SIGBUS, with no answer and no log line, and again at every restart. A deleted data directory
went unnoticed while every flush failed. These tests mount a small ext4 image (what a
PersistentVolume is) or a tmpfs in a private mount namespace, fill it with a file, and check
what the service answers. They need root, like the rest of this suite's CI.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbsearch.errors import StoreUnavailableError
from kbsearch.store.edge.store import EdgeStore
from kbsearch.store.health import DATA_DIR_GONE, DISK_FULL, FLUSH_FAILING, StoreWatch
from tests.searchsvc.conftest import TEST_SIGNATURE
from tests.support.service_process import ServiceProcess
from tests.support.smalldisk import MIB, SmallDisk

RESERVE_MB = 8  # SEARCHSVC_MIN_FREE_DISK_MB for these tests


def document(topic: str, sections: int) -> str:
    """Markdown of `sections` sections (about one chunk each) that all mention `topic`."""
    body = " ".join(f"{topic} paragraph word{i}" for i in range(60))
    return "\n\n".join(f"## {topic} {n}\n\n{body} section{n}." for n in range(sections))


def put(service: ServiceProcess, uri: str, content: str, source: str = "docs"):
    body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": source}}
    return service.client.put("/api/v1/documents", json=body)


def search_uris(service: ServiceProcess, query: str) -> set[str]:
    response = service.client.post("/api/v1/search", json={"query": query, "limit": 10, "mode": "keyword"})
    assert response.status_code == 200, response.text
    return {hit["uri"] for hit in response.json()["results"]}


def listed_uris(service: ServiceProcess) -> set[str]:
    response = service.client.get("/api/v1/documents")
    assert response.status_code == 200, response.text
    return {d["uri"] for d in response.json()["documents"]}


def assert_store_unavailable(response, cause: str) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "STORE_UNAVAILABLE"
    assert error["details"]["cause"] == cause


def assert_reads_only(response, cause: str) -> None:
    """/readyz keeps the pod in its Service (reads work) and names why writes are refused."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "degraded"
    assert body["writes"]["code"] == "STORE_UNAVAILABLE" and body["writes"]["details"]["cause"] == cause


def logged_causes(service: ServiceProcess) -> list[str]:
    return [e["cause"] for e in service.log_entries() if e.get("level") == "ERROR" and "cause" in e]


@pytest.fixture
def disk(request, tmp_path) -> Iterator[SmallDisk]:
    """A small ext4 volume, or the (kind, size_mb) given by indirect parametrization."""
    kind, size_mb = getattr(request, "param", ("ext4", 64))
    with SmallDisk(tmp_path, kind=kind, size_mb=size_mb) as mounted:
        yield mounted


@pytest.fixture
def services() -> Iterator[list[ServiceProcess]]:
    """Services started by a test, stopped at its end: ask for it after `disk`, so they stop first."""
    started: list[ServiceProcess] = []
    yield started
    for service in started:
        service.stop()


def start(services: list, log: Path, data_dir: Path, disk: SmallDisk | None = None, **env: str) -> ServiceProcess:
    service = ServiceProcess(
        log,
        {"SEARCHSVC_DATA_DIR": str(data_dir), "SEARCHSVC_MIN_FREE_DISK_MB": str(RESERVE_MB), **env},
        prefix=disk.inside([]) if disk is not None else None,
    )
    services.append(service.start())
    return service


@pytest.mark.parametrize("disk", [("ext4", 64), ("tmpfs", 128)], indirect=True, ids=["ext4", "tmpfs"])
def test_a_full_disk_refuses_writes_keeps_reads_and_recovers(tmp_path, disk, services):
    # Flushing every write makes the state on disk before the fill the same on every run.
    service = start(
        services, tmp_path / "service.log", disk.mountpoint / "data", disk, SEARCHSVC_EDGE_FLUSH_INTERVAL_S="0"
    )
    service.wait_ready()
    assert put(service, "kb://a", document("alpha", 3)).status_code == 200

    disk.fill()  # to the last block
    # Big enough to need fresh blocks in the WAL and the segments: the old service died here.
    refused = put(service, "kb://b", document("bravo", 150))
    assert_store_unavailable(refused, DISK_FULL)
    assert refused.headers["Retry-After"] == "30"
    assert refused.json()["error"]["details"]["minFreeBytes"] == RESERVE_MB * MIB
    assert_store_unavailable(service.client.delete("/api/v1/documents", params={"uri": "kb://a"}), DISK_FULL)
    assert service.alive()

    assert search_uris(service, "alpha") == {"kb://a"}
    assert listed_uris(service) == {"kb://a"}
    assert service.client.get("/api/v1/sources").status_code == 200
    assert_reads_only(service.poll_readyz(200, state="degraded"), DISK_FULL)
    assert logged_causes(service).count(DISK_FULL) == 1, "the cause is logged once, not per request"
    assert service.alive()

    disk.free_all()
    service.poll_readyz(200, state="ready")
    assert put(service, "kb://b", document("bravo", 150)).json()["status"] == "created"
    assert search_uris(service, "bravo") == {"kb://b"}
    assert listed_uris(service) == {"kb://a", "kb://b"}
    assert any(e.get("message") == "the embedded store takes writes again" for e in service.log_entries())
    assert service.stop()


def test_a_restart_on_a_nearly_full_disk_serves_reads_and_refuses_writes(tmp_path, disk, services):
    data = disk.mountpoint / "data"
    first = start(services, tmp_path / "first.log", data, disk)
    first.wait_ready()
    assert put(first, "kb://a", document("alpha", 3)).status_code == 200
    assert first.stop()  # a clean stop flushes: nothing left to replay

    disk.fill(leave_bytes=RESERVE_MB * MIB // 4)
    second = start(services, tmp_path / "second.log", data, disk)
    second.wait_listening()
    assert_reads_only(second.poll_readyz(200, state="degraded"), DISK_FULL)
    assert search_uris(second, "alpha") == {"kb://a"}
    assert_store_unavailable(put(second, "kb://b", document("bravo", 3)), DISK_FULL)
    assert DISK_FULL in logged_causes(second)

    disk.free_all()
    second.poll_readyz(200, state="ready")
    assert put(second, "kb://b", document("bravo", 3)).json()["status"] == "created"


def test_a_restart_that_cannot_replay_its_log_exits_with_a_message_not_a_signal(tmp_path, disk, services):
    data = disk.mountpoint / "data"
    # No flush for an hour: the document lives only in the write-ahead log when we kill.
    first = start(services, tmp_path / "first.log", data, disk, SEARCHSVC_EDGE_FLUSH_INTERVAL_S="3600")
    first.wait_ready()
    assert put(first, "kb://big", document("alpha", 400)).status_code == 200
    first.kill()

    # Replaying 400 chunks takes far more than this: before, every start died of SIGBUS.
    disk.fill(leave_bytes=256 * 1024)
    second = start(services, tmp_path / "second.log", data, disk)
    code = second.wait_exit()
    assert code > 0, f"killed by signal {-code}" if code < 0 else code
    assert "cannot be opened with 0 MiB free" in second.log_text()
    assert "Free space or grow the volume" in second.log_text()

    disk.free_all()
    third = start(services, tmp_path / "third.log", data, disk)
    third.wait_ready()
    assert listed_uris(third) == {"kb://big"}, "the acknowledged write was replayed from the log"
    assert search_uris(third, "alpha") == {"kb://big"}


def remove_while_in_use(path: Path) -> None:
    """`rm -rf` under a live engine, which may add a segment file mid-walk: delete until it is gone."""
    for _ in range(20):
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            return
        except OSError:  # a directory filled up again between its walk and its rmdir
            continue
        return
    shutil.rmtree(path)


def test_a_deleted_data_directory_makes_the_service_unready_and_refuse_writes(tmp_path, services):
    data = tmp_path / "data"
    service = start(services, tmp_path / "service.log", data)
    service.wait_ready()
    assert put(service, "kb://a", document("alpha", 3)).status_code == 200

    remove_while_in_use(data)
    assert_store_unavailable(service.poll_readyz(503), DATA_DIR_GONE)
    assert_store_unavailable(put(service, "kb://b", document("bravo", 3)), DATA_DIR_GONE)

    # An empty directory in its place is not the store either: still refused.
    data.mkdir()
    assert_store_unavailable(put(service, "kb://c", document("charlie", 3)), DATA_DIR_GONE)
    assert_store_unavailable(service.client.get("/readyz"), DATA_DIR_GONE)
    assert service.alive()
    assert logged_causes(service) == [DATA_DIR_GONE], "logged once for the whole streak"


def test_a_write_under_way_may_finish_in_half_of_the_reserve_but_no_new_write_starts(disk):
    directory = disk.host_path(disk.mountpoint)
    watch = StoreWatch(directory, min_free_bytes=RESERVE_MB * MIB)
    watch.start()
    assert watch.problem() is None

    disk.fill(leave_bytes=RESERVE_MB * MIB * 3 // 4)
    assert watch.problem().cause == DISK_FULL
    assert watch.problem(under_way=True) is None, "room left for the rest of a write and its cleanup"

    disk.fill(leave_bytes=RESERVE_MB * MIB // 4)
    assert watch.problem(under_way=True).cause == DISK_FULL


def test_a_failing_flush_refuses_writes_logs_once_and_recovers_when_a_flush_succeeds(tmp_path, caplog):
    store = EdgeStore(tmp_path, "test", flush_interval_s=3600)  # the test runs the flusher's ticks itself
    store.open(TEST_SIGNATURE)
    try:
        store.write_document(_record("kb://a"), None)
        # A flush writes into the segment directories: moved away, every flush fails.
        segments, moved = tmp_path / "test" / "segments", tmp_path / "moved"
        segments.rename(moved)
        caplog.set_level(logging.INFO, logger="kbsearch.store.health")
        for _ in range(3):
            store._tick()
        problem = store.write_problem()
        assert problem is not None and problem.details["cause"] == FLUSH_FAILING
        with pytest.raises(StoreUnavailableError):
            store.write_document(_record("kb://b"), None)
        assert [r.cause for r in caplog.records if r.levelno == logging.ERROR] == [FLUSH_FAILING]

        moved.rename(segments)
        store._tick()
        assert store.write_problem() is None
        store.write_document(_record("kb://b"), None)
        assert store.get_document("kb://b") is not None
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
            "the embedded store takes writes again"
        ]
    finally:
        store.close()


def test_with_a_flush_per_write_a_failed_flush_answers_503_and_a_later_one_clears_it(tmp_path):
    store = EdgeStore(tmp_path, "test", flush_interval_s=0)
    store.open(TEST_SIGNATURE)
    try:
        segments, moved = tmp_path / "test" / "segments", tmp_path / "moved"
        segments.rename(moved)
        with pytest.raises(StoreUnavailableError) as refused:
            store.write_document(_record("kb://a"), None)
        assert refused.value.details["cause"] == FLUSH_FAILING
        assert store.write_problem().details["cause"] == FLUSH_FAILING

        moved.rename(segments)
        store._tick()  # the flusher retries the failed flush (every second on its own)
        assert store.write_problem() is None
        assert store.get_document("kb://a") is not None, (
            "a 503 after the update may have applied it: PUTs are idempotent"
        )
    finally:
        store.close()


def _record(uri: str):
    from kbsearch.models import DocumentRecord

    return DocumentRecord(
        uri=uri,
        source_identifier="s",
        checksum="sha256:x",
        chunks=0,
        metadata={},
        title=None,
        ingested_at="2026-01-01T00:00:00.000Z",
        chunker="c",
    )
