"""The embedded store's background HNSW build: a child process optimizes a copy, the store swaps it in.

Real Edge shards, real child processes, real kills. With indexing_threshold_kb=1 Edge builds an
HNSW graph even for these small segments; segments under full_scan_threshold are still searched
exactly, so results before and after a build must be identical.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import qdrant_edge

from kbsearch.models import Fusion, SearchFilter, SearchHit
from kbsearch.settings import Settings
from kbsearch.store.edge.indexer import BuildOutcome
from kbsearch.store.edge.layout import read_into_page_cache
from kbsearch.store.edge.optimize import IndexOptions
from kbsearch.store.edge.store import EdgeStore
from kbsearch.store.factory import build_store
from tests.searchsvc.conftest import TEST_SIGNATURE
from tests.searchsvc.store.edge_index_support import SMALL_SEGMENTS, fill, open_store
from tests.searchsvc.store.support import EMBEDDER, ingest, sparse_query
from tests.support.children import run_python

QUERIES = ["alpha beta", "gamma delta release notes", "kubernetes operator sync", "zeta"]


def answers(store: EdgeStore) -> dict[tuple[str, str], tuple[list[float], list[str]]]:
    out = {}
    for query in QUERIES:
        # Not hybrid: RRF ranks candidates by position, and tied candidates come in any order.
        for mode in ("dense", "keyword"):
            hits: list[SearchHit] = store.search(
                mode=mode,  # type: ignore[arg-type]
                dense=EMBEDDER.embed_query(query),
                sparse=sparse_query(query),
                filter=SearchFilter(),
                limit=10,
                candidates=50,
                fusion=Fusion(),
            )
            # Equal scores come in any order, and a tie at the cut may keep either hit: compare the
            # scores, and the hits that rank above the last score.
            scores = [round(h.score, 4) for h in hits]
            out[(query, mode)] = (scores, sorted(h.id for h in hits if round(h.score, 4) > min(scores, default=0)))
    return out


def shard_dirs(data_dir: Path) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.is_dir())


def test_a_build_indexes_every_vector_and_searches_answer_the_same(tmp_path: Path):
    store = open_store(tmp_path)
    try:
        fill(store, 40)
        before = answers(store)
        assert store.unindexed_vectors() == 200
        report = store.indexer.build_now()
        assert report.outcome is BuildOutcome.BUILT, report.detail
        assert store.unindexed_vectors() == 0
        assert store.last_swap["replayedWrites"] == 0
        assert store.last_swap["warmSeconds"] >= 0  # the new shard was read into the page cache first
        assert store.path == tmp_path / "test@1"
        assert shard_dirs(tmp_path) == ["test@1"]  # the replaced shard is gone
        assert answers(store) == before
        assert store.count() == (40, 200)
    finally:
        store.close()
    reopened = open_store(tmp_path)
    try:
        assert reopened.path == tmp_path / "test@1"
        assert answers(reopened) == before
    finally:
        reopened.close()


def segment_configs(shard_dir: Path) -> list[dict]:
    """Edge's own record of how each segment stores its parts (segment.json)."""
    return [json.loads((d / "segment.json").read_text())["config"] for d in (shard_dir / "segments").iterdir()]


def test_a_build_writes_segments_that_map_their_parts_from_files(tmp_path: Path):
    # The swap loads the built shard holding the interpreter lock: mapped parts keep that short.
    store = open_store(tmp_path)
    try:
        fill(store, 40)
        assert store.indexer.build_now().outcome is BuildOutcome.BUILT
        indexed = [c for c in segment_configs(store.path) if c["vector_data"]["dense"]["index"]["type"] == "hnsw"]
        assert indexed, "the build wrote no indexed segment"
        for config in indexed:
            assert config["vector_data"]["dense"]["index"]["options"]["memory"] == "cached"
            assert config["sparse_vector_data"]["bm25"]["index"]["index_type"] == "Mmap"
            assert config["id_tracker_memory"] == "cached"
    finally:
        store.close()


def scoped_search(store: EdgeStore) -> list[SearchHit]:
    """A keyword search filtered by source and URI prefix: served by the payload indexes."""
    scope = SearchFilter(source_identifiers=["src-1"], uri_prefix="docs/")
    return store.search(
        mode="keyword", dense=None, sparse=sparse_query("theta release"), filter=scope, limit=10, candidates=50,
        fusion=Fusion(),
    )  # fmt: skip


