"""Vector stores: one interface, one module per vendor library."""

from kbsearch.store.base import VectorStore

__all__ = ["VectorStore"]
