"""The `--state` file of knowledge-sync: the last synced commit, and what it was synced with.

The commit is only a starting point for the next diff when the file's key matches the run: the
same document set (globs, ref, URL, size limit, metadata) *and* the same search service, since a
different service holds none of those documents. `fullOwed` says that a run started from that
commit and did not finish cleanly: it may have applied part of its diff (a deletion, say), so a
diff from the commit no longer tells what the service lacks, and the next run reconciles fully.
`collectionEpoch` and `expectedDocuments` are what the last successful run left in the service:
the next run's drift check (drift.py) compares the service against them. A file without them
(written by an older version) skips that check once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from kboperator.models import Baseline, SyncSpec

log = logging.getLogger(__name__)

_VERSION = 2  # 1 had no service in its key and no fullOwed


def state_key(spec: SyncSpec, service: str) -> str:
    """What a stored commit is valid for; the operator's specHash hashes the same things."""
    return hashlib.sha256(f"{spec.document_set_key()}|{service.rstrip('/')}".encode()).hexdigest()[:16]


def read_state(path: Path, spec: SyncSpec, service: str) -> tuple[str | None, Baseline]:
    """The commit to diff from, or None (full reconcile): no state, another spec or service, or owed.

    With it, the baseline the last successful run left (unknown fields are None).
    """
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None, Baseline()
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable state file %s (%s); doing a full reconcile", path, exc)
        return None, Baseline()
    if not isinstance(state, dict) or state.get("version") != _VERSION:
        log.warning("ignoring state file %s of an older or unknown format; doing a full reconcile", path)
        return None, Baseline()
    epoch, documents = state.get("collectionEpoch"), state.get("expectedDocuments")
    baseline = Baseline(
        epoch=epoch if isinstance(epoch, str) and epoch else None,
        documents=documents if type(documents) is int and documents >= 0 else None,
    )
    if state.get("sourceId") != spec.source_id or state.get("key") != state_key(spec, service):
        # Globs, ref, URL, size limit, metadata or service changed: only a full reconcile removes orphans.
        log.info("the spec or service changed since the state file was written; doing a full reconcile")
        return None, Baseline()
    if state.get("fullOwed"):
        log.info("the last run did not finish cleanly; doing a full reconcile")
        return None, baseline
    commit = state.get("commit")
    return (commit if isinstance(commit, str) else None), baseline


def write_state(
    path: Path,
    spec: SyncSpec,
    service: str,
    commit: str | None,
    *,
    full_owed: bool = False,
    baseline: Baseline = Baseline(),
) -> None:
    """Write atomically (temp file in the same folder, fsync, rename): a crash leaves old or new."""
    state = {
        "version": _VERSION,
        "sourceId": spec.source_id,
        "key": state_key(spec, service),
        "commit": commit,
        "fullOwed": full_owed,
        "collectionEpoch": baseline.epoch,
        "expectedDocuments": baseline.documents,
        "writtenAt": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(state, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
