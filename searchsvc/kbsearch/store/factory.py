"""Builds the configured vector store; vendor libraries are imported only for the chosen one."""

from __future__ import annotations

from kbsearch.errors import ConfigurationError
from kbsearch.settings import StoreSettings
from kbsearch.store.base import VectorStore
from kbsearch.store.querylog import QueryLogStore, querylog_collection


def build_store(storage: StoreSettings, memory_limit_bytes: int | None = None) -> VectorStore:
    """An unopened store for `storage.store`; the caller opens it with the embedder's signature.
    `memory_limit_bytes`: the pod's, which the embedded store's index builds are checked against."""
    if storage.store == "edge":
        from kbsearch.store.edge.optimize import IndexOptions
        from kbsearch.store.edge.store import EdgeStore

        return EdgeStore(
            storage.data_dir,
            storage.collection,
            flush_interval_s=storage.edge_flush_interval_s,
            min_free_bytes=storage.min_free_disk_mb * 1024 * 1024,
            index=IndexOptions(
                threshold=storage.edge_index_threshold,
                threads=storage.edge_index_threads,
                memory_limit_bytes=memory_limit_bytes,
            ),
        )
    if storage.store == "qdrant":
        from kbsearch.store.qdrant_common import Layout
        from kbsearch.store.qdrant_server import QdrantServerStore

        if not storage.qdrant_url:  # StoreSettings validates this too; fail clearly if bypassed
            raise ConfigurationError("SEARCHSVC_QDRANT_URL is required when SEARCHSVC_STORE=qdrant")
        api_key = storage.qdrant_api_key.get_secret_value() if storage.qdrant_api_key else None
        return QdrantServerStore.from_url(
            storage.qdrant_url,
            api_key,
            storage.qdrant_timeout_s,
            collection=storage.collection,
            layout=Layout(storage.qdrant_shards, storage.qdrant_replication_factor),
            probe_timeout_s=storage.qdrant_ready_timeout_s,
        )
    raise ConfigurationError(f"unknown store backend {storage.store!r}")


def query_log_beside(store: VectorStore) -> QueryLogStore:
    """An unopened query-log store beside `store`'s collection (`<collection>_querylog`), on its backend.

    On a Qdrant server it shares the store's client; on Edge it is a second shard in the data directory.
    """
    collection = querylog_collection(store.collection)
    if store.backend == "edge":
        from kbsearch.store.edge.querylog import EdgeQueryLog
        from kbsearch.store.edge.store import EdgeStore

        assert isinstance(store, EdgeStore)
        return EdgeQueryLog(store.path.parent, collection)
    if store.backend == "qdrant":
        from kbsearch.store.qdrant_querylog import QdrantQueryLog
        from kbsearch.store.qdrant_server import QdrantServerStore

        assert isinstance(store, QdrantServerStore)
        return QdrantQueryLog(store.client, collection, store.layout)
    raise ConfigurationError(f"no query log for store backend {store.backend!r}")
