"""A body's oversized containers are refused whole, before their items: one error, not one per item.

pydantic reports every bad item of a list or dict (a dict's once per union branch), so one 8 MiB body
of `[{}, {}, …]` in a search filter became millions of errors and a 4.9 GB peak. The bounds here are
those the schemas state (sourceIdentifier lists, metadata keys, metadata lists).
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kbsearch.schemas.documents import PutDocumentRequest
from kbsearch.schemas.fields import MAX_METADATA_KEYS, MAX_METADATA_LIST_ITEMS
from kbsearch.schemas.search import MAX_FILTER_SOURCES, SearchRequest

JUNK = st.sampled_from([{}, 0, None, [], True])


def errors_of(model: type, body: dict) -> list[dict]:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(body)
    return refused.value.errors()


@settings(max_examples=30, deadline=None)
@given(extra=st.integers(1, 5000), junk=JUNK)
def test_a_too_long_source_list_is_one_error_whatever_it_holds(extra: int, junk: object) -> None:
    body = {"query": "q", "filter": {"sourceIdentifier": [junk] * (MAX_FILTER_SOURCES + extra)}}
    (error,) = errors_of(SearchRequest, body)
    assert error["loc"] == ("filter", "sourceIdentifier") and "at most 100" in error["msg"]


@settings(max_examples=30, deadline=None)
@given(extra=st.integers(1, 5000), junk=JUNK)
def test_too_many_metadata_keys_are_one_error_in_a_filter_and_a_document(extra: int, junk: object) -> None:
    metadata = {f"k{i}": junk for i in range(MAX_METADATA_KEYS + extra)}
    assert len(errors_of(SearchRequest, {"query": "q", "filter": {"metadata": metadata}})) == 1
    assert len(errors_of(PutDocumentRequest, {"uri": "u", "content": "c", "metadata": metadata})) == 1


def test_a_long_metadata_list_stops_at_its_bound() -> None:
    metadata = {"tags": [{}] * (MAX_METADATA_LIST_ITEMS * 100)}
    # One error per scalar branch of the union, and the list's too_long: never one per item.
    assert len(errors_of(PutDocumentRequest, {"uri": "u", "content": "c", "metadata": metadata})) <= 5


def test_eight_mebibytes_of_junk_items_cost_little_to_refuse() -> None:
    """The finding itself: 2.7 million `{}` (8 MiB of JSON) in a filter's sourceIdentifier and metadata."""
    body = {
        "query": "q",
        "filter": {"sourceIdentifier": [{}] * 2_700_000, "metadata": {f"k{i}": {} for i in range(300_000)}},
    }
    tracemalloc.start()
    try:
        errors = errors_of(SearchRequest, body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(errors) == 2
    assert peak < 16 * 2**20, f"refusing the body allocated {peak / 2**20:.0f} MiB"
