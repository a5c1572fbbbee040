"""The embedded index tests' store and data (test_edge_index.py), also for the child processes they start."""

from __future__ import annotations

from pathlib import Path

from kbsearch.store.edge.optimize import IndexOptions
from kbsearch.store.edge.store import EdgeStore
from tests.searchsvc.conftest import TEST_SIGNATURE
from tests.searchsvc.store.support import ingest

SMALL_SEGMENTS = IndexOptions(threshold=1, threads=1, indexing_threshold_kb=1)


WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"),
    *("kubernetes", "operator", "sync", "release", "notes", "index", "shard", "segment", "vector", "graph"),
    *("search", "query", "token", "chunk", "source", "branch", "commit", "secret", "volume", "pod", "service"),
]


def open_store(data_dir: Path, **kwargs) -> EdgeStore:
    kwargs.setdefault("index", SMALL_SEGMENTS)
    kwargs.setdefault("index_interval_s", 3600)  # the tests call build_now themselves
    store = EdgeStore(data_dir, "test", **kwargs)
    store.open(TEST_SIGNATURE)
    return store


def fill(store: EdgeStore, documents: int, *, first: int = 0) -> None:
    for d in range(first, first + documents):
        # Varied lengths and term counts, so that keyword scores rarely tie.
        texts = [
            " ".join(WORDS[(d * d * 7 + c * 13 + k * k * 3) % len(WORDS)] for k in range(4 + (d + c) % 9)) + f" doc{d}"
            for c in range(5)
        ]
        ingest(store, f"docs/{d}.md", texts)
