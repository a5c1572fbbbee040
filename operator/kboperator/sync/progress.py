"""What a sync is doing while it runs, as events for whoever shows or records it.

The engine calls one callback (`Progress`) with these events, on the event loop's thread, in
order: `Phase("fetching")` before git fetches or clones, `Phase("reading")` before the files are
read and compared with the service, `Planned` once it knows the work (`total` documents to send
or delete; those found unchanged and the files skipped while reading are counted), one
`DocumentDone` (action "read", outcome "skipped") per file skipped while reading, then one
`DocumentDone` per document of the work as it finishes, `total` in all. A sync that finds the ref
still at the last synced commit sends none of them. The engine holds no terminal code: `knowledge-sync`
draws a progress bar or prints lines from these, the operator can keep a `Syncing` status.

A callback must be quick and must not raise (it runs between the service's answers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

PhaseName = Literal["fetching", "reading"]
Action = Literal["read", "ingest", "delete"]
# added / modified / unchanged / renamed / deleted: what the service now holds. `absent`: a delete
# of a path that held no document (kept idempotent), or the old half of a rename. skipped: refused
# for good (with the service's code); failed: may pass, retried by the next sync.
Outcome = Literal["added", "modified", "unchanged", "renamed", "deleted", "absent", "skipped", "failed"]


@dataclass(frozen=True)
class Phase:
    source_id: str
    phase: PhaseName

    def to_json(self) -> dict[str, Any]:
        return {"event": "phase", "sourceIdentifier": self.source_id, "phase": self.phase}


@dataclass(frozen=True)
class Planned:
    """The work of this sync: `total` documents to send or delete; what needs no request is counted."""

    source_id: str
    full: bool
    total: int
    unchanged: int
    skipped: int  # files refused while reading (binary, too large, ...): each has its DocumentDone

    def to_json(self) -> dict[str, Any]:
        return {
            "event": "plan",
            "sourceIdentifier": self.source_id,
            "full": self.full,
            "total": self.total,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class DocumentDone:
    """One file finished: skipped while reading, or what the service answered for it."""

    source_id: str
    path: str
    action: Action
    outcome: Outcome
    reason: str | None = None  # for skipped and failed
    code: str | None = None  # the service's, for skipped

    def to_json(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "event": "document",
            "sourceIdentifier": self.source_id,
            "path": self.path,
            "action": self.action,
            "outcome": self.outcome,
        }
        if self.reason is not None:
            event["reason"] = self.reason
        if self.code is not None:
            event["code"] = self.code
        return event


SyncEvent = Phase | Planned | DocumentDone
Progress = Callable[[SyncEvent], None]


def ignore(_event: SyncEvent) -> None:
    """The callback of a caller that does not follow progress."""
