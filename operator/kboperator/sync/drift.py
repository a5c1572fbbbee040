"""Drift: the service no longer holds what the last successful sync left there.

An incremental sync trusts that the service still holds what the last sync left, and sends
only the diff. Three cheap signals, read from GET /api/v1/sources/{id} before the diff, say
that this no longer holds, and that only a full reconcile against the listing can repair it:

- the collection epoch changed: the collection was re-created (reset, restored, a new volume)
  or the service URL now reaches another service;
- the source's document count differs from the one read back right after the last sync:
  someone deleted or added documents of this source behind the operator's back;
- some documents of the source are incomplete: a write was interrupted (the service was killed).

A signal whose baseline is unknown (never recorded) is not checked. A service that cannot
answer (an older version: no such endpoint) is trusted as before, unless the last sync did
record an epoch: then the URL reaches another service than the one that gave it.
"""

from __future__ import annotations

from kboperator.models import Baseline
from kboperator.searchclient import SourceStats


def drift_reason(stats: SourceStats | None, baseline: Baseline) -> str | None:
    """Why the service no longer matches the baseline, or None when it still does (or cannot tell)."""
    if stats is None:
        if baseline.epoch is None:
            return None
        return (
            f"the service no longer reports a collection epoch (the last sync wrote to {baseline.epoch!r}): the "
            "service URL reaches another, older service"
        )
    if baseline.epoch is not None and stats.epoch != baseline.epoch:
        return (
            f"the collection epoch is {stats.epoch!r}, the last sync wrote to {baseline.epoch!r}: the collection "
            "was re-created or the service URL reaches another service"
        )
    if stats.incomplete > 0:
        return f"{stats.incomplete} documents of this source are incomplete: a write to the service was interrupted"
    if baseline.documents is not None and stats.documents != baseline.documents:
        return (
            f"the service holds {stats.documents} documents of this source, the last sync left "
            f"{baseline.documents}: documents were deleted or added behind the operator's back"
        )
    return None
