"""Swapping a new shard in under a live EdgeStore: a rebuild's shadow adopted as the next generation, and
the background index build's optimized copy with the writes logged since it was copied.

A mixin of EdgeStore (store/edge/store.py), apart because it is the one part that replaces the shard
under running requests: the old shard is closed only once no search holds it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import qdrant_edge as qe

from kbsearch.store import conditions as cd
from kbsearch.store import signature as sg
from kbsearch.store.base import KIND, KIND_CHUNK, VectorStore
from kbsearch.store.edge.layout import ShardLayout, read_into_page_cache, remove

if TYPE_CHECKING:
    from kbsearch.store.edge.indexer import BackgroundIndexer
    from kbsearch.store.health import StoreWatch

__all__ = ["ShardSwaps"]

log = logging.getLogger(__name__)

# At most this many logged writes are replayed with writes held; the rest first, without.
_REPLAY_UNDER_LOCK = 64


class ShardSwaps:
    """EdgeStore's shard swaps; the attributes and methods annotated here are EdgeStore's."""

    path: Path
    dimensions: int
    last_swap: dict[str, float]
    indexer: BackgroundIndexer
    _layout: ShardLayout
    _lock: threading.Lock
    _shard: qe.EdgeShard | None
    _watch: StoreWatch
    _dirty: bool
    _write_log: list[qe.UpdateOperation] | None

    if TYPE_CHECKING:

        @property
        def _s(self) -> qe.EdgeShard: ...
        @property
        def _shadow_name(self) -> str: ...
        def close(self) -> None: ...
        def _flush_locked(self) -> None: ...
        def _count(self, conditions: list[cd.Condition]) -> int: ...

    def stage_adoption(self, shadow: VectorStore) -> object:
        """Close the shadow, rename its directory to this shard's next generation and load it (the slow part).

        Nothing is served from it yet; adopt() names it in the pointer file and switches. A crash before
        that leaves the old shard live (the renamed directory is removed as stale at the next open, and
        the rebuild starts again).
        """
        if not isinstance(shadow, ShardSwaps) or shadow.path.parent != self._layout.data_dir:
            raise ValueError("only a shadow made by open_shadow can be adopted")
        source = shadow.path
        shadow.close()
        self.indexer.stop()  # a build of the old shard would be dropped anyway; it must not race for a name
        try:
            target = self._layout.next_generation()
            os.rename(source, target)
            (self._layout.data_dir / f".{self._shadow_name}.lock").unlink(missing_ok=True)
            read_into_page_cache(target)  # without the interpreter lock; the load then reads no disk
            return _Staged(qe.EdgeShard.load(str(target)), target)
        except BaseException:
            self.indexer.start()
            raise

    def adopt(self, staged: object) -> None:
        """Name the staged generation in the pointer file (atomic, durable) and serve it; drop the old shard."""
        if not isinstance(staged, _Staged):
            raise ValueError("adopt takes what stage_adoption returned")
        new, target = staged.shard, staged.path
        try:
            with self._lock:
                try:
                    self._layout.commit(target)  # from here a restart opens the rebuilt collection
                except BaseException:
                    new.close()
                    raise
                old, old_path = self._shard, self.path
                self._shard, self.path = new, target
                self._write_log = None
                self._watch.moved_to(target)
                self._dirty = False
                found = new.retrieve([sg.SIGNATURE_POINT_ID], with_payload=True, with_vector=False)
                if found:
                    self.dimensions = sg.signature_from_payload(found[0].payload or {}).dimensions
            # A search that took the old shard before the swap still holds a reference: close after it.
            while old is not None and sys.getrefcount(old) > 2:
                time.sleep(0.01)
            if old is not None:
                old.close()
            # The old directory goes in the background: requests need not wait for the disk.
            threading.Thread(target=remove, args=(old_path,), name="edge-remove-old", daemon=True).start()
            log.info("swapped in the rebuilt collection", extra={"path": str(target)})
        finally:
            self.indexer.start()

    # --- the background index build (store/edge/indexer.py) ----------------------------------

    def unindexed_vectors(self) -> int:
        """About how many dense vectors no HNSW index covers yet.

        Edge counts a chunk's sparse vector as indexed wherever it is, and its dense vector only in
        an indexed segment; deleted points stay counted until a build drops them.
        """
        chunks = self._count([cd.Match(KIND, KIND_CHUNK)])
        return max(0, 2 * chunks - self._s.info().indexed_vectors_count)

    def copy_for_index(self, destination: Path) -> bool:
        """Copy the flushed shard to `destination` and log every write from now on; False if closed."""
        with self._lock:
            if self._shard is None:
                return False
            self._flush_locked()
            # Writes wait for the copy (they would change files under it); reads go on.
            shutil.copytree(self.path, destination)
            self._write_log = []
        return True

    def drop_write_log(self) -> None:
        with self._lock:
            self._write_log = None

    def _logged_since(self, start: int) -> list[qe.UpdateOperation] | None:
        with self._lock:
            return self._write_log[start:] if self._write_log is not None else None

    def adopt_index(self, built: Path) -> bool:
        """Swap in the optimized copy at `built`, with the writes logged since it was copied."""
        # Edge holds the interpreter lock while it loads and closes a shard: these two stall every
        # request, once per build; their times are kept for the log and the benchmark.
        warming = time.perf_counter()
        read_into_page_cache(built)  # without the interpreter lock; the load then reads no disk
        started = time.perf_counter()
        new = qe.EdgeShard.load(str(built))  # outside the lock: writes go on to the old shard, logged
        loaded = time.perf_counter()
        # Catch up outside the lock while writes go on (they keep being logged), then replay the
        # short rest under it, so writes wait only for that.
        replayed = 0
        try:
            while (behind := self._logged_since(replayed)) is not None and len(behind) > _REPLAY_UNDER_LOCK:
                for operation in behind:
                    new.update(operation)
                replayed += len(behind)
        except BaseException:
            new.close()
            raise
        with self._lock:
            logged, self._write_log = self._write_log, None
            if logged is None or self._shard is None:
                new.close()
                return False
            try:
                for operation in logged[replayed:]:
                    new.update(operation)
                new.flush()
                self._layout.commit(built)  # from here a restart opens `built`
            except BaseException:
                new.close()
                raise
            old, old_path = self._shard, self.path
            self._shard, self.path = new, built
            self._watch.moved_to(built)
            self._dirty = False
            swapped = time.perf_counter()
        # A search that took the old shard before the swap still holds a reference: close after it.
        while sys.getrefcount(old) > 2:
            time.sleep(0.01)
        closing = time.perf_counter()
        old.close()
        closed = time.perf_counter()
        remove(old_path)
        self.last_swap = {
            "warmSeconds": round(started - warming, 3),
            "loadSeconds": round(loaded - started, 3),
            "replaySeconds": round(swapped - loaded, 3),  # all replayed writes; writes wait for the last
            "replayedWrites": len(logged),
            "replayedUnderLock": len(logged) - replayed,
            "closeSeconds": round(closed - closing, 3),
        }
        log.info("swapped in the indexed shard", extra={"path": str(built), **self.last_swap})
        return True


@dataclass(frozen=True, slots=True)
class _Staged:
    """A rebuilt generation, renamed into place and loaded, not yet named in the pointer file."""

    shard: qe.EdgeShard
    path: Path
