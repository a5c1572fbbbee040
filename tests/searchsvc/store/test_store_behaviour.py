"""One behaviour suite for every vector store: embedded Qdrant Edge, qdrant-client's local mode, a Qdrant server."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import qdrant_edge

from kbsearch.errors import ConfigurationError, InvalidRequestError, StoreUnavailableError
from kbsearch.models import (
    INCOMPLETE,
    DocumentRecord,
    FileIssue,
    Fusion,
    QueryLogEntry,
    SearchFilter,
    SourceStats,
    SourceStatus,
    SyncStatus,
    chunk_point_id,
    document_point_id,
)
from kbsearch.settings import Settings
from kbsearch.store import conditions as cd
from kbsearch.store import signature as sg
from kbsearch.store.base import VectorStore
from kbsearch.store.edge.store import EdgeStore
from kbsearch.store.factory import build_store, query_log_beside
from kbsearch.store.qdrant_server import QdrantServerStore
from kbsearch.store.querylog import QueryLogStore, entry_from_payload
from tests.searchsvc.conftest import TEST_SIGNATURE, StoreOpener
from tests.searchsvc.store.support import (
    EMBEDDER,
    RRF_60,
    all_documents,
    ingest,
    ingest_bulk,
    make_chunks,
    make_record,
    put_record,
    sparse_query,
)
from tests.support.children import child_env


def search(
    store: VectorStore,
    query: str,
    *,
    mode: str = "hybrid",
    limit: int = 10,
    candidates: int = 100,
    fusion: Fusion = RRF_60,
    **flt,
):
    return store.search(
        mode=mode,
        dense=EMBEDDER.embed_query(query),
        sparse=sparse_query(query),
        filter=SearchFilter(**flt),
        limit=limit,
        candidates=candidates,
        fusion=fusion,
    )


# --- open, signature, persistence -----------------------------------------------------------


def test_open_creates_an_empty_collection(store: VectorStore):
    assert store.count() == (0, 0)
    assert store.list_sources() == []
    assert store.list_documents(source_identifier=None, uri_prefix=None, limit=10, cursor=None) == ([], None)
    # The signature point is stored but is neither a document, a chunk nor a search hit.
    assert search(store, "anything at all") == []


def test_a_reopened_store_keeps_its_data(store_opener: StoreOpener):
    store = store_opener.open()
    record = ingest(store, "docs/a.md", ["alpha beta", "gamma delta"], metadata={"team": "x"})
    vectors = store.reusable_vectors("docs/a.md", ["hash-docs/a.md-0"])
    assert list(vectors) == ["hash-docs/a.md-0"]
    store.close()

    reopened = store_opener.open()
    assert reopened.get_document("docs/a.md") == record
    assert reopened.count() == (1, 2)
    assert reopened.reusable_vectors("docs/a.md", ["hash-docs/a.md-0"]) == vectors
    assert [h.uri for h in search(reopened, "gamma delta", mode="keyword")] == ["docs/a.md"]


def test_edge_writes_survive_a_killed_process(tmp_path: Path):
    """The WAL alone must bring back writes of a process that died without closing."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from kbsearch.store.edge.store import EdgeStore
        from tests.searchsvc.store.support import ingest
        from tests.searchsvc.conftest import TEST_SIGNATURE
        store = EdgeStore({str(tmp_path)!r}, "test")
        store.open(TEST_SIGNATURE)
        ingest(store, "docs/crash.md", ["written before the crash"])
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    child = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr

    store = EdgeStore(tmp_path, "test")
    store.open(TEST_SIGNATURE)
    try:
        assert store.count() == (1, 1)
        assert store.get_document("docs/crash.md") is not None
    finally:
        store.close()


@pytest.mark.parametrize(
    "other",
    [
        replace(TEST_SIGNATURE, embedder_model="other-model"),
        replace(TEST_SIGNATURE, dimensions=32),
        replace(TEST_SIGNATURE, sparse_encoder="another-bm25"),
    ],
    ids=["model", "dimensions", "sparse"],
)
def test_a_different_signature_is_refused(store_opener: StoreOpener, other):
    store = store_opener.open()
    ingest(store, "docs/a.md", ["alpha"])
    store.close()

    with pytest.raises(ConfigurationError) as refused:
        store_opener.open(other)
    message = str(refused.value)
    assert f"dimensions={TEST_SIGNATURE.dimensions}" in message and f"dimensions={other.dimensions}" in message
    assert TEST_SIGNATURE.embedder_model in message and other.embedder_model in message
    assert TEST_SIGNATURE.sparse_encoder in message and other.sparse_encoder in message
    assert "SEARCHSVC_COLLECTION" in message and "re-sync" in message

    # The refusal changed nothing: the right signature still opens the same data.
    assert store_opener.open().count() == (1, 1)


def test_edge_refuses_a_second_open_of_the_same_directory(tmp_path: Path):
    first = EdgeStore(tmp_path, "test")
    first.open(TEST_SIGNATURE)
    ingest(first, "docs/a.md", ["before"])
    second = EdgeStore(tmp_path, "test")
    with pytest.raises(ConfigurationError, match="Another process holds the data directory"):
        second.open(TEST_SIGNATURE)
    # The refused open must not have touched the live shard: its writes still flush.
    ingest(first, "docs/b.md", ["after"])
    first.close()
    second.open(TEST_SIGNATURE)  # free again once the holder closed it
    assert second.count() == (2, 2)
    second.close()


HOLD_THEN_WRITE = """
import sys
from kbsearch.store.edge.store import EdgeStore
from tests.searchsvc.store.support import ingest
from tests.searchsvc.conftest import TEST_SIGNATURE
store = EdgeStore(sys.argv[1], "test")
store.open(TEST_SIGNATURE)
print("open", flush=True)
sys.stdin.readline()  # hold the directory until the parent has tried to open it
ingest(store, "docs/child.md", ["written after the refused open"])
store.close()
print("closed", flush=True)
"""


def test_edge_refuses_a_directory_held_by_another_process(tmp_path: Path):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_WRITE, str(tmp_path)],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "open", child.stderr.read()
        with pytest.raises(ConfigurationError, match="Another process holds the data directory"):
            EdgeStore(tmp_path, "test").open(TEST_SIGNATURE)
        out, err = child.communicate("go\n", timeout=120)
        assert child.returncode == 0 and out.strip() == "closed", err  # the holder still flushed
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()

    store = EdgeStore(tmp_path, "test")
    store.open(TEST_SIGNATURE)
    assert store.get_document("docs/child.md") is not None
    store.close()


# --- documents and chunks ---------------------------------------------------------------------


