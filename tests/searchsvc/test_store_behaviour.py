"""One behaviour suite for every vector store: embedded Qdrant Edge and qdrant-client (local mode)."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import qdrant_edge

import kbsearch
from kbsearch.errors import ConfigurationError, InvalidRequestError, StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
    DocumentRecord,
    SearchFilter,
    SourceStats,
    SparseVector,
    chunk_point_id,
    document_point_id,
)
from kbsearch.settings import Settings
from kbsearch.store.base import VectorStore
from kbsearch.store.edge import EdgeStore
from kbsearch.store.factory import build_store
from kbsearch.store.qdrant_server import QdrantServerStore
from tests.searchsvc.conftest import TEST_SIGNATURE, StoreOpener
from tests.support.hashing import HashingEmbedder

EMBEDDER = HashingEmbedder(dimensions=TEST_SIGNATURE.dimensions)
BM25 = qdrant_edge.Bm25()


# --- test data ----------------------------------------------------------------------------


def sparse_document(text: str) -> SparseVector:
    vector = BM25.embed_document(text)
    return SparseVector(list(vector.indices), list(vector.values))


def sparse_query(text: str) -> SparseVector:
    vector = BM25.embed_query(text)
    return SparseVector(list(vector.indices), list(vector.values))


def make_chunks(uri: str, texts: list[str], *, source: str | None, metadata: dict | None = None) -> list[ChunkPoint]:
    dense = EMBEDDER.embed_documents(texts)
    return [
        ChunkPoint(
            uri=uri,
            source_identifier=source,
            chunk_index=i,
            total_chunks=len(texts),
            text=text,
            text_hash=f"hash-{uri}-{i}",
            title=f"Title of {uri}",
            tags=["t1"],
            headings=["Top", f"Section {i}"],
            metadata=dict(metadata or {}),
            dense=dense[i],
            sparse=sparse_document(text),
        )
        for i, text in enumerate(texts)
    ]


def make_record(
    uri: str,
    chunks: int,
    *,
    source: str | None,
    ingested_at: str = "2026-01-01T00:00:00Z",
    metadata: dict | None = None,
) -> DocumentRecord:
    return DocumentRecord(
        uri=uri,
        source_identifier=source,
        checksum=f"sha256:{uri}",
        chunks=chunks,
        metadata=dict(metadata or {}),
        title=f"Title of {uri}",
        ingested_at=ingested_at,
        chunker="splitter-v1",
    )


def ingest(
    store: VectorStore,
    uri: str,
    texts: list[str],
    *,
    source: str | None = "src-a",
    metadata: dict | None = None,
    ingested_at: str = "2026-01-01T00:00:00Z",
) -> DocumentRecord:
    store.upsert_chunks(make_chunks(uri, texts, source=source, metadata=metadata))
    record = make_record(uri, len(texts), source=source, ingested_at=ingested_at, metadata=metadata)
    store.put_document(record)
    return record


def ingest_bulk(store: VectorStore, *, source: str, documents: int, chunks_each: int) -> None:
    """Many chunks, fast: vectors are computed once and shared."""
    dense = EMBEDDER.embed_query("bulk chunk text")
    sparse = sparse_document("bulk chunk text")
    for d in range(documents):
        uri = f"{source}/doc-{d}.md"
        store.upsert_chunks(
            [
                ChunkPoint(uri, source, i, chunks_each, "bulk", f"h{i}", None, [], [], {}, dense, sparse)
                for i in range(chunks_each)
            ]
        )
        store.put_document(make_record(uri, chunks_each, source=source))


def all_documents(store: VectorStore, *, limit: int = 1000, **filters) -> list[DocumentRecord]:
    params = {"source_identifier": None, "uri_prefix": None} | filters
    records, cursor = store.list_documents(limit=limit, cursor=None, **params)
    while cursor is not None:
        page, cursor = store.list_documents(limit=limit, cursor=cursor, **params)
        records += page
    return records


def search(store: VectorStore, query: str, *, mode: str = "hybrid", limit: int = 10, candidates: int = 100, **flt):
    return store.search(
        mode=mode,
        dense=EMBEDDER.embed_query(query),
        sparse=sparse_query(query),
        filter=SearchFilter(**flt),
        limit=limit,
        candidates=candidates,
        rrf_k=60,
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
    vectors = store.get_dense_vectors([chunk_point_id("docs/a.md", 0)])
    store.close()

    reopened = store_opener.open()
    assert reopened.get_document("docs/a.md") == record
    assert reopened.count() == (1, 2)
    assert reopened.get_dense_vectors([chunk_point_id("docs/a.md", 0)]) == vectors
    assert [h.uri for h in search(reopened, "gamma delta", mode="keyword")] == ["docs/a.md"]


def child_env() -> dict[str, str]:
    """Environment for a child Python that imports kbsearch and these tests, however installed."""
    paths = [str(Path(kbsearch.__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]
    return os.environ | {"PYTHONPATH": os.pathsep.join(paths)}


def test_edge_writes_survive_a_killed_process(tmp_path: Path):
    """The WAL alone must bring back writes of a process that died without closing."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from kbsearch.store.edge import EdgeStore
        from tests.searchsvc.test_store_behaviour import ingest
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
from kbsearch.store.edge import EdgeStore
from tests.searchsvc.test_store_behaviour import ingest
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

    wanted = [chunk_point_id("docs/a.md", i) for i in range(3)]
    asked = wanted + [chunk_point_id("docs/a.md", 3), document_point_id("docs/a.md")]
    vectors = store.get_dense_vectors(asked)
    assert sorted(vectors) == sorted(wanted)  # missing chunk and vector-less record absent
    expected = EMBEDDER.embed_documents(["alpha beta", "gamma delta", "epsilon"])
    for i, point_id in enumerate(wanted):
        assert vectors[point_id] == pytest.approx(expected[i], abs=1e-6)

    # Re-upserting the same ids replaces, never duplicates.
    ingest(store, "docs/a.md", ["alpha beta", "gamma delta", "epsilon"])
    assert store.count() == (1, 3)


