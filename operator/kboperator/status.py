"""KnowledgeSource status: phases, and conditions that follow the Kubernetes API conventions."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kboperator.models import FileIssue, SyncResult

#: Bounded lists in status: the CRD's maxItems, so that a huge repository cannot bloat the object.
MAX_LISTED_FILES = 50
#: Kubernetes caps a condition message at 32 KiB; stay well below it.
MAX_MESSAGE = 2000


class Phase(str, enum.Enum):
    """Where a source is in its lifecycle (status.phase)."""

    PENDING = "Pending"
    SYNCING = "Syncing"
    SYNCED = "Synced"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


READY = "Ready"
SYNCED = "Synced"


def condition(
    previous: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: str,
) -> dict[str, Any]:
    """One condition; lastTransitionTime moves only when the status itself changes."""
    text = "Unknown" if status is None else str(bool(status))
    old = next((c for c in previous or () if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == text else None
    result: dict[str, Any] = {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": since or now,
    }
    if generation is not None:
        result["observedGeneration"] = generation
    return result


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, updates: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The previous conditions with `updates` replacing those of the same type, order kept."""
    merged = {c["type"]: dict(c) for c in previous or () if "type" in c}
    for update in updates:
        merged[update["type"]] = dict(update)
    return [merged[key] for key in sorted(merged, key=lambda t: (t != READY, t != SYNCED, t))]


def issues(items: Iterable[FileIssue]) -> list[dict[str, str]]:
    """A bounded status list of {path, reason} and, when the service refused the file, its code."""
    listed = []
    for issue in items:
        if len(listed) == MAX_LISTED_FILES:
            break
        listed.append({"path": issue.path, "reason": issue.reason[:500]} | ({"code": issue.code} if issue.code else {}))
    return listed


def unlisted(items: Sequence[FileIssue]) -> int:
    """How many of `items` a bounded status list leaves out."""
    return max(0, len(items) - MAX_LISTED_FILES)


def last_sync(result: SyncResult) -> dict[str, Any]:
    """status.lastSync: the counts of one attempt, and its duration."""
    return {
        "commit": result.commit,
        "full": result.full,
        "added": result.added,
        "modified": result.modified,
        "deleted": result.deleted,
        "renamed": result.renamed,
        "unchanged": result.unchanged,
        "skipped": len(result.skipped),
        "failed": len(result.failed),
        "durationSeconds": round(result.duration_s, 3),
    } | ({"drift": result.drift[:MAX_MESSAGE]} if result.drift else {})


def summary(result: SyncResult) -> str:
    """A one-line human account of a sync, for conditions and events."""
    text = (
        f"{result.added} added, {result.modified} modified, {result.deleted} deleted, "
        f"{result.renamed} renamed, {result.unchanged} unchanged, {len(result.skipped)} skipped, "
        f"{len(result.failed)} failed at {result.commit[:12]}"
    )
    if result.drift:
        text = f"full reconcile after drift ({result.drift}): {text}"
    if result.failed:
        first = result.failed[0]
        text += f"; first failure: {first.path}: {first.reason}"
    if result.rejected:
        first = result.rejected[0]
        text += f"; {len(result.rejected)} refused by the search service, first: {first.path}: {first.reason}"
    return text