def test_upsert_then_read_back_records_and_vectors(store: VectorStore):
    record = ingest(store, "docs/a.md", ["alpha beta", "gamma delta", "epsilon"], metadata={"team": "x", "n": 2})
    assert store.get_document("docs/a.md") == record
    assert store.get_document("docs/missing.md") is None

    wanted = [f"hash-docs/a.md-{i}" for i in range(3)]
    vectors = store.reusable_vectors("docs/a.md", [*wanted, "hash-docs/a.md-3"])
    assert sorted(vectors) == sorted(wanted)  # a hash no stored chunk carries is absent
    expected = EMBEDDER.embed_documents(["alpha beta", "gamma delta", "epsilon"])
    for i, text_hash in enumerate(wanted):
        assert vectors[text_hash] == pytest.approx(expected[i], abs=1e-6)

    # Re-upserting the same ids replaces, never duplicates.
    ingest(store, "docs/a.md", ["alpha beta", "gamma delta", "epsilon"])
    assert store.count() == (1, 3)


def chunk_texts(store: VectorStore, uri: str, indexes: range) -> dict[int, str]:
    """The stored text of each chunk of `uri` that exists, by index (through search)."""
    hits = store.search(
        mode="keyword",
        dense=None,
        sparse=sparse_query("chunk text version"),
        filter=SearchFilter(uri_prefix=uri),
        limit=100,
        candidates=100,
        fusion=Fusion(rrf_k=60),
    )
    return {h.chunk_index: h.content for h in hits if h.uri == uri and h.chunk_index in indexes}


def test_document_chunks_reads_a_range_in_order_by_id(store: VectorStore):
    texts = [f"chunk number {i}" for i in range(7)]
    points = make_chunks("doc://a", texts, source="s")
    for i, point in enumerate(points):
        point.start, point.end = i * 100, i * 100 + len(point.text)
    store.upsert_chunks(points[::-1])  # written out of order
    store.upsert_chunks(make_chunks("doc://b", ["another document"], source="s"))

    middle = store.document_chunks("doc://a", 2, 5)
    assert [c.chunk_index for c in middle] == [2, 3, 4]
    assert [c.content for c in middle] == texts[2:5]
    assert middle[0].start == 200 and middle[0].end == 200 + len(texts[2])
    assert middle[0].headings == ["Top", "Section 2"] and middle[0].title == "Title of doc://a"
    assert middle[0].source_identifier == "s" and middle[0].total_chunks == 7
    assert [c.chunk_index for c in store.document_chunks("doc://a", 0, 1000)] == list(range(7))
    assert store.document_chunks("doc://a", 7, 9) == []
    assert store.document_chunks("doc://missing", 0, 3) == []
    # Chunks written before offsets were stored read back with None.
    assert store.document_chunks("doc://b", 0, 1)[0].start is None


def test_delete_chunks_takes_a_version_range(store: VectorStore):
    store.upsert_chunks(make_chunks("docs/a.md", ["chunk text 0", "chunk text 1"], source="s", version=3))
    store.upsert_chunks(make_chunks("docs/a.md", ["x", "x", "chunk text 2", "chunk text 3"], source="s", version=5)[2:])
    store.upsert_chunks(make_chunks("docs/b.md", ["other chunk text"], source="s", version=1))

    assert store.count_chunks("docs/a.md") == 4
    assert store.count_chunks("docs/a.md", 3) == 2 and store.count_chunks("docs/a.md", 5) == 2
    assert store.delete_chunks("docs/a.md", None, 4) == 2  # the older version only
    assert sorted(chunk_texts(store, "docs/a.md", range(10))) == [2, 3]
    assert store.delete_chunks("docs/a.md", 5, 5) == 2
    assert store.delete_chunks("docs/a.md") == 0
    assert store.count() == (0, 1)  # docs/b.md untouched


def test_a_record_is_written_only_over_the_version_its_writer_read(store: VectorStore):
    first = make_record("docs/a.md", 0, source="s", version=10)
    assert store.write_document(first, None)  # none stored: inserted
    again = make_record("docs/a.md", 0, source="s", version=11)
    assert not store.write_document(again, None)  # one is stored now
    assert not store.write_document(again, 9)  # not the stored version
    assert store.get_document("docs/a.md") == first
    assert store.write_document(again, 10)
    assert store.get_document("docs/a.md") == again

    store.delete_record("docs/a.md", 10)  # an older version: kept
    assert store.get_document("docs/a.md") == again
    store.delete_record("docs/a.md", 11)
    assert store.get_document("docs/a.md") is None


def test_a_chunk_is_never_overwritten_by_an_older_version(store: VectorStore):
    store.upsert_chunks(make_chunks("docs/a.md", ["chunk text new 0", "chunk text new 1"], source="s", version=7))
    # A slower, older writer: its chunk 0 and 1 lose, its chunk 2 (absent) is inserted.
    store.upsert_chunks(
        make_chunks("docs/a.md", ["chunk text old 0", "chunk text old 1", "chunk text old 2"], source="s", version=5)
    )
    assert chunk_texts(store, "docs/a.md", range(3)) == {
        0: "chunk text new 0",
        1: "chunk text new 1",
        2: "chunk text old 2",
    }
    assert store.count_chunks("docs/a.md", 5) == 1
    # The same or a newer version overwrites.
    store.upsert_chunks(make_chunks("docs/a.md", ["chunk text same 0"], source="s", version=7))
    store.upsert_chunks(make_chunks("docs/a.md", ["x", "chunk text newer 1"], source="s", version=9)[1:])
    assert chunk_texts(store, "docs/a.md", range(2)) == {0: "chunk text same 0", 1: "chunk text newer 1"}


def raw_upsert(store: VectorStore, point_id: str, payload: dict, dense: list[float] | None = None) -> None:
    """A point written as an older version of the service did: straight through the vendor API."""
    if isinstance(store, EdgeStore):
        vectors = {"dense": dense} if dense else {}
        store._s.update(qdrant_edge.UpdateOperation.upsert_points([qdrant_edge.Point(point_id, vectors, payload)]))
    else:
        from qdrant_client import models as qm

        vectors = {"dense": dense} if dense else {}
        store.client.upsert(store.collection, [qm.PointStruct(id=point_id, vector=vectors, payload=payload)])


def test_points_from_before_versions_count_as_version_0(store: VectorStore):
    uri = "docs/old.md"
    raw_upsert(
        store,
        document_point_id(uri),
        {
            "kind": "document",
            "uri": uri,
            "sourceIdentifier": "s",
            "checksum": "sha256:old",
            "chunks": 1,
            "metadata": {"team": "x"},
            "title": None,
            "ingestedAt": "2025-01-01T00:00:00.000Z",
            "chunker": "c",
        },
    )
    raw_upsert(
        store,
        chunk_point_id(uri, 0),
        {
            "kind": "chunk",
            "uri": uri,
            "sourceIdentifier": "s",
            "chunkIndex": 0,
            "totalChunks": 1,
            "content": "chunk text old",
            "textHash": "h",
            "title": None,
            "tags": [],
            "headings": [],
            "metadata": {"team": "x"},
        },
        dense=EMBEDDER.embed_query("chunk text old"),
    )
    old = store.get_document(uri)
    assert (old.version, old.write_id, old.metadata) == (0, None, {"team": "x"})
    assert store.count_chunks(uri, 0) == 1
    store.upsert_chunks(make_chunks(uri, ["chunk text new"], source="s", version=4))  # overwrites it
    assert store.count_chunks(uri, 4) == 1
    assert store.write_document(make_record(uri, 1, source="s", version=4), 0)


