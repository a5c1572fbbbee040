"""Fixtures shared by the search-service tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from kbsearch.models import CollectionSignature
from kbsearch.store.base import VectorStore
from kbsearch.store.edge.store import EdgeStore
from kbsearch.store.qdrant_server import QdrantServerStore

# What the test vectors are made with: tests/support/hashing.py and qdrant_edge.Bm25.
TEST_SIGNATURE = CollectionSignature(
    embedder_provider="hashing", embedder_model="hashing-v1", dimensions=64, sparse_encoder="qdrant-edge-bm25"
)


class StoreOpener:
    """Opens stores of one backend over one storage, so a test can close and reopen it."""

    def __init__(self, backend: str, data_dir: Path, collection: str = "test"):
        self.backend = backend
        self.data_dir = data_dir
        self.collection = collection
        # qdrant-local keeps its data in the client, so every store of this opener shares one.
        self.client = QdrantClient(":memory:") if backend == "qdrant-local" else None
        self._stores: list[VectorStore] = []

    def new(self) -> VectorStore:
        """An unopened store over this opener's storage."""
        if self.client is not None:
            store: VectorStore = QdrantServerStore(self.client, self.collection)
        else:
            store = EdgeStore(self.data_dir, self.collection)
        self._stores.append(store)
        return store

    def open(self, signature: CollectionSignature = TEST_SIGNATURE) -> VectorStore:
        store = self.new()
        store.open(signature)
        return store

    def close_all(self) -> None:
        for store in self._stores:
            store.close()
        if self.client is not None:
            self.client.close()


@pytest.fixture(params=["edge", "qdrant-local"])
def store_opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreOpener]:
    opener = StoreOpener(request.param, tmp_path / "data")
    yield opener
    opener.close_all()


@pytest.fixture
def store(store_opener: StoreOpener) -> VectorStore:
    """An open, empty collection, once per backend."""
    return store_opener.open()
