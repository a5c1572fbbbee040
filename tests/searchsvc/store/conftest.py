"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.qdrant import QdrantCluster, qdrant_binary, storage_root


@pytest.fixture
def cluster() -> Iterator[QdrantCluster]:
    binary = qdrant_binary()
    with storage_root("qdrant-cluster") as root:
        nodes = QdrantCluster(binary, root, 3)
        try:
            yield nodes.start()
        finally:
            nodes.stop()
