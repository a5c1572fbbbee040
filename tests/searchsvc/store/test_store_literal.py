"""Literal search in the store, on every backend: the phrase condition on the content's text index."""

from __future__ import annotations

import pytest
import qdrant_edge as qe

from kbsearch.models import SearchFilter
from kbsearch.store.base import CONTENT, VectorStore
from kbsearch.store.edge.store import EdgeStore
from kbsearch.store.qdrant_server import QdrantServerStore
from tests.searchsvc.conftest import StoreOpener
from tests.searchsvc.store.support import EMBEDDER, RRF_60, ingest, sparse_query

TEXTS = {
    "a.md": ["Run kubectl apply --dry-run=server to check the manifest.", "Nothing literal here."],
    "b.md": ["Start the dry run server first."],
    "c.md": ["The proxy answered ERR_CONN_RESET twice: ERR_CONN_RESET."],
    "d.md": ["err conn reset, the lower case spelling."],
}


def literal(store: VectorStore, phrase: str, limit: int = 10, **flt) -> list[str]:
    hits = store.search(
        mode="literal",
        dense=EMBEDDER.embed_query(phrase),
        sparse=sparse_query(phrase),
        filter=SearchFilter(**flt),
        limit=limit,
        candidates=50,
        fusion=RRF_60,
        phrase=phrase,
    )
    return sorted(f"{h.uri}#{h.chunk_index}" for h in hits)


def fill(store: VectorStore) -> None:
    for uri, texts in TEXTS.items():
        ingest(store, uri, texts, source="src-b" if uri == "d.md" else "src-a")


def test_the_phrase_condition_needs_the_words_in_order(store: VectorStore):
    fill(store)
    # The engine matches word tokens in order, lowercased, punctuation aside: exactness is the service's.
    assert literal(store, "--dry-run=server") == ["a.md#0", "b.md#0"]
    assert literal(store, "ERR_CONN_RESET") == ["c.md#0", "d.md#0"]
    assert literal(store, "server dry run") == []
    assert literal(store, "kubectl apply") == ["a.md#0"]


def test_the_scope_applies_inside_the_same_query(store: VectorStore):
    fill(store)
    assert literal(store, "ERR_CONN_RESET", source_identifiers=["src-a"]) == ["c.md#0"]
    assert literal(store, "ERR_CONN_RESET", source_identifiers=["src-b"]) == ["d.md#0"]
    assert literal(store, "ERR_CONN_RESET", uri_prefix="d.") == ["d.md#0"]
    assert literal(store, "ERR_CONN_RESET", source_identifiers=["src-c"]) == []


def test_the_limit_is_filled_from_the_phrase_matches(store: VectorStore):
    for i in range(12):
        ingest(store, f"n{i}.md", [f"note {i} about the weather"])
    ingest(store, "hit.md", ["the flag --force-conflicts is here"])
    # Without the condition in the engine, the twelve nearer notes would take a limit of 1.
    assert literal(store, "--force-conflicts", limit=1) == ["hit.md#0"]


def test_a_literal_search_without_a_phrase_is_a_programming_error(store: VectorStore):
    with pytest.raises(ValueError, match="phrase"):
        store.search(
            mode="literal", dense=None, sparse=None, filter=SearchFilter(), limit=1, candidates=1, fusion=RRF_60
        )


def _drop_content_index(store: VectorStore) -> None:
    """Make the store look like one a release before the text index made."""
    if isinstance(store, EdgeStore):
        store._s.update(qe.UpdateOperation.delete_field_index(CONTENT))
        store._s.flush()
    else:
        assert isinstance(store, QdrantServerStore)
        store.client.delete_payload_index(store.collection, CONTENT)


def _has_content_index(store: VectorStore) -> bool:
    if isinstance(store, EdgeStore):
        return CONTENT in store._s.info().payload_schema
    assert isinstance(store, QdrantServerStore)
    return CONTENT in (store.client.get_collection(store.collection).payload_schema or {})


# Not qdrant-local: local mode keeps no payload indexes to lose or gain.
@pytest.mark.parametrize("store_opener", ["edge", "qdrant-server"], indirect=True)
def test_a_store_from_before_the_text_index_gains_it_on_open(store_opener: StoreOpener):
    store = store_opener.open()
    fill(store)
    _drop_content_index(store)
    assert not _has_content_index(store)
    store.close()
    reopened = store_opener.open()
    assert _has_content_index(reopened)
    assert literal(reopened, "ERR_CONN_RESET") == ["c.md#0", "d.md#0"]
