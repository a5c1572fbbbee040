"""Translates the stores' payload conditions (store/payloads.py) into Qdrant Edge filters and points."""

from __future__ import annotations

from typing import Any

import numpy as np
import qdrant_edge as qe

from kbsearch.store import conditions as cd


def bare_point(point_id: str, payload: dict[str, Any]) -> qe.Point:
    """A point with no vectors: document records and the signature."""
    return qe.Point(point_id, {}, payload)


def to_filter(conditions: list[cd.Condition]) -> qe.Filter | None:
    return where(conditions) if conditions else None


def where(conditions: list[cd.Condition]) -> qe.Filter:
    """A filter that must not be empty: a delete by filter with none would delete everything."""
    if not conditions:
        raise ValueError("a delete by filter needs at least one condition")
    return qe.Filter(must=[_condition(c) for c in conditions])


def _condition(condition: cd.Condition) -> Any:
    match condition:
        case cd.Missing(key):
            return qe.IsEmptyCondition(key)
        case cd.AnyOf(conditions):
            return qe.Filter(should=[_condition(c) for c in conditions])
        case cd.OnlyAmong(key, values):
            # must_not "a value outside `values`", and must_not "empty": every value is among them.
            return qe.Filter(must_not=[qe.FieldCondition(key, match=qe.MatchExcept(values)), qe.IsEmptyCondition(key)])
        case cd.HasId(point_id):
            return qe.HasIdCondition({point_id})
        case cd.Match(key, bool() as value):
            # qdrant-edge 0.9 converts a Python bool to the integer 1/0, which never matches a
            # stored boolean; numpy.bool_ is not an int, so it reaches the engine as a bool.
            return qe.FieldCondition(key, match=qe.MatchValue(np.bool_(value)))  # type: ignore[arg-type]
        case cd.Match(key, value):
            return qe.FieldCondition(key, match=qe.MatchValue(value))
        case cd.MatchAny(key, values):
            return qe.FieldCondition(key, match=qe.MatchAny(values))
        case cd.Prefix(key, prefix):
            return qe.FieldCondition(key, match=qe.MatchPrefix(prefix))
        case cd.Phrase(key, phrase):
            return qe.FieldCondition(key, match=qe.MatchPhrase(phrase))
        case cd.Range(key, gte, lte, lt):
            return qe.FieldCondition(key, range=qe.RangeFloat(gte=gte, lte=lte, lt=lt))
    raise TypeError(f"unknown condition {condition!r}")