def test_the_collection_epoch_is_made_once_and_kept(store_opener: StoreOpener):
    store = store_opener.open()
    epoch = store.collection_epoch()
    assert len(epoch) == 32 and int(epoch, 16) >= 0  # uuid4 hex
    ingest(store, "docs/a.md", ["alpha"])
    store.close()
    assert store_opener.open().collection_epoch() == epoch

    other = store_opener.sibling("another")
    try:
        assert other.open().collection_epoch() != epoch  # a new collection, a new epoch
    finally:
        other.close_all()


def test_a_collection_from_before_epochs_gets_one_on_open(store_opener: StoreOpener):
    store = store_opener.open()
    signature = {
        "kind": "collection",
        "embedderProvider": TEST_SIGNATURE.embedder_provider,
        "embedderModel": TEST_SIGNATURE.embedder_model,
        "dimensions": TEST_SIGNATURE.dimensions,
        "sparseEncoder": TEST_SIGNATURE.sparse_encoder,
    }
    raw_upsert(store, sg.SIGNATURE_POINT_ID, signature)  # as written before epochs existed
    store.close()
    reopened = store_opener.open()
    epoch = reopened.collection_epoch()
    reopened.close()
    assert store_opener.open().collection_epoch() == epoch


def test_source_status_counts_with_filters(store: VectorStore):
    ingest(store, "a/1.md", ["x", "y"], source="alpha", ingested_at="2026-03-01T10:00:00.000Z")
    ingest(store, "a/2.md", ["x"], source="alpha", ingested_at="2026-03-02T09:00:00.000Z")
    ingest(store, "a/3.md", ["x"], source="alpha", ingested_at="2026-02-01T00:00:00.000Z")
    put_record(
        store, make_record("a/4.md", 0, source="alpha", checksum=INCOMPLETE, ingested_at="2026-01-01T00:00:00.000Z")
    )
    ingest(store, "b/1.md", ["x", "y", "z"], source="beta", ingested_at="2026-04-01T00:00:00.000Z")

    assert store.source_status("alpha") == SourceStatus("alpha", 4, 4, 1, "2026-03-02T09:00:00.000Z")
    assert store.source_status("beta") == SourceStatus("beta", 1, 3, 0, "2026-04-01T00:00:00.000Z")
    assert store.source_status("nobody") == SourceStatus("nobody", 0, 0, 0, None)


def test_repair_finds_incomplete_records_and_chunks_without_records(store: VectorStore):
    ingest(store, "docs/done.md", ["x"])
    put_record(store, make_record("docs/half.md", 0, source="s", checksum=INCOMPLETE, version=2))
    store.upsert_chunks(make_chunks("docs/half.md", ["x", "y"], source="s", version=2))
    store.upsert_chunks(make_chunks("docs/orphan.md", ["x", "y", "z"], source="s", version=1))

    assert [r.uri for r in store.incomplete_documents()] == ["docs/half.md"]
    assert sorted(store.chunk_uris()) == ["docs/done.md", "docs/half.md", "docs/orphan.md"]
    assert store.existing_records(["docs/done.md", "docs/half.md", "docs/orphan.md", "nope"]) == {
        "docs/done.md",
        "docs/half.md",
    }


# --- metadata: once per document ---------------------------------------------------------------


def raw_chunk_payloads(store: VectorStore) -> list[dict]:
    if isinstance(store, EdgeStore):
        flt = qdrant_edge.Filter(must=[qdrant_edge.FieldCondition("kind", match=qdrant_edge.MatchValue("chunk"))])
        records, _ = store._s.scroll(qdrant_edge.ScrollRequest(limit=10_000, filter=flt, with_payload=True))
    else:
        from qdrant_client import models as qm

        flt = qm.Filter(must=[qm.FieldCondition(key="kind", match=qm.MatchValue(value="chunk"))])
        records, _ = store.client.scroll(store.collection, scroll_filter=flt, limit=10_000, with_payload=True)
    return [dict(r.payload or {}) for r in records]


def test_metadata_is_stored_on_the_record_only(store: VectorStore):
    metadata = {"team": "platform", "labels": ["a", "b"], "blob": "m" * 4000}
    ingest(store, "docs/a.md", [f"chunk text {i}" for i in range(50)], metadata=metadata)
    payloads = raw_chunk_payloads(store)
    assert len(payloads) == 50 and not any("metadata" in p for p in payloads)
    assert store.get_document("docs/a.md").metadata == metadata
    hits = search(store, "chunk text", limit=5, metadata={"team": "platform"})
    assert len(hits) == 5 and all(h.metadata == metadata for h in hits)


def test_a_metadata_filter_past_the_cap_is_refused(store: VectorStore, monkeypatch):
    monkeypatch.setattr(cd, "MAX_METADATA_FILTER_DOCUMENTS", 3)
    for i in range(4):
        ingest(store, f"docs/{i}.md", ["chunk text"], source="many" if i else "one", metadata={"team": "x"})
    with pytest.raises(InvalidRequestError) as refused:
        search(store, "chunk text", metadata={"team": "x"})
    assert refused.value.code == "FILTER_TOO_BROAD" and refused.value.details == {"limit": 3}
    assert "narrow it" in refused.value.message
    # Narrowed by source, the same filter fits and still returns exactly `limit` hits.
    hits = search(store, "chunk text", limit=2, metadata={"team": "x"}, source_identifiers=["many"])
    assert len(hits) == 2 and {h.source_identifier for h in hits} == {"many"}


def test_delete_document_removes_record_and_chunks(store: VectorStore):
    ingest(store, "docs/a.md", ["one", "two", "three"])
    ingest(store, "docs/a.md.bak", ["kept"])  # shares a prefix; must survive

    assert store.delete_document("docs/a.md") == 3
    assert store.get_document("docs/a.md") is None
    assert store.reusable_vectors("docs/a.md", [f"hash-docs/a.md-{i}" for i in range(3)]) == {}
    assert store.count() == (1, 1)
    assert store.delete_document("docs/a.md") == 0
    assert store.delete_document("docs/never.md") == 0


def test_delete_source_has_no_cap(store_opener: StoreOpener):
    # More than 10,000 chunks: a scroll-and-delete capped at one 10k page would leave some.
    store = store_opener.open()
    ingest_bulk(store, source="big", documents=21, chunks_each=500)
    ingest(store, "keep/a.md", ["kept chunk"], source="small")
    assert store.count() == (22, 10_501)

    assert store.delete_source("big") == (21, 10_500)
    assert store.count() == (1, 1)
    assert [s.source_identifier for s in store.list_sources()] == ["small"]
    assert store.delete_source("big") == (0, 0)


