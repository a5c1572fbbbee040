"""Switching the local backend of an existing collection: allowed where the vectors are interchangeable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbsearch.errors import ConfigurationError
from kbsearch.models import CollectionSignature, interchangeable_backends
from tests.searchsvc.conftest import StoreOpener
from tests.searchsvc.store.support import ingest

LOCAL = CollectionSignature("local", "all-MiniLM-L6-v2", 64, "qdrant-edge-bm25", "torch")


def made_with(store_opener: StoreOpener, signature: CollectionSignature) -> None:
    store = store_opener.open(signature)
    ingest(store, "docs/a.md", ["alpha"])
    store.close()


@pytest.mark.parametrize(
    ("created", "opened"),
    [("torch", "onnx"), ("onnx", "torch"), (None, "onnx"), ("onnx-int8", "onnx-int8")],
    ids=["torch-then-onnx", "onnx-then-torch", "before-backends-then-onnx", "int8-again"],
)
def test_interchangeable_backends_open_the_collection(store_opener: StoreOpener, created, opened):
    made_with(store_opener, replace(LOCAL, embedder_backend=created))
    store = store_opener.open(replace(LOCAL, embedder_backend=opened))
    assert store.count() == (1, 1)


@pytest.mark.parametrize(
    ("created", "opened"),
    [("torch", "onnx-int8"), ("onnx", "onnx-int8"), ("onnx-int8", "onnx"), (None, "onnx-int8")],
    ids=["torch-then-int8", "onnx-then-int8", "int8-then-onnx", "before-backends-then-int8"],
)
def test_a_backend_whose_vectors_differ_is_refused_with_the_reindex_procedure(
    store_opener: StoreOpener, created, opened
):
    made_with(store_opener, replace(LOCAL, embedder_backend=created))
    with pytest.raises(ConfigurationError) as refused:
        store_opener.open(replace(LOCAL, embedder_backend=opened))
    message = str(refused.value)
    assert f"backend={opened}" in message
    keep = "onnx or torch" if created in (None, "torch", "onnx") else "onnx-int8"
    assert f"To keep it, set SEARCHSVC_LOCAL_BACKEND to {keep}." in message
    assert "SEARCHSVC_COLLECTION" in message and "re-sync" in message and "SEARCHSVC_LOCAL_BACKEND" in message
    # Nothing changed: the collection still opens with the backend it was made with.
    assert store_opener.open(replace(LOCAL, embedder_backend=created)).count() == (1, 1)


def test_the_backend_only_matters_for_the_same_model(store_opener: StoreOpener):
    made_with(store_opener, LOCAL)
    with pytest.raises(ConfigurationError, match="other-model"):
        store_opener.open(replace(LOCAL, embedder_model="other-model", embedder_backend="onnx"))


def test_the_groups():
    assert interchangeable_backends("torch", "onnx") and interchangeable_backends(None, "torch")
    assert not interchangeable_backends("onnx-int8", "torch") and not interchangeable_backends("onnx", "onnx-int8")
