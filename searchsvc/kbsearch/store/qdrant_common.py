"""What the Qdrant server's store and its query log share: failure mapping, bare points, filters,
how their collections are laid out on a cluster and in which order their writes apply.

Consistency on a cluster (docs/operations/install.md, "A Qdrant cluster"): every write waits
(`wait=True`) and goes through its shard's leader (`ORDERING`, Qdrant's "medium"), so that
conditional writes (`update_filter`), which decide between replicas racing on one document,
apply in one order on every copy of a shard. Weak ordering would let two copies apply two racing
writes in different orders and disagree for good; strong ordering stops writes while the
shard's first replica is down. Reads keep Qdrant's default consistency (one replica): a write
that waits returns only once every live copy applied it or was marked dead, so a read that
follows it sees it on whichever copy it meets.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from kbsearch.errors import StoreUnavailableError
from kbsearch.store import conditions as cd

__all__ = [
    "ORDERING",
    "UPSERT_BATCH",
    "Layout",
    "bare_point",
    "to_condition",
    "to_filter",
    "unavailable_on_failure",
]

# Points per upsert request: keeps request bodies well under the server's size limit.
UPSERT_BATCH = 256
# Every write's ordering (see the module's docstring).
ORDERING = qm.WriteOrdering.MEDIUM


@dataclass(frozen=True)
class Layout:
    """Shards and copies of a collection the service creates (SEARCHSVC_QDRANT_SHARDS, _REPLICATION_FACTOR)."""

    shards: int = 1
    replication_factor: int = 1


@contextmanager
def unavailable_on_failure(action: str) -> Iterator[None]:
    """Turn transport failures, 429 and 5xx into StoreUnavailableError (a retryable 503)."""
    try:
        yield
    except ResponseHandlingException as exc:  # connection refused, timeout, unreadable answer
        raise StoreUnavailableError(f"Qdrant is unreachable while trying to {action}: {exc.source}") from exc
    except UnexpectedResponse as exc:
        if exc.status_code is None or exc.status_code >= 500 or exc.status_code == 429:
            raise StoreUnavailableError(f"Qdrant failed to {action}: HTTP {exc.status_code}") from exc
        raise


def bare_point(point_id: str, payload: dict[str, Any]) -> qm.PointStruct:
    """A point with no vectors: document records and the signature."""
    return qm.PointStruct(id=point_id, vector={}, payload=payload)


def to_filter(conditions: list[cd.Condition]) -> qm.Filter | None:
    return qm.Filter(must=[to_condition(c) for c in conditions]) if conditions else None


def to_condition(condition: cd.Condition) -> Any:
    match condition:
        case cd.Missing(key):
            return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))
        case cd.AnyOf(conditions):
            return qm.Filter(should=[to_condition(c) for c in conditions])
        case cd.OnlyAmong(key, values):
            # must_not "a value outside `values`", and must_not "empty": every value is among them.
            outside = qm.FieldCondition(key=key, match=qm.MatchExcept(**{"except": values}))
            return qm.Filter(must_not=[outside, qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))])
        case cd.HasId(point_id):
            return qm.HasIdCondition(has_id=[point_id])
        case cd.Match(key, value):
            return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))
        case cd.MatchAny(key, values):
            return qm.FieldCondition(key=key, match=qm.MatchAny(any=values))
        case cd.Prefix(key, prefix):
            return qm.FieldCondition(key=key, match=qm.MatchPrefix(prefix=prefix))
        case cd.Phrase(key, phrase):
            return qm.FieldCondition(key=key, match=qm.MatchPhrase(phrase=phrase))
        case cd.Range(key, gte, lte, lt):
            return qm.FieldCondition(key=key, range=qm.Range(gte=gte, lte=lte, lt=lt))
    raise TypeError(f"unknown condition {condition!r}")