# --- listing -----------------------------------------------------------------------------------


def test_list_documents_pages_through_every_document_once(store: VectorStore):
    uris = [f"docs/{i:02}.md" for i in range(13)] + [f"notes/{i:02}.md" for i in range(10)]
    for i, uri in enumerate(uris):
        ingest(store, uri, [f"text {i}"], source="even" if i % 2 == 0 else "odd")

    pages = []
    records, cursor = store.list_documents(source_identifier=None, uri_prefix=None, limit=5, cursor=None)
    pages.append(records)
    while cursor is not None:
        records, cursor = store.list_documents(source_identifier=None, uri_prefix=None, limit=5, cursor=cursor)
        pages.append(records)
    seen = [r.uri for page in pages for r in page]
    assert Counter(seen) == Counter(uris)
    assert all(len(page) <= 5 for page in pages) and len(pages) >= 5
    ids = [document_point_id(uri) for uri in seen]
    assert ids == sorted(ids)  # point-id order

    assert {r.uri for r in all_documents(store, limit=4, source_identifier="odd")} == set(uris[1::2])
    assert {r.uri for r in all_documents(store, limit=4, uri_prefix="notes/")} == set(uris[13:])
    assert {r.uri for r in all_documents(store, limit=4, uri_prefix="notes/", source_identifier="even")} == {
        u for i, u in enumerate(uris) if i >= 13 and i % 2 == 0
    }
    assert all_documents(store, source_identifier="nobody") == []


def test_list_documents_paging_is_stable_while_documents_are_written(store: VectorStore):
    existing = [f"docs/{i:02}.md" for i in range(30)]
    for uri in existing:
        ingest(store, uri, ["text"])

    seen: list[str] = []
    records, cursor = store.list_documents(source_identifier=None, uri_prefix=None, limit=7, cursor=None)
    round_ = 0
    while True:
        seen += [r.uri for r in records]
        if cursor is None:
            break
        # Other documents come and go between pages; their ids land all over the id order.
        for j in range(5):
            ingest(store, f"new/{round_}-{j}.md", ["text"])
        store.delete_document(f"new/{round_ - 1}-0.md")
        round_ += 1
        records, cursor = store.list_documents(source_identifier=None, uri_prefix=None, limit=7, cursor=cursor)

    counts = Counter(seen)
    assert all(counts[uri] == 1 for uri in existing)
    assert max(counts.values()) == 1  # no document, old or new, repeated


def test_list_documents_rejects_a_cursor_it_did_not_make(store: VectorStore):
    with pytest.raises(InvalidRequestError):
        store.list_documents(source_identifier=None, uri_prefix=None, limit=5, cursor="not-a-cursor")


def test_list_sources_is_exact(store: VectorStore):
    # The latest ingestedAt belongs to the first record in id order and the earliest to the
    # last, so neither "first seen" nor "last seen" passes for the maximum.
    alpha = sorted(["a/1.md", "a/2.md", "a/3.md"], key=document_point_id)
    ingest(store, alpha[0], ["x"] * 3, source="alpha", ingested_at="2026-03-02T09:00:00Z")
    ingest(store, alpha[1], ["x"] * 2, source="alpha", ingested_at="2026-03-01T10:00:00Z")
    ingest(store, alpha[2], ["x"] * 1, source="alpha", ingested_at="2026-02-28T23:59:59Z")
    ingest(store, "b/1.md", ["x"] * 4, source="beta", ingested_at="2025-12-31T00:00:00Z")
    ingest(store, "loose.md", ["x"] * 5, source=None)  # no source: not listed
    # More sources than any default facet page (10), with unequal chunk counts.
    for i in range(30):
        day = f"2026-01-{i % 28 + 1:02}T00:00:00Z"
        ingest(store, f"many/{i}.md", ["x"] * (i % 4 + 1), source=f"s{i:02}", ingested_at=day)

    expected = [
        SourceStats("alpha", 3, 6, "2026-03-02T09:00:00Z"),
        SourceStats("beta", 1, 4, "2025-12-31T00:00:00Z"),
    ] + [SourceStats(f"s{i:02}", 1, i % 4 + 1, f"2026-01-{i % 28 + 1:02}T00:00:00Z") for i in range(30)]
    assert sorted(store.list_sources(), key=lambda s: s.source_identifier) == expected
    assert store.count() == (35, 15 + sum(i % 4 + 1 for i in range(30)))


# --- search --------------------------------------------------------------------------------------

CORPUS = {
    "guides/kubernetes.md": (
        "docs",
        ["Kubernetes pods are scheduled onto nodes by the scheduler", "A deployment manages replica sets of pods"],
        {
            "team": "platform",
            "tier": 1,
            "weight": 0.5,
            "public": True,
            "app.kubernetes.io/name": "web",
            "owner/group": "infra",
            "labels": ["blue", "green"],
        },
    ),
    "guides/postgres.md": (
        "db",
        ["PostgreSQL vacuum reclaims storage from dead tuples", "Indexes speed up postgres queries"],
        {
            "team": "data",
            "tier": 2,
            "weight": 1.5,
            "public": False,
            "app.kubernetes.io/name": "db",
            "owner/group": "dba",
            "labels": ["red"],
        },
    ),
    "notes/cooking.md": (
        "misc",
        ["Bake the bread at high heat until golden", "Knead the dough for ten minutes"],
        {
            "team": "home",
            "tier": 1,
            "weight": 2.0,
            "public": True,
            "app": {"kubernetes": "nested"},
            "labels": ["green"],
        },
    ),
}
# One word from every chunk, so every mode can reach every chunk.
EVERYTHING = "scheduler deployment vacuum indexes bread dough"


@pytest.fixture
def corpus(store: VectorStore) -> VectorStore:
    for uri, (source, texts, metadata) in CORPUS.items():
        ingest(store, uri, texts, source=source, metadata=metadata)
    return store


@pytest.mark.parametrize(
    ("query", "mode", "top"),
    [
        ("kubernetes pods scheduled onto nodes", "dense", ("guides/kubernetes.md", 0)),
        ("vacuum dead tuples", "keyword", ("guides/postgres.md", 0)),
        ("knead the dough", "hybrid", ("notes/cooking.md", 1)),
        ("postgres indexes", "hybrid", ("guides/postgres.md", 1)),
    ],
)
def test_each_mode_ranks_the_matching_chunk_first(corpus: VectorStore, query, mode, top):
    hits = search(corpus, query, mode=mode)
    assert (hits[0].uri, hits[0].chunk_index) == top
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_hits_carry_the_chunk_payload_and_never_a_record(corpus: VectorStore):
    hits = search(corpus, EVERYTHING, limit=50)
    chunk_ids = {chunk_point_id(uri, i) for uri in CORPUS for i in range(2)}
    assert {h.id for h in hits} == chunk_ids  # 6 chunks; document and signature points never
    hit = next(h for h in hits if h.id == chunk_point_id("guides/postgres.md", 1))
    assert (hit.uri, hit.chunk_index, hit.total_chunks) == ("guides/postgres.md", 1, 2)
    assert hit.content == "Indexes speed up postgres queries"
    assert hit.title == "Title of guides/postgres.md"
    assert hit.headings == ["Top", "Section 1"]
    assert hit.source_identifier == "db"
    assert hit.metadata == CORPUS["guides/postgres.md"][2]


