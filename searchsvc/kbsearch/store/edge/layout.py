"""Where a collection's Edge shard lives: the first one, or a generation built with an index.

`data_dir/<collection>` is the first shard. A background index build (store/edge/indexer.py)
writes a new generation `data_dir/<collection>@<n>`; once it holds every write, the pointer file
`data_dir/.<collection>.current` is replaced atomically to name it. A restart opens what the
pointer names, so a crash on either side of the replacement opens a complete shard; what is
not named (an unfinished build, the generation it replaced) is deleted at the next open.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)


class ShardLayout:
    def __init__(self, data_dir: Path, collection: str) -> None:
        self.data_dir = Path(data_dir)
        self.collection = collection
        self.first = self.data_dir / collection
        self.pointer = self.data_dir / f".{collection}.current"
        self._generation = re.compile(re.escape(collection) + r"@(\d+)")

    def live(self) -> Path:
        """The shard directory to open: the one the pointer names, else the first."""
        try:
            name = self.pointer.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return self.first
        if not self._generation.fullmatch(name):
            raise ValueError(f"{self.pointer} names {name!r}, not a generation of {self.collection!r}")
        return self.data_dir / name

    def generations(self) -> list[Path]:
        found = [p for p in self.data_dir.glob(f"{self.collection}@*") if self._generation.fullmatch(p.name)]
        return sorted(found, key=lambda p: int(p.name.rsplit("@", 1)[1]))

    def next_generation(self) -> Path:
        numbers = [int(p.name.rsplit("@", 1)[1]) for p in [*self.generations(), self.live()] if "@" in p.name]
        return self.data_dir / f"{self.collection}@{max(numbers, default=0) + 1}"

    def commit(self, generation: Path) -> None:
        """Name `generation` as the live shard, durably: write, fsync, rename, fsync the directory."""
        staged = self.pointer.with_name(self.pointer.name + ".tmp")
        with open(staged, "w", encoding="utf-8") as fh:
            fh.write(generation.name + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(staged, self.pointer)
        # The rename is done, so the caller must switch; a failed fsync matters only in an OS crash.
        try:
            fd = os.open(self.data_dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("could not fsync the data directory after switching generations", extra={"error": str(exc)})

    def remove_stale(self) -> None:
        """Delete every shard directory but the live one; only the holder of the collection lock may."""
        live = self.live()
        stale = [p for p in [self.first, *self.generations()] if p != live and p.exists()]
        for path in stale:
            log.info("removing an embedded store directory no longer in use", extra={"path": str(path)})
            remove(path)
        self.pointer.with_name(self.pointer.name + ".tmp").unlink(missing_ok=True)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def read_into_page_cache(path: Path, chunk_bytes: int = 1 << 20) -> int:
    """Read every file under `path` once, so a following Edge load finds them in the page cache.

    Edge drops a shard's pages from the cache when it closes it (the optimizer child's close, for a
    built shard), and its load then reads them back from disk holding the interpreter lock. Plain
    reads release the lock for each read, so requests go on while this runs. Returns bytes read.
    """
    buffer = bytearray(chunk_bytes)
    total = 0
    for file in sorted(path.rglob("*")):
        if not file.is_file():
            continue
        with open(file, "rb", buffering=0) as fh:
            while read := fh.readinto(buffer):
                total += read
    return total
