"""The embedded store's shard configuration, and the child process that builds its HNSW index.

Edge's `optimize()` holds Python's interpreter lock for its whole run (minutes at 200,000
vectors), so the service never calls it: `python -m kbsearch.store.edge.optimize DIR ...` runs it
in a process of its own on a copy of the shard, and the service swaps the copy in afterwards
(store/edge/indexer.py). The child reports its progress as lines on stdout: `loaded`, then
`optimizing`, then one JSON object, so the parent can tell how far it got.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import qdrant_edge as qe

from kbsearch.store.base import DENSE_VECTOR, SPARSE_VECTOR

# Qdrant's own defaults; full_scan_threshold (KB) keeps small segments on an exact scan.
_HNSW_M = 16
_HNSW_EF_CONSTRUCT = 100
_FULL_SCAN_THRESHOLD_KB = 10_000
_PR_SET_PDEATHSIG = 1
_BUILT_MEMORY = qe.Memory.Cached


@dataclass(frozen=True)
class IndexOptions:
    """How the background index build runs.

    threshold: unindexed dense vectors that start a build (0: never build).
    threads: HNSW build threads in the child; 1 leaves the other cores to searches.
    indexing_threshold_kb: Edge's own per-segment threshold; None keeps Edge's default.
    memory_limit_bytes: the pod's limit, which a build's peak is checked against (None: unbounded).
    """

    threshold: int
    threads: int = 1
    indexing_threshold_kb: int | None = None
    memory_limit_bytes: int | None = None

    def child_args(self) -> list[str]:
        args = ["--threads", str(self.threads)]
        if self.indexing_threshold_kb is not None:
            args += ["--indexing-threshold-kb", str(self.indexing_threshold_kb)]
        return args


def edge_config(
    dimensions: int, *, threads: int | None = None, indexing_threshold_kb: int | None = None
) -> qe.EdgeConfig:
    """The shard's configuration; with `threads`, also the HNSW and optimizer settings of a build.

    The segments a build writes keep their vectors, graph, sparse index and id tracker in
    memory-mapped files that Edge populates on load (Memory.Cached) rather than copying them into
    RAM (the sparse index's default): the service loads the built shard holding the interpreter
    lock, and this makes that load shorter (bench/LOG.md, "the index swap").
    """
    hnsw = optimizers = None
    if threads is not None:
        hnsw = qe.HnswIndexConfig(
            m=_HNSW_M,
            ef_construct=_HNSW_EF_CONSTRUCT,
            full_scan_threshold=_FULL_SCAN_THRESHOLD_KB,
            max_indexing_threads=threads,
            memory=_BUILT_MEMORY,
        )
        optimizers = qe.EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb)
    return qe.EdgeConfig(
        vectors={DENSE_VECTOR: qe.EdgeVectorParams(size=dimensions, distance=qe.Distance.Cosine, memory=_BUILT_MEMORY)},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=_BUILT_MEMORY)},
        hnsw_config=hnsw,
        optimizers=optimizers,
        id_tracker_memory=_BUILT_MEMORY,
    )


def _be_killed_first() -> None:
    """Out of memory in the pod, the kernel kills this build (about the size of the service) and
    not the service; the build fails and is retried later."""
    with contextlib.suppress(OSError):  # not Linux, or no /proc
        Path("/proc/self/oom_score_adj").write_text("1000")


def _die_with_parent() -> None:
    """An orphaned build would go on burning a core on a directory the next start deletes."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's stop() still kills it
        pass


def _say(line: str) -> None:
    """One progress line for the parent (store/edge/indexer.py reads them)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Optimize (build the HNSW index of) an Edge shard copy.")
    parser.add_argument("path")
    parser.add_argument("--dimensions", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--indexing-threshold-kb", type=int, default=None)
    args = parser.parse_args(argv)
    _die_with_parent()
    _be_killed_first()
    os.nice(10)  # searches in the service come first
    config = edge_config(args.dimensions, threads=args.threads, indexing_threshold_kb=args.indexing_threshold_kb)
    shard = qe.EdgeShard.load(args.path, config)
    _say("loaded")
    try:
        _say("optimizing")
        started = time.perf_counter()
        optimized = shard.optimize()
        seconds = time.perf_counter() - started
        shard.flush()
        info = shard.info()
    finally:
        shard.close()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = {"optimized": optimized, "seconds": round(seconds, 3), "indexed": info.indexed_vectors_count}
    _say(json.dumps(result | {"peakRssBytes": peak_kib * 1024}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