K, P, C = "guides/kubernetes.md", "guides/postgres.md", "notes/cooking.md"


@pytest.mark.parametrize("mode", ["dense", "keyword", "hybrid"])
@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({}, {K, P, C}),
        ({"source_identifiers": ["db"]}, {P}),
        ({"source_identifiers": ["db", "misc"]}, {P, C}),
        ({"source_identifiers": ["nobody"]}, set()),
        ({"uri_prefix": "guides/"}, {K, P}),
        ({"uri_prefix": "guides/post"}, {P}),
        ({"metadata": {"team": "data"}}, {P}),
        ({"metadata": {"tier": 1}}, {K, C}),
        ({"metadata": {"weight": 1.5}}, {P}),
        ({"metadata": {"weight": 2}}, {C}),  # an int matches a stored 2.0
        ({"metadata": {"public": True}}, {K, C}),
        ({"metadata": {"public": False}}, {P}),
        ({"metadata": {"tier": 2}}, {P}),  # an int filter never matches a stored boolean
        ({"metadata": {"labels": "green"}}, {K, C}),
        ({"metadata": {"app.kubernetes.io/name": "web"}}, {K}),  # dots are part of the key
        ({"metadata": {"owner/group": "dba"}}, {P}),
        ({"metadata": {"team": "data", "tier": 1}}, set()),
        ({"source_identifiers": ["docs", "misc"], "uri_prefix": "guides/", "metadata": {"tier": 1}}, {K}),
    ],
)
def test_filters_apply_in_every_mode(corpus: VectorStore, mode, flt, expected):
    hits = search(corpus, EVERYTHING, mode=mode, limit=50, **flt)
    assert {h.uri for h in hits} == expected
    assert len(hits) == 2 * len(expected)  # both chunks of each matching document


def test_a_dotted_key_never_matches_a_nested_object(corpus: VectorStore):
    # cooking.md has {"app": {"kubernetes": "nested"}}; the key "app.kubernetes" is a different key.
    assert search(corpus, EVERYTHING, limit=50, metadata={"app.kubernetes": "nested"}) == []


def test_hybrid_filters_candidates_before_fusion(store: VectorStore):
    # 30 near-duplicates of the query in one source crowd out the 3 wanted chunks in an
    # unfiltered top-3; only candidates filtered before fusion still find them. (Both engines
    # also push the outer filter down into prefetches; the stores set it in both places.)
    for i in range(30):
        ingest(store, f"noise/{i}.md", ["kubernetes pods scheduled onto nodes"], source="noise")
    ingest(store, "wanted/a.md", ["pods on kubernetes", "nodes run pods", "scheduled pods"], source="wanted")
    hits = search(store, "kubernetes pods scheduled onto nodes", limit=3, candidates=3, source_identifiers=["wanted"])
    assert sorted((h.uri, h.chunk_index) for h in hits) == [("wanted/a.md", i) for i in range(3)]


def test_a_query_of_stopwords_only_finds_no_keyword_hits(corpus: VectorStore):
    assert sparse_query("the of and").indices == []  # the premise: nothing left to match
    assert search(corpus, "the of and", mode="keyword") == []
    assert len(search(corpus, "the of and", mode="hybrid", limit=50)) == 6  # dense still answers


# --- fusion: both engines fuse the same lanes the same way ------------------------------------------

FUSIONS = {
    "rrf-k2": Fusion("rrf", 2),
    "rrf-k60": Fusion("rrf", 60),
    "rrf-dense-heavy": Fusion("rrf", 2, dense_weight=3.0, keyword_weight=1.0),
    "rrf-keyword-heavy": Fusion("rrf", 2, dense_weight=0.5, keyword_weight=2.0),
    "rrf-keyword-only": Fusion("rrf", 2, dense_weight=0.0, keyword_weight=1.0),
    "dbsf": Fusion("dbsf"),
    "dbsf-dense-heavy": Fusion("dbsf", dense_weight=2.0, keyword_weight=0.5),
    "dbsf-keyword-only": Fusion("dbsf", dense_weight=0.0, keyword_weight=1.0),
}
FUSION_QUERIES = ["knead the dough", "postgres indexes", "kubernetes pods scheduled onto nodes", EVERYTHING]


def rrf_reference(lanes: list[list[str]], fusion: Fusion) -> dict[str, float]:
    """Weighted RRF as Qdrant defines it: a hit at 0-based position p adds 1 / ((p + 1) / w + k - 1)."""
    scores: dict[str, float] = {}
    for ids, weight in zip(lanes, (fusion.dense_weight, fusion.keyword_weight), strict=True):
        for position, point in enumerate(ids):
            share = 1 / ((position + 1) / weight + fusion.rrf_k - 1) if weight > 0 else 0.0
            scores[point] = scores.get(point, 0.0) + share
    return scores


def dbsf_reference(lanes: list[list[tuple[str, float]]], weights: list[float]) -> dict[str, float]:
    """DBSF: each lane's scores mapped from [mean - 3 sd, mean + 3 sd] (sample sd) onto [0, 1], then
    summed with the lane's weight."""
    scores: dict[str, float] = {}
    for hits, weight in zip(lanes, weights, strict=True):
        values = [score for _, score in hits]
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
        for point, score in hits:
            normalised = (score - (mean - 3 * sd)) / (6 * sd) if sd > 0 else 0.5
            scores[point] = scores.get(point, 0.0) + weight * normalised
    return scores


@pytest.mark.parametrize("query", FUSION_QUERIES)
@pytest.mark.parametrize("fusion", FUSIONS.values(), ids=FUSIONS.keys())
def test_hybrid_scores_are_the_fusion_of_the_two_lanes(corpus: VectorStore, fusion: Fusion, query: str):
    # The same query in dense and keyword mode gives the lanes; hybrid must be exactly their fusion.
    dense = search(corpus, query, mode="dense", limit=50)
    keyword = search(corpus, query, mode="keyword", limit=50)
    hybrid = search(corpus, query, mode="hybrid", limit=50, fusion=fusion)
    if fusion.method == "rrf":
        expected = rrf_reference([[h.id for h in dense], [h.id for h in keyword]], fusion)
    else:
        lanes = [
            ([(h.id, h.score) for h in lane], w)
            for lane, w in ((dense, fusion.dense_weight), (keyword, fusion.keyword_weight))
        ]
        expected = dbsf_reference([hits for hits, _ in lanes if hits], [w for hits, w in lanes if hits])
    assert {h.id: h.score for h in hybrid} == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert [h.score for h in hybrid] == sorted((h.score for h in hybrid), reverse=True)


