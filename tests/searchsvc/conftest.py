"""Fixtures shared by the search-service tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from kbsearch.embedders.local import LocalEmbedder
from kbsearch.models import CollectionSignature
from kbsearch.store.base import VectorStore
from kbsearch.store.edge.store import EdgeStore
from kbsearch.store.qdrant_server import QdrantServerStore
from tests.support.qdrant import wipe

# What the test vectors are made with: tests/support/hashing.py and qdrant_edge.Bm25.
TEST_SIGNATURE = CollectionSignature(
    embedder_provider="hashing", embedder_model="hashing-v1", dimensions=64, sparse_encoder="qdrant-edge-bm25"
)


# The backends every store test runs on: embedded Edge, qdrant-client's local mode (another engine
# than the server's), and a real Qdrant server (tests/support/qdrant.py), the production one.
STORE_BACKENDS = ("edge", "qdrant-local", "qdrant-server")


class StoreOpener:
    """Opens stores of one backend over one storage, so a test can close and reopen it."""

    def __init__(self, backend: str, data_dir: Path, collection: str = "test", *, server_url: str | None = None):
        self.backend = backend
        self.data_dir = data_dir
        self.collection = collection
        self.server_url = server_url
        # qdrant-local keeps its data in the client, so every store of this opener shares one.
        self.client: QdrantClient | None = None
        if backend == "qdrant-local":
            self.client = QdrantClient(":memory:")
        elif backend == "qdrant-server":
            assert server_url is not None, "a qdrant-server opener needs the server's URL"
            self.client = QdrantClient(url=server_url, check_compatibility=False)
        self._stores: list[VectorStore] = []

    def sibling(self, collection: str) -> StoreOpener:
        """An opener of another collection on the same backend (the same server)."""
        return StoreOpener(self.backend, self.data_dir, collection, server_url=self.server_url)

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
            if self.backend == "qdrant-server":
                wipe(self.client)  # the server outlives the test
            self.client.close()


@pytest.fixture(params=STORE_BACKENDS)
def store_opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreOpener]:
    url = request.getfixturevalue("qdrant_server").url if request.param == "qdrant-server" else None
    opener = StoreOpener(request.param, tmp_path / "data", server_url=url)
    yield opener
    opener.close_all()


@pytest.fixture
def store(store_opener: StoreOpener) -> VectorStore:
    """An open, empty collection, once per backend."""
    return store_opener.open()


@pytest.fixture(scope="module")
def minilm() -> Iterator[LocalEmbedder]:
    """The bundled MiniLM, loaded offline once per module (the tests that need real embeddings)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        model = LocalEmbedder()
        model.load()
        yield model
