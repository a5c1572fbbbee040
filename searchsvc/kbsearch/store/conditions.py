"""The filter language the store's reads are written in; each backend translates it into its own filters."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbsearch.errors import InvalidRequestError
from kbsearch.models import (
    INCOMPLETE,
    SearchFilter,
)
from kbsearch.store.base import (
    CHECKSUM,
    DOC_VERSION,
    KIND,
    KIND_CHUNK,
    KIND_DOCUMENT,
    MAX_METADATA_FILTER_DOCUMENTS,
    METADATA,
    SOURCE,
    URI,
    VERSION,
)

# --- filters ----------------------------------------------------------------------------
# Each backend translates these four condition shapes into its own filter classes.


@dataclass(frozen=True, slots=True)
class Match:
    key: str
    value: str | int | bool


@dataclass(frozen=True, slots=True)
class MatchAny:
    key: str
    values: list[str]


@dataclass(frozen=True, slots=True)
class Prefix:
    key: str
    prefix: str


@dataclass(frozen=True, slots=True)
class Range:
    key: str
    gte: float | None = None
    lte: float | None = None
    lt: float | None = None


@dataclass(frozen=True, slots=True)
class Phrase:
    """The text index at `key` holds `phrase`'s word tokens in order (case and punctuation aside)."""

    key: str
    phrase: str


@dataclass(frozen=True, slots=True)
class Missing:
    """The key is absent (or empty): how points from before a field existed are found."""

    key: str


@dataclass(frozen=True, slots=True)
class AnyOf:
    """At least one of the conditions holds."""

    conditions: tuple[Match | MatchAny | Prefix | Range | Missing, ...]


@dataclass(frozen=True, slots=True)
class HasId:
    point_id: str


@dataclass(frozen=True, slots=True)
class OnlyAmong:
    """The list at `key` is not empty and every one of its values is in `values`."""

    key: str
    values: list[str]


Condition = Match | MatchAny | Prefix | Range | Missing | AnyOf | HasId | OnlyAmong | Phrase

# A value no stored version has: a write conditional on it can only insert.
_NO_VERSION = -1


def version_at_most(version: int) -> Condition:
    """Version <= `version`, counting a missing version (older data) as 0."""
    return AnyOf((Range(VERSION, lte=float(version)), Missing(VERSION)))


def version_between(lowest: int | None, highest: int | None) -> list[Condition]:
    """Conditions for lowest <= version <= highest (None: open), a missing version being 0."""
    if lowest is None and highest is None:
        return []
    bounded = Range(
        VERSION,
        gte=float(lowest) if lowest is not None else None,
        lte=float(highest) if highest is not None else None,
    )
    if lowest is None or lowest <= 0:
        return [AnyOf((bounded, Missing(VERSION)))]
    return [bounded]


def record_version_is(version: int | None) -> list[Condition]:
    """The condition of a record write over `version` (None: only when no record exists)."""
    if version is None:
        return [Match(VERSION, _NO_VERSION)]
    if version == 0:
        return [AnyOf((Match(VERSION, 0), Missing(VERSION)))]
    return [Match(VERSION, version)]


def chunk_conditions(uri: str, lowest: int | None = None, highest: int | None = None) -> list[Condition]:
    return [Match(KIND, KIND_CHUNK), Match(URI, uri), *version_between(lowest, highest)]


def metadata_key(key: str) -> str:
    """JSON path of a metadata key; quoted so dots and slashes stay part of the key."""
    # Keys are validated upstream to [A-Za-z0-9_.\-/], so they never contain a quote.
    return f'{METADATA}."{key}"'


def _scope_conditions(search_filter: SearchFilter) -> list[Condition]:
    conditions: list[Condition] = []
    if search_filter.source_identifiers is not None:
        conditions.append(MatchAny(SOURCE, list(search_filter.source_identifiers)))
    if search_filter.uri_prefix:
        conditions.append(Prefix(URI, search_filter.uri_prefix))
    return conditions


def _chunk_only_conditions(search_filter: SearchFilter) -> list[Condition]:
    """Conditions on fields only chunks carry."""
    return [Match(DOC_VERSION, search_filter.version)] if search_filter.version else []


def metadata_record_conditions(search_filter: SearchFilter) -> list[Condition]:
    """Conditions on document records for a search's metadata filter (with its scope)."""
    conditions: list[Condition] = [Match(KIND, KIND_DOCUMENT), *_scope_conditions(search_filter)]
    for key, value in search_filter.metadata.items():
        path = metadata_key(key)
        if isinstance(value, bool | str):
            conditions.append(Match(path, value))
        else:
            # Numbers compare by value, so 2 matches a stored 2.0 and the reverse.
            conditions.append(Range(path, gte=float(value), lte=float(value)))
    return conditions


def metadata_uris(payloads: Iterable[Mapping[str, Any]]) -> list[str]:
    """URIs of the records a metadata filter matched; refused past the cap."""
    uris = [p[URI] for p in payloads]
    if len(uris) > MAX_METADATA_FILTER_DOCUMENTS:
        raise InvalidRequestError(
            f"the metadata filter matches more than {MAX_METADATA_FILTER_DOCUMENTS} documents; "
            "narrow it with sourceIdentifier or uriPrefix",
            code="FILTER_TOO_BROAD",
            details={"limit": MAX_METADATA_FILTER_DOCUMENTS},
        )
    return uris


def search_conditions(search_filter: SearchFilter, uris: list[str] | None = None) -> list[Condition]:
    """Conditions (ANDed) on chunks for a search; `uris` are those a metadata filter matched.

    No kind condition is needed: only chunks have vectors, so record and signature points can
    never be a nearest neighbour.
    """
    conditions = _scope_conditions(search_filter) + _chunk_only_conditions(search_filter)
    if uris is not None:
        conditions.append(MatchAny(URI, list(uris)))
    return conditions


def source_conditions(source_identifier: str) -> dict[str, list[Condition]]:
    """The filters of one source's status: its records, its chunks, its incomplete records."""
    source = Match(SOURCE, source_identifier)
    return {
        "documents": [Match(KIND, KIND_DOCUMENT), source],
        "chunks": [Match(KIND, KIND_CHUNK), source],
        "incomplete": [Match(KIND, KIND_DOCUMENT), source, Match(CHECKSUM, INCOMPLETE)],
    }


def scope_conditions(allowed: list[str] | None) -> list[Condition]:
    """A caller's scope as an engine filter: None is every source; callers never pass an empty list."""
    return [] if allowed is None else [MatchAny(SOURCE, list(allowed))]


def incomplete_conditions() -> list[Condition]:
    return [Match(KIND, KIND_DOCUMENT), Match(CHECKSUM, INCOMPLETE)]


def document_conditions(source_identifier: str | None, uri_prefix: str | None) -> list[Condition]:
    conditions: list[Condition] = [Match(KIND, KIND_DOCUMENT)]
    if source_identifier is not None:
        conditions.append(Match(SOURCE, source_identifier))
    if uri_prefix:
        conditions.append(Prefix(URI, uri_prefix))
    return conditions


def parse_cursor(cursor: str | None) -> str | None:
    """A list_documents cursor is a point id (UUID); anything else is a client error."""
    if cursor is None:
        return None
    try:
        return str(uuid.UUID(cursor))
    except ValueError:
        raise InvalidRequestError("cursor is not one this service returned", details={"cursor": cursor}) from None