def test_payload_indexes_an_older_version_kept_in_ram_are_rebuilt_mapped_and_still_filter(tmp_path: Path):
    store = open_store(tmp_path, index=IndexOptions(threshold=0))
    try:
        for d in range(6):
            ingest(store, f"docs/{d}.md", [f"theta release {d}", "kubernetes operator"], source=f"src-{d % 2}")
        before = scoped_search(store)
    finally:
        store.close()
    shard = qdrant_edge.EdgeShard.load(str(tmp_path / "test"))
    for field in ("sourceIdentifier", "textHash", "chunkIndex"):  # as the version before kept them
        schema = (
            qdrant_edge.PayloadSchemaType.Integer if field == "chunkIndex" else qdrant_edge.PayloadSchemaType.Keyword
        )
        shard.update(qdrant_edge.UpdateOperation.create_field_index(field, schema))
    assert shard.info().payload_schema["sourceIdentifier"].params is None
    shard.flush()
    shard.close()

    reopened = open_store(tmp_path, index=IndexOptions(threshold=0))
    try:
        schema = reopened._s.info().payload_schema
        assert {field: getattr(info.params, "memory", None) for field, info in schema.items()} == dict.fromkeys(
            schema, qdrant_edge.Memory.Cached
        )
        after = scoped_search(reopened)
        assert [h.id for h in after] == [h.id for h in before]
        assert {h.uri for h in after} == {"docs/1.md", "docs/3.md", "docs/5.md"}
        assert reopened.count() == (6, 12)
    finally:
        reopened.close()


def test_writes_made_while_the_child_builds_reach_the_new_shard_and_survive_a_restart(tmp_path: Path):
    store = open_store(tmp_path)
    try:
        fill(store, 20)

        def write_during_build(event: str, pid: int) -> None:
            if event == "optimizing":
                fill(store, 5, first=100)  # new documents
                for n in range(70):  # more writes than are replayed under the lock
                    ingest(store, "docs/churn.md", [f"churn {n}"])
                store.delete_document("docs/0.md")
                ingest(store, "docs/1.md", ["a whole new text about theta"])  # a new version of a document

        store.indexer.on_child = write_during_build
        report = store.indexer.build_now()
        assert report.outcome is BuildOutcome.BUILT, report.detail
        after = answers(store)
        assert store.last_swap["replayedWrites"] > store.last_swap["replayedUnderLock"]
        assert store.count() == (25, 20 * 5 - 5 - 5 + 1 + 25 + 1)
        churn = store.get_document("docs/churn.md")
        assert churn is not None and churn.version == 70 and store.count_chunks("docs/churn.md", 70) == 1
        assert store.get_document("docs/0.md") is None
        assert store.count_chunks("docs/1.md") == 1
        assert store.get_document("docs/102.md") is not None
    finally:
        store.close()
    reopened = open_store(tmp_path)
    try:
        assert reopened.count() == (25, 117)
        assert answers(reopened) == after
        assert reopened.count_chunks("docs/1.md") == 1
    finally:
        reopened.close()


def test_a_killed_optimizer_child_leaves_the_live_store_as_it_was(tmp_path: Path):
    store = open_store(tmp_path)
    try:
        fill(store, 20)
        before = answers(store)
        killed: list[int] = []

        def kill_child(event: str, pid: int) -> None:
            if event == "optimizing" and not killed:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                fill(store, 2, first=200)  # writes between the kill and the parent noticing it

        store.indexer.on_child = kill_child
        report = store.indexer.build_now()
        assert killed and report.outcome is BuildOutcome.FAILED
        assert "signal 9" in report.detail and "out of memory" in report.detail  # what a pod's OOM kill looks like
        assert store.path == tmp_path / "test"
        assert shard_dirs(tmp_path) == ["test"]  # the copy is removed
        assert store.count() == (22, 110)
        fill(store, 1, first=300)  # writes go on as before
        assert store.count() == (23, 115)
        # A later build works.
        report = store.indexer.build_now()
        assert report.outcome is BuildOutcome.BUILT, report.detail
        assert store.count() == (23, 115)
        assert {k: v for k, v in answers(store).items() if k[1] == "dense"} != {}
    finally:
        store.close()
    reopened = open_store(tmp_path)
    try:
        assert reopened.count() == (23, 115)
        assert reopened.unindexed_vectors() == 0
    finally:
        reopened.close()
    assert before  # the first answers came from a store that was not indexed


def test_closing_the_store_during_a_build_kills_the_child_and_keeps_the_store(tmp_path: Path):
    store = open_store(tmp_path)
    fill(store, 20)
    closer: list[threading.Thread] = []
    children: list[int] = []

    def close_now(event: str, pid: int) -> None:
        if event == "optimizing" and not closer:
            children.append(pid)
            closer.append(threading.Thread(target=store.close))  # as the service's shutdown does
            closer[0].start()

    store.indexer.on_child = close_now
    report = store.indexer.build_now()
    closer[0].join()
    assert report.outcome is BuildOutcome.ABANDONED
    wait_for_exit(children[0])
    reopened = open_store(tmp_path)
    try:
        assert reopened.path == tmp_path / "test"
        assert shard_dirs(tmp_path) == ["test"]
        assert reopened.count() == (20, 100)
    finally:
        reopened.close()