FULL_SCORES = {
    "dbsf": Fusion("dbsf", full_scores=True),
    "dbsf-weighted": Fusion("dbsf", dense_weight=2.0, keyword_weight=0.5, full_scores=True),
    "rrf-k2": Fusion("rrf", 2, full_scores=True),
}


@pytest.mark.parametrize("query", FUSION_QUERIES)
@pytest.mark.parametrize("fusion", FULL_SCORES.values(), ids=FULL_SCORES.keys())
def test_full_scores_fuse_each_lane_over_both_lanes_candidates(corpus: VectorStore, fusion: Fusion, query: str):
    # Two candidates a lane: a chunk only one lane found is scored by the other lane too (its
    # real score there, not a missing 0) before fusion.
    every_dense = {h.id: h.score for h in search(corpus, query, mode="dense", limit=50)}
    every_keyword = {h.id: h.score for h in search(corpus, query, mode="keyword", limit=50)}
    union = set(list(every_dense)[:2]) | set(list(every_keyword)[:2])
    lanes = [[(i, score) for i, score in every.items() if i in union] for every in (every_dense, every_keyword)]
    hybrid = search(corpus, query, mode="hybrid", limit=50, candidates=2, fusion=fusion)
    got = {h.id: h.score for h in hybrid}
    if fusion.method == "rrf":
        expected = rrf_reference([[i for i, _ in lane] for lane in lanes], fusion)
        if any(len({score for _, score in lane}) < len(lane) for lane in lanes):  # tied ranks: either order
            assert set(got) == set(expected)
            return
    else:
        weights = [fusion.dense_weight, fusion.keyword_weight]
        expected = dbsf_reference(
            [lane for lane in lanes if lane], [w for lane, w in zip(lanes, weights, strict=True) if lane]
        )
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)
    plain = search(corpus, query, mode="hybrid", limit=50, candidates=2, fusion=replace(fusion, full_scores=False))
    if len(union) > 2 and fusion.method == "dbsf":  # the premise: the lanes disagree, so rescoring changes scores
        assert {h.id: h.score for h in hybrid} != pytest.approx({h.id: h.score for h in plain})


@pytest.mark.parametrize("fusion", FUSIONS.values(), ids=FUSIONS.keys())
def test_every_fusion_ranks_the_matching_chunk_first(corpus: VectorStore, fusion: Fusion):
    assert (search(corpus, "knead the dough", fusion=fusion)[0].uri, 1) == ("notes/cooking.md", 1)
    top = search(corpus, "vacuum dead tuples", fusion=fusion)[0]
    assert (top.uri, top.chunk_index) == ("guides/postgres.md", 0)


@pytest.mark.parametrize("k", [2, 60])
def test_lane_weights_decide_between_the_lanes(store: VectorStore, k: int):
    # The dense lane ranks dense.md first (it shares the query's many "the"), the keyword lane
    # keyword.md ("the" is a stopword; it says "zebra" thrice).
    ingest(store, "dense.md", ["the the the the zebra giraffe lion tiger bear cat dog"])
    ingest(store, "keyword.md", ["zebra zebra zebra"])
    query = "the the the zebra"
    assert [h.uri for h in search(store, query, mode="dense")] == ["dense.md", "keyword.md"]  # the premises
    assert [h.uri for h in search(store, query, mode="keyword")] == ["keyword.md", "dense.md"]
    dense_only, keyword_only = Fusion("rrf", k, 1.0, 0.0), Fusion("rrf", k, 0.0, 1.0)
    assert [h.uri for h in search(store, query, fusion=dense_only)] == ["dense.md", "keyword.md"]
    assert [h.uri for h in search(store, query, fusion=keyword_only)] == ["keyword.md", "dense.md"]
    # Equal weights and mirrored ranks: a tie, which a weight breaks as Qdrant's weighted RRF says
    # (a weight divides the lane's rank positions, so which way depends on k).
    [first, second] = search(store, query, fusion=Fusion("rrf", k))
    assert first.score == pytest.approx(second.score)
    weighted = Fusion("rrf", k, 1.0, 1.5)
    lanes = [["dense.md", "keyword.md"], ["keyword.md", "dense.md"]]
    expected = max(rrf_reference(lanes, weighted).items(), key=lambda item: item[1])[0]
    [top, runner_up] = search(store, query, fusion=weighted)
    assert top.uri == expected and top.score > runner_up.score


@pytest.mark.parametrize("fusion", FUSIONS.values(), ids=FUSIONS.keys())
def test_a_stopword_query_fuses_the_dense_lane_alone(corpus: VectorStore, fusion: Fusion):
    dense = search(corpus, "the of and", mode="dense", limit=50)
    hybrid = search(corpus, "the of and", mode="hybrid", limit=50, fusion=fusion)
    assert {h.id for h in hybrid} == {h.id for h in dense} and len(hybrid) == 6
    if fusion.dense_weight > 0:  # in the dense lane's order (ties in any order)
        dense_scores = {h.id: h.score for h in dense}
        in_order = [dense_scores[h.id] for h in hybrid]
        assert in_order == sorted(in_order, reverse=True)


def test_count_tracks_documents_and_chunks(store: VectorStore):
    ingest(store, "a.md", ["1", "2"])
    ingest(store, "b.md", ["1", "2", "3"], source=None)
    assert store.count() == (2, 5)
    store.delete_chunks("b.md")
    assert store.count() == (2, 2)


