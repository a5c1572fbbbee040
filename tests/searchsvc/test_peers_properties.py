"""Properties of the cross-store merge and of the peer answer validator, on generated input.

The merge: its output is sorted by relevance (local hits alone keep their order), each hit names
at least one store, and no hit is lost but by collapsing (every input page is in the output, under
one of its stores). The validator: any JSON value, or any bytes, gives validated results or a clean
`malformed` failure, never an exception.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from kbsearch.models import SearchHit
from kbsearch.peers.client import PeerFailure, parse_answer
from kbsearch.peers.router import merge
from tests.support.properties import properties, within

STORES = ["eu", "us", "ap"]


@st.composite
def hits(draw: st.DrawFn, store: str) -> list[SearchHit]:
    pages = draw(st.lists(st.sampled_from("abcdefgh"), max_size=8, unique=True))
    return [
        SearchHit(
            id=f"{uri}#0",
            score=0.0,
            uri=uri,
            chunk_index=draw(st.integers(0, 2)),
            total_chunks=3,
            content=f"{uri} in {store or 'local'}",
            title=None,
            headings=[],
            metadata={},
            source_identifier=None,
            version=draw(st.sampled_from([None, "1.0", "2.0"])),
            relevance=draw(st.floats(0, 1)),
            stores=(store,) if store else (),
        )
        for uri in pages
    ]


@given(
    local=hits(""),
    peers=st.lists(st.sampled_from(STORES), unique=True, max_size=3).flatmap(
        lambda names: st.tuples(*(hits(n) for n in names))
    ),
    collapse=st.booleans(),
)
@properties(300)
def test_the_merge_is_sorted_loses_no_page_and_names_every_store(local, peers, collapse) -> None:
    merged = merge(local, peers, 1000, collapse=collapse, local_store="local")
    relevances = [h.relevance for h in merged]
    if any(peers):
        assert relevances == sorted(relevances, reverse=True)
    else:  # local hits alone keep their order (a reranker's)
        assert [h.uri for h in merged] == [h.uri for h in local]
    assert all(h.stores for h in merged)
    key = (lambda h: (h.uri,)) if collapse else (lambda h: (h.uri, h.version, h.chunk_index))
    assert len({key(h) for h in merged}) == len(merged)  # collapsed: one hit per page
    shown = {key(h): set(h.stores) for h in merged}
    for store, answer in [("local", local), *((p[0].stores[0], p) for p in peers if p)]:
        for hit in answer:
            assert store in shown[key(hit)]  # every page of every store is in, naming that store
    best = {
        key(h): max(x.relevance or 0 for x in [*local, *(y for p in peers for y in p)] if key(x) == key(h))
        for h in merged
    }
    assert all(h.relevance == best[key(h)] for h in merged)  # the kept copy is the most relevant


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=40,
)
RESULT_KEYS = ["id", "uri", "chunkIndex", "totalChunks", "content", "score", "relevance", "title", "headings"]
RESULTS = st.dictionaries(st.sampled_from(RESULT_KEYS), JSON, max_size=len(RESULT_KEYS))


@given(
    body=st.one_of(
        JSON.map(lambda v: json.dumps(v).encode()),
        st.lists(RESULTS, max_size=5).map(lambda r: json.dumps({"results": r}).encode()),
        st.binary(max_size=200),
    )
)
@properties(500)
def test_any_answer_validates_or_is_cleanly_malformed(body: bytes) -> None:
    outcome = within(10, lambda: parse_answer(body))
    if isinstance(outcome, PeerFailure):
        assert outcome.reason == "malformed"
    else:
        assert all(0 <= r.relevance <= 1 for r in outcome)