def test_a_service_killed_during_a_build_reopens_with_every_write_and_no_stale_copy(tmp_path: Path):
    """A real process runs a build and is SIGKILLed while its child optimizes the copy."""
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from tests.searchsvc.store.edge_index_support import SMALL_SEGMENTS, fill, open_store\n"
        "store = open_store(Path(sys.argv[1]), flush_interval_s=3600)\n"  # never fsync'ed by the flusher
        "fill(store, 20)\n"
        "def die(event, pid):\n"
        "    if event == 'optimizing':\n"
        "        fill(store, 3, first=500)\n"  # logged for the swap that never comes
        "        Path(sys.argv[1], 'child.pid').write_text(str(pid))\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "store.indexer.on_child = die\n"
        "store.indexer.build_now()\n"
    )
    parent = run_python(script, str(tmp_path), timeout=300)
    assert parent.returncode == -9, parent.stderr
    assert (tmp_path / "test@1").is_dir()  # the copy the killed build left
    child = int((tmp_path / "child.pid").read_text())
    wait_for_exit(child)  # it dies with its parent (PR_SET_PDEATHSIG) rather than optimize for nobody
    store = open_store(tmp_path)
    try:
        assert store.path == tmp_path / "test"
        assert shard_dirs(tmp_path) == ["test"]
        assert store.count() == (23, 115)
        assert store.get_document("docs/502.md") is not None
    finally:
        store.close()


def test_the_indexer_builds_on_its_own_once_enough_vectors_are_unindexed(tmp_path: Path):
    store = open_store(tmp_path, index=IndexOptions(threshold=100, indexing_threshold_kb=1), index_interval_s=0.05)
    try:
        fill(store, 10)  # 50 vectors: under the threshold
        fill(store, 20, first=10)
        deadline = time.monotonic() + 240
        while store.path == tmp_path / "test" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.path == tmp_path / "test@1"
        assert store.count() == (30, 150)
    finally:
        store.close()


def test_a_build_that_nears_the_memory_limit_is_warned_of_with_its_peak(tmp_path: Path, caplog):
    for limit, warned in ((1 << 40, False), (64 << 20, True)):
        store = open_store(tmp_path / str(limit), index=replace(SMALL_SEGMENTS, memory_limit_bytes=limit))
        try:
            fill(store, 10)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="kbsearch.store.edge.indexer"):
                report = store.indexer.build_now()
        finally:
            store.close()
        assert report.outcome is BuildOutcome.BUILT, report.detail
        # The service's resident memory and the child's own peak: more than an interpreter each.
        assert report.peak_bytes > 2 * (20 << 20)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if warned:
            assert len(warnings) == 1
            assert f"peaked at {report.peak_bytes >> 20} MiB of the 64 MiB memory limit" in warnings[0]
            assert "Qdrant server" in warnings[0]
        else:
            assert warnings == []


def test_the_service_settings_configure_the_background_build(tmp_path: Path):
    settings = Settings(data_dir=tmp_path, edge_index_threshold=5_000, edge_index_threads=2, memory_limit_mb=3072)
    store = build_store(settings.storage, settings.http.memory_limit_bytes())
    assert isinstance(store, EdgeStore)
    assert store.indexer.options == IndexOptions(threshold=5_000, threads=2, memory_limit_bytes=3072 << 20)
    store.open(TEST_SIGNATURE)
    try:
        assert store.indexer.running
    finally:
        store.close()
    assert not store.indexer.running  # it stops with the store


def test_a_threshold_of_zero_never_starts_the_indexer(tmp_path: Path):
    store = open_store(tmp_path, index=IndexOptions(threshold=0), index_interval_s=0.01)
    try:
        fill(store, 5)
        assert not store.indexer.running
    finally:
        store.close()


def wait_for_exit(pid: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):  # dead, waiting for a reaper that may never come in a container
            return
        time.sleep(0.05)
    raise AssertionError(f"the optimizer child {pid} outlived its parent")


def test_reading_a_shard_into_the_page_cache_reads_every_byte_of_it(tmp_path: Path):
    store = open_store(tmp_path)
    try:
        fill(store, 10)
        store._s.flush()
        size = sum(p.stat().st_size for p in store.path.rglob("*") if p.is_file())
        assert size > 0
        assert read_into_page_cache(store.path, chunk_bytes=4096) == size
    finally:
        store.close()
