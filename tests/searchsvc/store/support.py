"""Test data for the store tests: chunks, records and BM25 vectors written through the VectorStore API."""

from __future__ import annotations

import uuid

import qdrant_edge

from kbsearch.models import (
    ChunkPoint,
    DocumentRecord,
    Fusion,
    SparseVector,
)
from kbsearch.store.base import VectorStore
from tests.searchsvc.conftest import TEST_SIGNATURE
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


def make_chunks(uri: str, texts: list[str], *, source: str | None, version: int = 0) -> list[ChunkPoint]:
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
            dense=dense[i],
            sparse=sparse_document(text),
            version=version,
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
    version: int = 1,
    checksum: str | None = None,
) -> DocumentRecord:
    return DocumentRecord(
        uri=uri,
        source_identifier=source,
        checksum=checksum or f"sha256:{uri}",
        chunks=chunks,
        metadata=dict(metadata or {}),
        title=f"Title of {uri}",
        ingested_at=ingested_at,
        chunker="splitter-v1",
        version=version,
        write_id=uuid.uuid4().hex,
    )


def put_record(store: VectorStore, record: DocumentRecord) -> DocumentRecord:
    """Write a record over whatever record is stored (tests write one document at a time)."""
    stored = store.get_document(record.uri)
    assert store.write_document(record, stored.version if stored else None)
    return record


def ingest(
    store: VectorStore,
    uri: str,
    texts: list[str],
    *,
    source: str | None = "src-a",
    metadata: dict | None = None,
    ingested_at: str = "2026-01-01T00:00:00Z",
) -> DocumentRecord:
    stored = store.get_document(uri)
    version = stored.version + 1 if stored else 1
    store.upsert_chunks(make_chunks(uri, texts, source=source, version=version))
    store.delete_chunks(uri, None, version - 1)
    record = make_record(uri, len(texts), source=source, ingested_at=ingested_at, metadata=metadata, version=version)
    assert store.write_document(record, stored.version if stored else None)
    return record


def ingest_bulk(store: VectorStore, *, source: str, documents: int, chunks_each: int) -> None:
    """Many chunks, fast: vectors are computed once and shared."""
    dense = EMBEDDER.embed_query("bulk chunk text")
    sparse = sparse_document("bulk chunk text")
    for d in range(documents):
        uri = f"{source}/doc-{d}.md"
        store.upsert_chunks(
            [
                ChunkPoint(uri, source, i, chunks_each, "bulk", f"h{i}", None, [], [], dense, sparse, 1)
                for i in range(chunks_each)
            ]
        )
        put_record(store, make_record(uri, chunks_each, source=source))


def all_documents(store: VectorStore, *, limit: int = 1000, **filters) -> list[DocumentRecord]:
    params = {"source_identifier": None, "uri_prefix": None} | filters
    records, cursor = store.list_documents(limit=limit, cursor=None, **params)
    while cursor is not None:
        page, cursor = store.list_documents(limit=limit, cursor=cursor, **params)
        records += page
    return records


RRF_60 = Fusion(rrf_k=60)
