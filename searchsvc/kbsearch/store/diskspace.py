"""Free space on the embedded store's volume, and whether a nearly full one can still be opened."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from kbsearch.errors import ConfigurationError

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# Load, then flush what the load replayed, in a process of its own.
_PROBE = "import sys, qdrant_edge as qe; s = qe.EdgeShard.load(sys.argv[1]); s.flush(); s.close()"


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still allocate on the volume holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def ensure_space_to_open(path: Path, min_free_bytes: int) -> None:
    """Raise ConfigurationError, never die of a signal, when the store at `path` cannot be opened.

    Loading replays the write-ahead log into memory-mapped segments, and on a full volume
    that is a SIGBUS. Above the reserve there is room for it. Below, the load is tried first
    in a child process: if the child dies, the service exits with a message instead; if it
    lives, it has replayed and flushed the log, so the service's own load has nothing left to
    write and the store opens for reads (writes stay refused until space is freed).
    """
    # A fault in a mapped file kills the process; faulthandler at least leaves a trace of where.
    if not faulthandler.is_enabled():
        faulthandler.enable()
    free = free_bytes(path.parent)
    if free >= min_free_bytes:
        return
    need = f"writes need {min_free_bytes // MIB} MiB (SEARCHSVC_MIN_FREE_DISK_MB)"
    if not (path.is_dir() and any(path.iterdir())):
        raise ConfigurationError(
            f"Only {free // MIB} MiB are free on the volume of {path.parent}: too little to create the "
            f"embedded store ({need}). Free space or grow the volume."
        )
    log.warning(
        "little free disk: opening the embedded store in a child process first",
        extra={"freeBytes": free, "minFreeBytes": min_free_bytes, "path": str(path)},
    )
    child = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True)
    if child.returncode == 0:
        return
    if child.returncode < 0:
        why = f"the load died of {signal.Signals(-child.returncode).name}"
    else:
        lines = child.stderr.strip().splitlines()
        why = lines[-1] if lines else f"the load exited with status {child.returncode}"
    raise ConfigurationError(
        f"The embedded store at {path} cannot be opened with {free // MIB} MiB free on its volume "
        f"({why}); replaying its write-ahead log needs more. Free space or grow the volume; {need}."
    )
