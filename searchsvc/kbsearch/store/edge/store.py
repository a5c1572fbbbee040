"""The embedded vector store: one Qdrant Edge shard per collection, in-process."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import qdrant_edge as qe

from kbsearch.errors import ConfigurationError, StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
    CollectionSignature,
    DocumentRecord,
    SearchHit,
    StoredBody,
    SyncStatus,
    body_point_id,
    document_point_id,
    sync_status_point_id,
)
from kbsearch.store import conditions as cd
from kbsearch.store import payloads as pl
from kbsearch.store import signature as sg
from kbsearch.store.base import (
    CHECKSUM,
    CHUNK_INDEX,
    CONTENT,
    DENSE_VECTOR,
    DOC_VERSION,
    INGESTED_AT,
    KIND,
    KIND_CHUNK,
    KIND_DOCUMENT,
    SOURCE,
    SPARSE_VECTOR,
    TEXT_HASH,
    URI,
    VectorStore,
)
from kbsearch.store.diskspace import MIB, ensure_space_to_open
from kbsearch.store.edge.filters import bare_point, to_filter, where
from kbsearch.store.edge.indexer import BackgroundIndexer
from kbsearch.store.edge.layout import ShardLayout, remove
from kbsearch.store.edge.optimize import IndexOptions, edge_config
from kbsearch.store.edge.query import dense_of, hits, query_request
from kbsearch.store.edge.swaps import ShardSwaps
from kbsearch.store.health import StoreWatch
from kbsearch.store.points import PointStore, RankedQuery

log = logging.getLogger(__name__)

# Payload indexes are memory-mapped files (Memory.Cached), not maps built in RAM: at 50,000 chunks
# that halves the time Edge takes to load an indexed shard (0.41 -> 0.20 s), time during which it
# holds the interpreter lock at every index swap, and the service's RSS shrinks with it.
_INDEX_MEMORY = qe.Memory.Cached
_INDEXES: dict[str, Any] = {
    KIND: qe.KeywordIndexParams(memory=_INDEX_MEMORY),
    # Prefix-enabled, so uriPrefix filters are served by the index.
    URI: qe.KeywordIndexParams(prefix=True, memory=_INDEX_MEMORY),
    SOURCE: qe.KeywordIndexParams(memory=_INDEX_MEMORY),
    CHUNK_INDEX: qe.IntegerIndexParams(lookup=True, range=True, memory=_INDEX_MEMORY),
    # Finds incomplete records at start-up without reading every payload.
    CHECKSUM: qe.KeywordIndexParams(memory=_INDEX_MEMORY),
    # Finds a stored vector of a repeated chunk text in the same source (vectors_by_text_hash).
    TEXT_HASH: qe.KeywordIndexParams(memory=_INDEX_MEMORY),
    # The version filter of docs search (services/documents/versions.py).
    DOC_VERSION: qe.KeywordIndexParams(memory=_INDEX_MEMORY),
    # Lets a source's latest ingest be read with one ordered scroll.
    INGESTED_AT: qe.DatetimeIndexParams(memory=_INDEX_MEMORY),
    # Literal search's phrase condition (store/base.py, TEXT_INDEXES).
    CONTENT: qe.TextIndexParams(
        tokenizer=qe.TokenizerType.Word, lowercase=True, phrase_matching=True, memory=_INDEX_MEMORY
    ),
}

# Writes logged while an index is built, to replay on the new shard; past this the build is dropped.
_MAX_LOGGED_WRITES = 100_000


class EdgeStore(ShardSwaps, PointStore):
    """A collection stored at `data_dir/collection` (or a later generation of it, see
    store/edge/layout.py); only one process may open it at a time.

    `data_dir/.collection.lock` is held (flock) while the store is open. With `index`, a
    background thread builds the HNSW index in a child process (store/edge/indexer.py).
    """

    backend = "edge"

    def __init__(
        self,
        data_dir: Path,
        collection: str,
        *,
        flush_interval_s: float = 1.0,
        min_free_bytes: int = 128 * MIB,
        index: IndexOptions | None = None,
        index_interval_s: float = 10.0,
    ) -> None:
        self.collection = collection
        self._layout = ShardLayout(Path(data_dir), collection)
        self.path = self._layout.first  # the live shard's directory, known once open
        self.dimensions = 0
        self._lock_path = Path(data_dir) / f".{collection}.lock"
        self._lock_fd: int | None = None
        self._shard: qe.EdgeShard | None = None
        # Edge applies one update at a time anyway; the lock also makes count-then-delete atomic.
        self._lock = threading.Lock()
        self._flush_interval_s = flush_interval_s
        self._dirty = False
        self._stop_flusher = threading.Event()
        self._flusher: threading.Thread | None = None
        self._watch = StoreWatch(self.path, min_free_bytes)
        # Every write since an index build copied the shard, or None when no build is under way.
        self._write_log: list[qe.UpdateOperation] | None = None
        self.last_swap: dict[str, float] = {}  # what the last index swap cost, for the log and benchmarks
        self.indexer = BackgroundIndexer(
            self,
            self._layout,
            index or IndexOptions(threshold=0),
            interval_s=index_interval_s,
            min_free_bytes=min_free_bytes,
        )

    # --- lifecycle ----------------------------------------------------------------------

    def open(self, signature: CollectionSignature, *, check: bool = True) -> None:
        with self._lock:
            if self._shard is not None:
                raise RuntimeError(f"edge store {self.path} is already open")
            self._take_directory()
            shard = None
            try:
                self._layout.remove_stale()  # an unfinished build, or the generation a build replaced
                self.path = self._layout.live()
                self._watch.moved_to(self.path)
                self.dimensions = signature.dimensions
                ensure_space_to_open(self.path, self._watch.min_free_bytes)
                shard = self._open_shard(signature)
                self._prepare(shard, signature, check)
            except BaseException:
                if shard is not None:
                    shard.close()
                self._release_directory()
                raise
            self._shard = shard
            self._watch.start()
            # Also with flush_interval_s=0: it retries failed flushes and watches the disk.
            self._stop_flusher.clear()
            self._flusher = threading.Thread(target=self._flush_periodically, name="edge-flush", daemon=True)
            self._flusher.start()
        self.indexer.start()

    def _take_directory(self) -> None:
        # Must happen before edge touches the shard: a load that edge refuses because the WAL
        # is locked has already removed the live shard's tracker journals, after which every
        # flush of the process holding it fails. flock is released by the kernel if we die.
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigurationError(self._held_message()) from None
        self._lock_fd = fd

    def _release_directory(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def _held_message(self) -> str:
        return (
            f"Another process holds the data directory {self.path}. The embedded store allows "
            "one process per data directory: stop the other instance, run a single replica, or "
            "use SEARCHSVC_STORE=qdrant to share a collection."
        )

    def _open_shard(self, signature: CollectionSignature) -> qe.EdgeShard:
        exists = self.path.is_dir() and any(self.path.iterdir())
        try:
            if exists:
                return qe.EdgeShard.load(str(self.path))
            self.path.mkdir(parents=True, exist_ok=True)
            return qe.EdgeShard.create(str(self.path), edge_config(signature.dimensions))
        except Exception as exc:  # edge raises plain Exception; tell a held lock apart by its text
            if "WouldBlock" in str(exc):  # a holder that does not take our lock file
                raise ConfigurationError(self._held_message()) from exc
            raise ConfigurationError(f"Cannot open the embedded store at {self.path}: {exc}") from exc

    def _prepare(self, shard: qe.EdgeShard, signature: CollectionSignature, check: bool) -> None:
        found = shard.retrieve([sg.SIGNATURE_POINT_ID], with_payload=True, with_vector=False)
        stored = sg.signature_from_payload(found[0].payload or {}) if found else None
        has_points = shard.count(qe.CountRequest(exact=True)) > 0
        if check or stored is None:
            sg.check_signature(f"'{self.collection}' at {self.path}", stored, has_points, signature)
        else:
            self.dimensions = stored.dimensions
        if sg.epoch_from_payload(found[0].payload if found else None) is None:
            # A new collection, or one from before epochs existed, gets its epoch once.
            point = bare_point(sg.SIGNATURE_POINT_ID, sg.signature_payload(signature, sg.new_epoch()))
            shard.update(qe.UpdateOperation.upsert_points([point]))
        # Also on load, so a shard from an older version gains any index added since, and an index
        # an older version kept in RAM is rebuilt memory-mapped (once; seconds at 200,000 chunks).
        present = shard.info().payload_schema
        for field, schema in _INDEXES.items():
            index = present.get(field)
            if index is None or getattr(index.params, "memory", None) != _INDEX_MEMORY:
                shard.update(qe.UpdateOperation.create_field_index(field, schema))
        shard.flush()

    def close(self) -> None:
        self.indexer.stop()
        if self._flusher is not None:
            self._stop_flusher.set()
            self._flusher.join()
            self._flusher = None
        with self._lock:
            if self._shard is not None:
                try:
                    self._shard.flush()
                    self._shard.close()
                finally:
                    self._shard = None
                    self._release_directory()

    @property
    def _s(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError(f"edge store {self.path} is not open")
        return self._shard

    # --- writes -------------------------------------------------------------------------
    # Durability: update() appends to the write-ahead log, a memory-mapped file, so a write is
    # acknowledged once it is in the log: it survives a killed process (the next open replays
    # it) but is on disk only after flush() fsyncs it. A flush costs 20-45 ms here, more than
    # the rest of a document's write, so writes are group-committed: a background thread
    # flushes at most every flush_interval_s, like a Qdrant server's own WAL flush. An OS
    # crash or power loss can therefore lose the writes of the last interval.
    # flush_interval_s=0 flushes after every write instead.
    #
    # Health: every write first asks the StoreWatch (store/health.py) whether the volume has
    # room, the directory is still the one opened, and the last flush worked; if not, it is
    # refused with 503 before it touches a mapped page. A failed flush is retried every tick
    # and refuses writes until one succeeds.

    def write_problem(self) -> StoreUnavailableError | None:
        problem = self._watch.check()
        return problem.error() if problem is not None else None

    def _apply(self, operation: qe.UpdateOperation) -> None:
        problem = self._watch.problem(under_way=True)
        if problem is not None:
            self._watch.check()  # logs the cause once
            raise problem.error()
        try:
            self._s.update(operation)
        except BaseException:
            self._write_log = None  # whether it half-applied is unknown: a build under way is dropped
            raise
        self._dirty = True
        if self._write_log is not None:
            self._write_log.append(operation)
            if len(self._write_log) > _MAX_LOGGED_WRITES:
                log.warning("too many writes during an index build; the build is dropped and retried later")
                self._write_log = None
        if self._flush_interval_s == 0:
            self._flush_locked()

    def _flush_locked(self) -> None:
        """Flush under self._lock; a failure is recorded, logged once per streak, and raised."""
        try:
            self._s.flush()
        except Exception as exc:
            self._watch.flush_failed(exc)
            problem = self._watch.check()  # FLUSH_FAILING, or the disk or directory behind it; logged once
            raise (problem or self._watch.flush_problem()).error() from exc
        self._dirty = False
        self._watch.flush_succeeded()

    def _flush_periodically(self) -> None:
        tick = self._flush_interval_s or 1.0
        while not self._stop_flusher.wait(tick):
            self._tick()

    def _tick(self) -> None:
        """One round of the flusher: flush if dirty, then look at the volume and the directory."""
        with self._lock:
            if self._dirty and self._shard is not None:
                with contextlib.suppress(StoreUnavailableError):  # recorded and logged; the next tick retries
                    self._flush_locked()
        # Notices a full disk or a deleted directory, and the recovery, with no request needed.
        self._watch.check()

    def upsert_chunks(self, points: list[ChunkPoint]) -> None:
        if not points:
            return
        edge_points = [
            qe.Point(
                p.id,
                {DENSE_VECTOR: list(p.dense), SPARSE_VECTOR: qe.SparseVector(p.sparse.indices, p.sparse.values)},
                pl.chunk_payload(p),
            )
            for p in points
        ]
        fence = to_filter([cd.version_at_most(points[0].version)])
        with self._lock:
            self._apply(qe.UpdateOperation.upsert_points(edge_points, condition=fence))

    def write_document(self, record: DocumentRecord, expected_version: int | None) -> bool:
        point = bare_point(record.id, pl.document_payload(record))
        condition = to_filter(cd.record_version_is(expected_version))
        with self._lock:
            self._apply(qe.UpdateOperation.upsert_points([point], condition=condition))
            return pl.same_write(self.get_document(record.uri), record)

    def put_body(self, body: StoredBody) -> None:
        point = bare_point(body_point_id(body.uri), pl.body_payload(body))
        with self._lock:
            self._apply(
                qe.UpdateOperation.upsert_points([point], condition=to_filter([cd.version_at_most(body.version)]))
            )

    def delete_body(self, uri: str, highest: int) -> None:
        doomed = [cd.HasId(body_point_id(uri)), cd.version_at_most(highest)]
        with self._lock:
            self._apply(qe.UpdateOperation.delete_points_by_filter(where(doomed)))

    def delete_record(self, uri: str, version: int) -> None:
        doomed = [cd.HasId(document_point_id(uri)), *cd.record_version_is(version)]
        with self._lock:
            self._apply(qe.UpdateOperation.delete_points_by_filter(where(doomed)))

    def put_sync_status(self, status: SyncStatus, trusted_until_s: float | None = None) -> bool:
        point = bare_point(sync_status_point_id(status.source_identifier), pl.sync_status_payload(status))
        with self._lock:
            self._apply(
                qe.UpdateOperation.upsert_points(
                    [point], condition=to_filter(pl.sync_status_newer_than(status, trusted_until_s))
                )
            )
            return self._sync_status(status.source_identifier) == status

    def delete_chunks(self, uri: str, lowest: int | None = None, highest: int | None = None) -> int:
        doomed = cd.chunk_conditions(uri, lowest, highest)
        with self._lock:
            deleted = self._count(doomed)
            if deleted:
                self._apply(qe.UpdateOperation.delete_points_by_filter(where(doomed)))
            return deleted

    def count_chunks(self, uri: str, version: int | None = None) -> int:
        return self._count(cd.chunk_conditions(uri, version, version))

    def delete_document(self, uri: str) -> int:
        with self._lock:
            deleted = self._count([cd.Match(KIND, KIND_CHUNK), cd.Match(URI, uri)])
            self._apply(qe.UpdateOperation.delete_points_by_filter(where([cd.Match(URI, uri)])))
            return deleted

    def delete_source(self, source_identifier: str) -> tuple[int, int]:
        source = cd.Match(SOURCE, source_identifier)
        with self._lock:
            documents = self._count([cd.Match(KIND, KIND_DOCUMENT), source])
            chunks = self._count([cd.Match(KIND, KIND_CHUNK), source])
            # One delete by filter: no page cap, however large the source.
            self._apply(qe.UpdateOperation.delete_points_by_filter(where([source])))
            return documents, chunks

    def _count(self, conditions: list[cd.Condition]) -> int:
        return self._s.count(qe.CountRequest(exact=True, filter=to_filter(conditions)))

    def mark_chunker(self, fingerprint: str) -> None:
        with self._lock:
            found = self._s.retrieve([sg.SIGNATURE_POINT_ID], with_payload=True, with_vector=False)
            if not found:
                raise RuntimeError(f"the collection at {self.path} has lost its signature point")
            payload = sg.with_chunker(found[0].payload or {}, fingerprint)
            self._apply(qe.UpdateOperation.upsert_points([bare_point(sg.SIGNATURE_POINT_ID, payload)]))

    # --- the rebuild's shadow: a directory beside the shard, adopted as its next generation ------
    # (adopting it, and swapping in a built index: store/edge/swaps.py)

    @property
    def _shadow_name(self) -> str:
        # A '.' is never part of a collection name (settings), so no collection can meet it.
        return f"{self.collection}.rebuild"

    def shadow_exists(self) -> bool:
        shadow = self._layout.data_dir / self._shadow_name
        return shadow.is_dir() and any(shadow.iterdir())

    def open_shadow(self, signature: CollectionSignature) -> EdgeStore:
        # No index build in the shadow: once adopted, this store's own indexer builds it.
        shadow = EdgeStore(
            self._layout.data_dir,
            self._shadow_name,
            flush_interval_s=self._flush_interval_s,
            min_free_bytes=self._watch.min_free_bytes,
        )
        shadow.open(signature, check=False)
        stored = shadow.stored_signature()
        if stored is not None and not sg.compatible(stored, signature):
            log.info("dropping a rebuild's shadow made for other settings", extra={"path": str(shadow.path)})
            self.drop_shadow(shadow)
            shadow = EdgeStore(
                self._layout.data_dir,
                self._shadow_name,
                flush_interval_s=self._flush_interval_s,
                min_free_bytes=self._watch.min_free_bytes,
            )
            shadow.open(signature)
        return shadow

    def drop_shadow(self, shadow: VectorStore | None) -> None:
        if shadow is not None:
            shadow.close()
        remove(self._layout.data_dir / self._shadow_name)
        (self._layout.data_dir / f".{self._shadow_name}.lock").unlink(missing_ok=True)

    # --- reads --------------------------------------------------------------------------

    def collection_epoch(self) -> str:
        found = self._s.retrieve([sg.SIGNATURE_POINT_ID], with_payload=True, with_vector=False)
        epoch = sg.epoch_from_payload(found[0].payload if found else None)
        if epoch is None:
            raise RuntimeError(f"the collection at {self.path} has lost its signature point")
        return epoch

    def get_dense_vectors(self, point_ids: list[str]) -> dict[str, list[float]]:
        """Dense vectors of the given chunk points that exist, by id.

        Not part of VectorStore: the service reuses vectors by text hash (reusable_vectors); only
        the benchmark (bench/vectors.py) reads an ingested Edge collection back by point id.
        """
        if not point_ids:
            return {}
        found = self._s.retrieve(list[int | UUID | str](point_ids), with_payload=False, with_vector=[DENSE_VECTOR])
        return {str(r.id): dense_of(r.vector) for r in found if isinstance(r.vector, dict) and DENSE_VECTOR in r.vector}

    # --- the primitives of the shared reads (store/points.py) -------------------------------

    def _scroll_page(
        self,
        conditions: list[cd.Condition],
        *,
        offset: Any,
        limit: int,
        payload: list[str] | bool,
        vector: list[str] | bool,
    ) -> tuple[list[Any], Any]:
        page = qe.ScrollRequest(
            offset=offset, limit=limit, filter=to_filter(conditions), with_payload=payload, with_vector=vector
        )
        return self._s.scroll(page)

    def _retrieve(self, ids: list[str], payload: list[str] | bool) -> list[Any]:
        return self._s.retrieve(list[int | UUID | str](ids), with_payload=payload, with_vector=False)

    def _facet(self, key: str, conditions: list[cd.Condition], limit: int) -> dict[str, int]:
        facet = self._s.facet(qe.FacetRequest(key, limit=limit, exact=True, filter=to_filter(conditions)))
        return {str(hit.value): hit.count for hit in facet.hits}

    def _newest_payload(self, conditions: list[cd.Condition], field: str) -> dict[str, Any] | None:
        latest, _ = self._s.scroll(
            qe.ScrollRequest(
                limit=1,
                filter=to_filter(conditions),
                with_payload=[field],
                with_vector=False,
                order_by=qe.OrderBy(field, direction=qe.Direction.Desc),
            )
        )
        return (latest[0].payload or {}) if latest else None

    def _query(self, search: RankedQuery) -> list[SearchHit]:
        request = query_request(search)
        return [] if request is None else hits(self._s.query(request), search.dense)