def test_delete_chunks_from_keeps_exactly_the_first_n(store: VectorStore):
    ingest(store, "docs/a.md", [f"chunk number {i}" for i in range(10)])
    ingest(store, "docs/b.md", [f"other chunk {i}" for i in range(10)])

    assert store.delete_chunks_from("docs/a.md", 4) == 6
    assert store.delete_chunks_from("docs/a.md", 4) == 0
    left = store.get_dense_vectors([chunk_point_id("docs/a.md", i) for i in range(10)])
    assert sorted(left) == sorted(chunk_point_id("docs/a.md", i) for i in range(4))
    assert store.count() == (2, 14)  # docs/b.md untouched, records untouched


def test_delete_document_removes_record_and_chunks(store: VectorStore):
    ingest(store, "docs/a.md", ["one", "two", "three"])
    ingest(store, "docs/a.md.bak", ["kept"])  # shares a prefix; must survive

    assert store.delete_document("docs/a.md") == 3
    assert store.get_document("docs/a.md") is None
    assert store.get_dense_vectors([chunk_point_id("docs/a.md", i) for i in range(3)]) == {}
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
        {"team": "platform", "tier": 1, "weight": 0.5, "public": True, "app.kubernetes.io/name": "web",
         "owner/group": "infra", "labels": ["blue", "green"]},
    ),
    "guides/postgres.md": (
        "db",
        ["PostgreSQL vacuum reclaims storage from dead tuples", "Indexes speed up postgres queries"],
        {"team": "data", "tier": 2, "weight": 1.5, "public": False, "app.kubernetes.io/name": "db",
         "owner/group": "dba", "labels": ["red"]},
    ),
    "notes/cooking.md": (
        "misc",
        ["Bake the bread at high heat until golden", "Knead the dough for ten minutes"],
        {"team": "home", "tier": 1, "weight": 2.0, "public": True, "app": {"kubernetes": "nested"},
         "labels": ["green"]},
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
    "query, mode, top",
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
    "flt, expected",
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


def test_count_tracks_documents_and_chunks(store: VectorStore):
    ingest(store, "a.md", ["1", "2"])
    ingest(store, "b.md", ["1", "2", "3"], source=None)
    assert store.count() == (2, 5)
    store.delete_chunks_from("b.md", 1)
    assert store.count() == (2, 3)


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
    with pytest.raises(Exception) as failed:
        store.open(TEST_SIGNATURE)
    assert not isinstance(failed.value, StoreUnavailableError)  # a bad request is not transient
    store.close()


def test_factory_builds_the_configured_backend(tmp_path: Path):
    edge = build_store(Settings(store="edge", data_dir=tmp_path, collection="kb"))
    assert isinstance(edge, EdgeStore) and edge.backend == "edge" and edge.collection == "kb"
    edge.open(TEST_SIGNATURE)
    edge.close()
    assert (tmp_path / "kb").is_dir()

    settings = Settings(store="qdrant", qdrant_url="http://127.0.0.1:6333", qdrant_api_key="k", collection="kb")
    with pytest.warns(UserWarning, match="Api key is used"):  # the key reached the client
        server = build_store(settings)
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
        lazy.put_document(record)
        assert lazy._dirty
    finally:
        lazy.close()  # closing flushes it: it is read back below

    # In the background: the flusher gets to it without another write or a close.
    store = EdgeStore(tmp_path / "eager", "flush", flush_interval_s=0.05)
    store.open(TEST_SIGNATURE)
    try:
        store.put_document(record)
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
