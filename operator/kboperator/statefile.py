"""The `--state` file of knowledge-sync: the last synced commit, and the spec it was synced with."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from kboperator.models import SyncSpec

log = logging.getLogger(__name__)

_VERSION = 1


def read_state(path: Path, spec: SyncSpec) -> str | None:
    """The last synced commit, or None (full reconcile) when there is none or the spec changed."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable state file %s (%s); doing a full reconcile", path, exc)
        return None
    if not isinstance(state, dict) or state.get("version") != _VERSION:
        log.warning("ignoring state file %s of an unknown format; doing a full reconcile", path)
        return None
    if state.get("sourceId") != spec.source_id or state.get("documentSetKey") != spec.document_set_key():
        # Globs, ref, URL, size limit or metadata changed: only a full reconcile removes orphans.
        log.info("the spec changed since the state file was written; doing a full reconcile")
        return None
    commit = state.get("commit")
    return commit if isinstance(commit, str) else None


def write_state(path: Path, spec: SyncSpec, commit: str) -> None:
    """Write atomically (temp file in the same folder, fsync, rename): a crash leaves old or new."""
    state = {
        "version": _VERSION,
        "sourceId": spec.source_id,
        "documentSetKey": spec.document_set_key(),
        "commit": commit,
        "syncedAt": datetime.now(timezone.utc).isoformat(timespec="seconds"),
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
