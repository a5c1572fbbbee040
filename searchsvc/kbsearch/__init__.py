"""Search service: one-document ingest, hybrid search and bulk delete over Qdrant."""

__version__ = "0.1.0"