# --- qdrant server errors and the factory --------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def failing_server() -> Iterator[callable]:
    """A local HTTP server that answers every request with a chosen status."""
    status = {"code": 503}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            body = b'{"status": {"error": "boom"}, "time": 0}'
            self.send_response(status["code"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args):  # keep test output quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def url_answering(code: int) -> str:
        status["code"] = code
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield url_answering
    server.shutdown()
    server.server_close()


def test_an_unreachable_qdrant_is_store_unavailable():
    store = QdrantServerStore.from_url(f"http://127.0.0.1:{free_port()}", None, 2, collection="kb")
    with pytest.raises(StoreUnavailableError) as failed:
        store.open(TEST_SIGNATURE)
    assert failed.value.retryable
    store.close()


@pytest.mark.parametrize("code", [500, 503, 429])
def test_qdrant_server_errors_are_store_unavailable(failing_server, code):
    store = QdrantServerStore.from_url(failing_server(code), None, 2, collection="kb")
    with pytest.raises(StoreUnavailableError, match=f"HTTP {code}"):
        store.open(TEST_SIGNATURE)
    store.close()


def test_qdrant_client_errors_are_not_store_unavailable(failing_server):
    store = QdrantServerStore.from_url(failing_server(400), None, 2, collection="kb")
    with pytest.raises(Exception) as failed:  # noqa: PT011 - any type but the transient one
        store.open(TEST_SIGNATURE)
    assert not isinstance(failed.value, StoreUnavailableError)  # a bad request is not transient
    store.close()


def test_factory_builds_the_configured_backend(tmp_path: Path):
    edge = build_store(Settings(store="edge", data_dir=tmp_path, collection="kb").storage)
    assert isinstance(edge, EdgeStore) and edge.backend == "edge" and edge.collection == "kb"
    edge.open(TEST_SIGNATURE)
    edge.close()
    assert (tmp_path / "kb").is_dir()

    settings = Settings(store="qdrant", qdrant_url="http://127.0.0.1:6333", qdrant_api_key="k", collection="kb")
    with pytest.warns(UserWarning, match="Api key is used"):  # the key reached the client
        server = build_store(settings.storage)
    assert isinstance(server, QdrantServerStore) and server.backend == "qdrant" and server.collection == "kb"
    server.close()


def test_edge_group_commit_flushes_in_the_background(tmp_path):
    """Writes are fsync'ed by the flusher within the interval, not one by one."""
    import time

    record = DocumentRecord("a.md", "s", "sha256:x", 0, {}, None, "2026-01-01T00:00:00Z", "c")
    # Not one by one: with the flusher an hour away, a write leaves the store to flush.
    # (With a short interval the flusher may run before the check, on a loaded machine.)
    lazy = EdgeStore(tmp_path / "lazy", "flush", flush_interval_s=3600)
    lazy.open(TEST_SIGNATURE)
    try:
        lazy.write_document(record, None)
        assert lazy._dirty
    finally:
        lazy.close()  # closing flushes it: it is read back below

    # In the background: the flusher gets to it without another write or a close.
    store = EdgeStore(tmp_path / "eager", "flush", flush_interval_s=0.05)
    store.open(TEST_SIGNATURE)
    try:
        store.write_document(record, None)
        deadline = time.monotonic() + 120  # normally 50 ms; generous for a loaded machine
        while store._dirty and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not store._dirty
    finally:
        store.close()
    for path in ("lazy", "eager"):
        reopened = EdgeStore(tmp_path / path, "flush")
        reopened.open(TEST_SIGNATURE)
        try:
            assert reopened.get_document("a.md") is not None
        finally:
            reopened.close()


def test_reusable_vectors_are_found_by_the_hash_each_chunk_carries(store):
    ingest(store, "docs/a.md", ["alpha text", "beta text", "gamma text"])
    ingest(store, "docs/b.md", ["alpha text"])
    found = store.reusable_vectors("docs/a.md", ["hash-docs/a.md-0", "hash-docs/a.md-2", "hash-docs/b.md-0", "nope"])
    assert set(found) == {"hash-docs/a.md-0", "hash-docs/a.md-2"}  # only this document's chunks
    expected = EMBEDDER.embed_documents(["alpha text", "gamma text"])
    assert found["hash-docs/a.md-0"] == pytest.approx(expected[0])
    assert found["hash-docs/a.md-2"] == pytest.approx(expected[1])
    assert store.reusable_vectors("docs/a.md", []) == {}


# --- sync status ----------------------------------------------------------------------------


def sync_status(source: str, synced_at: str = "2026-11-24T10:00:00.000Z", **changes) -> SyncStatus:
    status = SyncStatus(
        source_identifier=source,
        commit="abc123",
        phase="partial",
        documents=1,
        failed=2,
        skipped=1,
        failed_files=[FileIssue("a.md", "not ingested: 503"), FileIssue("b.md", "not ingested: 503")],
        skipped_files=[FileIssue("big.md", "refused", "DOCUMENT_TOO_LARGE")],
        synced_at=synced_at,
        next_sync_at="2026-11-24T11:00:00.000Z",
        message="2 documents failed",
        added=1,
    )
    return replace(status, **changes)


def test_a_sync_status_round_trips_and_joins_its_source(store: VectorStore):
    ingest(store, "a/1.md", ["x", "y"], source="alpha", ingested_at="2026-03-02T09:00:00Z")
    status = sync_status("alpha")
    assert store.put_sync_status(status) is True
    assert store.get_sync_status("alpha") == status
    assert store.get_sync_status("beta") is None
    assert store.list_sources() == [SourceStats("alpha", 1, 2, "2026-03-02T09:00:00Z", sync=status)]
    assert store.source_status("alpha").sync == status
    # Not a document, not a chunk: counts and listings are unchanged.
    assert store.count() == (1, 2)
    assert [r.uri for r in all_documents(store)] == ["a/1.md"]


def test_a_source_with_only_a_sync_status_is_a_source(store: VectorStore):
    status = sync_status("failing", documents=0, phase="error")
    store.put_sync_status(status)
    ingest(store, "b/1.md", ["x"], source="beta", ingested_at="2026-03-02T09:00:00Z")
    assert store.list_sources() == [
        SourceStats("beta", 1, 1, "2026-03-02T09:00:00Z"),
        SourceStats("failing", 0, 0, None, sync=status),
    ]
    assert store.source_identifiers() == ["beta", "failing"]  # glob scopes resolve to it
    assert store.list_sources(allowed=["beta"]) == [SourceStats("beta", 1, 1, "2026-03-02T09:00:00Z")]
    assert store.list_sources(allowed=["failing"]) == [SourceStats("failing", 0, 0, None, sync=status)]
    assert store.count() == (1, 1)


def test_a_newer_sync_status_is_never_replaced_by_an_older_one(store: VectorStore):
    newer = sync_status("alpha", "2026-11-24T12:00:00.000Z", phase="ok", failed=0, failed_files=[])
    assert store.put_sync_status(newer)
    assert store.put_sync_status(sync_status("alpha", "2026-11-24T11:59:59.999Z")) is False
    assert store.get_sync_status("alpha") == newer
    newest = sync_status("alpha", "2026-11-24T12:00:00.001Z")
    assert store.put_sync_status(newest) and store.get_sync_status("alpha") == newest


def test_a_stored_sync_status_dated_beyond_the_trusted_time_gives_way(store: VectorStore):
    forged = sync_status("alpha", "9999-12-31T23:59:59.000Z")
    assert store.put_sync_status(forged)  # as a service without the date check stored it
    real = sync_status("alpha", "2026-11-24T12:00:00.000Z")
    assert store.put_sync_status(real) is False  # without a trusted time the forged date wins
    trusted_until = datetime(2026, 11, 24, 12, 5, tzinfo=UTC).timestamp()
    assert store.put_sync_status(real, trusted_until) is True
    assert store.get_sync_status("alpha") == real
    older = sync_status("alpha", "2026-11-24T11:00:00.000Z")
    assert store.put_sync_status(older, trusted_until) is False  # an older real one still never wins


def test_deleting_a_source_deletes_its_sync_status(store: VectorStore):
    ingest(store, "a/1.md", ["x"], source="alpha")
    store.put_sync_status(sync_status("alpha"))
    store.put_sync_status(sync_status("beta"))
    assert store.delete_source("alpha") == (1, 1)
    assert store.get_sync_status("alpha") is None and store.get_sync_status("beta") is not None
    assert store.delete_source("beta") == (0, 0)  # a status alone: no documents, no chunks
    assert store.list_sources() == []


def test_a_sync_status_survives_a_reopen(store_opener: StoreOpener):
    store = store_opener.open()
    store.put_sync_status(sync_status("alpha"))
    store.close()
    assert store_opener.open().get_sync_status("alpha") == sync_status("alpha")


# --- query log ------------------------------------------------------------------------------


@pytest.fixture
def query_log(store: VectorStore) -> Iterator[QueryLogStore]:
    """The query-log collection beside `store`, on its backend."""
    log = query_log_beside(store)
    log.open()
    yield log
    log.close()


def logged(at: float, query: str = "q", sources: list[str] | None = None, **changes) -> QueryLogEntry:
    entry = QueryLogEntry(
        at=at, origin="api", query=query, results=1, top_score=0.5, latency_ms=3.0, caller="team-a", sources=sources
    )
    return replace(entry, **changes)


def test_the_query_log_is_a_collection_of_its_own(store: VectorStore, query_log: QueryLogStore):
    assert query_log.collection == f"{store.collection}_querylog"
    query_log.append([logged(1000.0, "Deploy  Rollback", ["a"]), logged(1001.0, sources=None, origin="mcp")])
    assert query_log.count() == 2
    assert store.count() == (0, 0) and store.list_sources() == []
    payloads = sorted(query_log.entries(since=0, allowed=None), key=lambda p: p["at"])
    assert payloads[0]["normalized"] == "deploy rollback" and payloads[0]["query"] == "Deploy  Rollback"
    assert payloads[0]["time"] == "1970-01-01T00:16:40.000Z" and payloads[0]["sources"] == ["a"]
    assert [entry_from_payload(p) for p in payloads] == [
        logged(1000.0, "Deploy  Rollback", ["a"]),
        logged(1001.0, sources=None, origin="mcp"),
    ]


def test_query_log_entries_are_visible_only_within_the_viewers_scope(query_log: QueryLogStore):
    query_log.append(
        [
            logged(1.0, "only a", ["team-a/docs"]),
            logged(2.0, "a and a2", ["team-a/docs", "team-a/wiki"]),
            logged(3.0, "a and b", ["team-a/docs", "team-b/docs"]),
            logged(4.0, "only b", ["team-b/docs"]),
            logged(5.0, "unrestricted", None),
            logged(6.0, "scope matched nothing", []),
        ]
    )

    def seen(allowed: list[str] | None, since: float = 0.0) -> list[str]:
        return [p["query"] for p in sorted(query_log.entries(since=since, allowed=allowed), key=lambda p: p["at"])]

    assert seen(None) == ["only a", "a and a2", "a and b", "only b", "unrestricted", "scope matched nothing"]
    assert seen(["team-a/docs"]) == ["only a"]
    assert seen(["team-a/docs", "team-a/wiki"]) == ["only a", "a and a2"]
    assert seen(["team-b/docs"]) == ["only b"]
    assert seen(["team-a/docs", "team-b/docs"]) == ["only a", "a and b", "only b"]
    assert seen(["team-c/docs"]) == []
    assert seen(None, since=4.0) == ["only b", "unrestricted", "scope matched nothing"]


def test_query_log_retention_by_age_then_by_count(query_log: QueryLogStore):
    query_log.append([logged(float(t), f"q{t}") for t in range(100)])
    assert query_log.prune(before=9.0, keep=1000) == 10  # at 0..9
    assert query_log.count() == 90
    assert query_log.prune(before=9.0, keep=25) == 65  # the oldest beyond the newest 25
    assert sorted(p["at"] for p in query_log.entries(since=0, allowed=None)) == [float(t) for t in range(75, 100)]
    assert query_log.prune(before=0.0, keep=25) == 0


def test_the_query_log_survives_a_reopen(store_opener: StoreOpener):
    store = store_opener.open()
    log = query_log_beside(store)
    log.open()
    log.append([logged(1.0, "kept")])
    log.close()
    again = query_log_beside(store)
    again.open()
    assert [p["query"] for p in again.entries(since=0, allowed=None)] == ["kept"]
    again.close()


def test_vectors_are_found_by_text_hash_within_one_source_only(store):
    ingest(store, "docs/a.md", ["alpha text", "beta text"])
    ingest(store, "docs/b.md", ["gamma text"], source="src-b")
    ingest(store, "docs/c.md", ["delta text"], source=None)
    wanted = ["hash-docs/a.md-1", "hash-docs/b.md-0", "hash-docs/c.md-0", "nope"]
    found = store.vectors_by_text_hash(wanted, "src-a")
    assert set(found) == {"hash-docs/a.md-1"}  # src-b's and the sourceless document's texts stay unseen
    assert found["hash-docs/a.md-1"] == pytest.approx(EMBEDDER.embed_query("beta text"))
    assert set(store.vectors_by_text_hash(wanted, "src-b")) == {"hash-docs/b.md-0"}
    assert set(store.vectors_by_text_hash(wanted, None)) == {"hash-docs/c.md-0"}
    assert store.vectors_by_text_hash(wanted, "src-c") == {}
    assert store.vectors_by_text_hash([], "src-a") == {}


def test_vectors_are_found_by_text_hash_among_the_named_sources_only(store):
    ingest(store, "docs/a.md", ["alpha text", "beta text"])
    ingest(store, "docs/b.md", ["gamma text"], source="src-b")
    ingest(store, "docs/c.md", ["delta text"], source=None)
    wanted = ["hash-docs/a.md-1", "hash-docs/b.md-0", "hash-docs/c.md-0", "nope"]
    assert set(store.readable_vectors_by_text_hash(wanted, ["src-a", "src-b"])) == {
        "hash-docs/a.md-1",
        "hash-docs/b.md-0",
    }  # the sourceless document is in no named source
    found = store.readable_vectors_by_text_hash(wanted, ["src-b", "src-z"])
    assert set(found) == {"hash-docs/b.md-0"}
    assert found["hash-docs/b.md-0"] == pytest.approx(EMBEDDER.embed_query("gamma text"))
    assert store.readable_vectors_by_text_hash(wanted, []) == {}  # no source named: nothing, never everything


def test_a_text_repeated_in_many_documents_gives_one_vector(store):
    ingest_bulk(store, source="versions", documents=30, chunks_each=4)  # hashes h0..h3 in every document
    found = store.vectors_by_text_hash(["h0", "h3", "h9"], "versions")
    assert set(found) == {"h0", "h3"}
    assert found["h0"] == pytest.approx(EMBEDDER.embed_query("bulk chunk text"))
