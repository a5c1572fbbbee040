"""Embedding providers: one interface, one module per provider."""

from kbsearch.embedders.base import EmbeddingProvider

__all__ = ["EmbeddingProvider"]
