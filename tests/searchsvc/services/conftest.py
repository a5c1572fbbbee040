"""Fixtures of the service tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbsearch.embedders.local import LocalEmbedder


@pytest.fixture(scope="module")
def minilm() -> Iterator[LocalEmbedder]:
    """The bundled MiniLM, loaded offline once per module (the tests that need real embeddings)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        model = LocalEmbedder()
        model.load()
        yield model
