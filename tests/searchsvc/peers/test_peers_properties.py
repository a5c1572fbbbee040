"""Properties of the cross-store merge and of the peer answer validator, on generated input.

The merge: its output is sorted by relevance (local hits alone keep their order), each hit names
at least one store, no hit is lost but by collapsing the same page with the same text, and no local
page is ever shown with a peer's text or without the local store first (a peer may send any URI with
any text and relevance). The validator: any JSON value, or any bytes, gives validated results or a
clean `malformed` failure, never an exception; a result it lets through has its pages and cells
1-based and its chunk index within its document.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from kbsearch.models import SearchHit
from kbsearch.peers.client import MAX_PEER_CHUNKS, MAX_PEER_PLACE, PeerFailure, parse_answer
from kbsearch.peers.router import merge
from tests.support.properties import properties, within

STORES = ["eu", "us", "ap"]
TEXTS = ["the local text", "another text", "a third text"]  # few: stores collide on page and text


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
            content=draw(st.sampled_from(TEXTS)),
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
def test_the_merge_is_sorted_loses_no_page_and_never_shows_a_peers_text_as_local(local, peers, collapse) -> None:
    merged = merge(local, peers, 1000, collapse=collapse, local_store="local")
    relevances = [h.relevance for h in merged]
    if any(peers):
        assert relevances == sorted(relevances, reverse=True)
    else:  # local hits alone keep their order (a reranker's)
        assert [h.uri for h in merged] == [h.uri for h in local]
    assert all(h.stores for h in merged)
    page = (lambda h: (h.uri,)) if collapse else (lambda h: (h.uri, h.version, h.chunk_index))
    key = lambda h: (*page(h), h.content)  # noqa: E731
    assert len({key(h) for h in merged}) == len(merged)  # one hit per page and text
    shown = {key(h): h for h in merged}
    for store, answer in [("local", local), *((p[0].stores[0], p) for p in peers if p)]:
        for hit in answer:
            assert store in shown[key(hit)].stores  # every page of every store is in, with its text, naming it
    for mine in local:  # the local copy itself: its fields, its relevance, the local store first
        kept = shown[key(mine)]
        assert (kept.id, kept.version, kept.relevance, kept.stores[0]) == (
            mine.id,
            mine.version,
            mine.relevance,
            "local",
        )
    local_keys = {key(h) for h in local}
    assert all(key(h) in local_keys for h in merged if "local" in h.stores)  # no text of a peer's under "local"


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
        assert_in_range(outcome)


INTS = st.one_of(st.integers(), st.integers(-3, 3), st.sampled_from([MAX_PEER_CHUNKS, MAX_PEER_PLACE + 1]))
NUMERIC = {"chunkIndex": INTS, "totalChunks": INTS, "moreMatches": INTS, "page": st.none() | INTS, "cell": INTS}
BASE = {"id": "1", "uri": "u", "chunkIndex": 0, "totalChunks": 1, "content": "c", "score": 0.5, "relevance": 0.5}


@given(results=st.lists(st.fixed_dictionaries({}, optional=NUMERIC).map(lambda r: BASE | r), max_size=4))
@properties(500)
def test_a_result_with_a_page_cell_or_chunk_out_of_range_is_never_let_through(results: list[dict]) -> None:
    outcome = parse_answer(json.dumps({"results": results}).encode())
    if isinstance(outcome, PeerFailure):
        assert outcome.reason == "malformed"
        return
    assert_in_range(outcome)
    assert len(outcome) == len(results)


def assert_in_range(results) -> None:
    for r in results:
        assert 0 <= r.chunk_index < r.total_chunks <= MAX_PEER_CHUNKS and 0 <= r.more_matches <= MAX_PEER_CHUNKS
        assert all(place is None or 1 <= place <= MAX_PEER_PLACE for place in (r.page, r.cell))
