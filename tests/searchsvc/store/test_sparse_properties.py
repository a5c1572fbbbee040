"""The BM25 encoder on generated text: bounded output, well-formed vectors, no hang.

What the module's docstring states: tokens are linear in the normalised text, a query vector has at
most one entry per token, a chunk vector at most its own and its neighbours' tokens, every weight is
in (0, K1 + 1) and indices are strictly ascending. Text mixes words, digits, stopwords, over-long
tokens, combining marks, ligatures and the characters NFKC or casefolding expand the most.
"""

from __future__ import annotations

import math
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from kbsearch.models import SparseVector
from kbsearch.store.bm25 import K1, MAX_TOKEN_CHARS, Bm25Encoder
from tests.support.properties import properties, within

ENCODER = Bm25Encoder()
# The largest NFKC expansion of one character (U+FDFA gives 18) times casefolding's (3: "ﬃ" -> "ffi").
GROWTH = 18 * 3

PIECES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["the", "Kubernetes", "IL-6", "ß", "\ufb03", "\ufdfa", "e\u0301", "\u0130", "_", "٣"]),
    st.text(alphabet="ab", min_size=MAX_TOKEN_CHARS - 2, max_size=MAX_TOKEN_CHARS + 2),
)
TEXT = st.lists(PIECES, max_size=30).map(" ".join)


def well_formed(vector: SparseVector) -> None:
    assert len(vector.indices) == len(vector.values)
    assert all(a < b for a, b in zip(vector.indices, vector.indices[1:], strict=False))
    assert all(0 <= i < 2**31 for i in vector.indices)


@properties(300)
@given(text=TEXT)
def test_tokens_are_bounded_by_the_text(text: str) -> None:
    tokens = ENCODER.tokens(text)
    assert len(tokens) <= len(unicodedata.normalize("NFKC", text).casefold()) <= GROWTH * len(text)
    assert all(tokens)


@properties(300)
@given(text=TEXT)
def test_a_query_vector_has_one_unit_entry_per_distinct_stem(text: str) -> None:
    vector = ENCODER.encode_query(text)
    well_formed(vector)
    assert len(vector.indices) == len(set(ENCODER.tokens(text)))
    assert all(v == 1.0 for v in vector.values)


@properties(200)
@given(texts=st.lists(TEXT, max_size=6))
def test_chunk_vectors_hold_only_their_own_and_neighbour_terms(texts: list[str]) -> None:
    vectors = ENCODER.encode_chunks(texts)
    assert len(vectors) == len(texts)
    for i, vector in enumerate(vectors):
        well_formed(vector)
        nearby = set()
        for j in (i - 1, i, i + 1):
            if 0 <= j < len(texts):
                nearby |= set(ENCODER.tokens(texts[j]))
        assert len(vector.indices) <= len(nearby)
        assert all(0 < v < K1 + 1 and math.isfinite(v) for v in vector.values)


def test_megabyte_inputs_of_hostile_shapes_finish() -> None:
    """A hang detector over shapes that hurt regex tokenizers: one huge token, combining marks,
    expanding characters and a million one-letter words (each a few hundred ms here)."""
    shapes = ["a" * 2**20, "e" + "\u0301" * 2**20, "\ufdfa" * 2**16, "a " * 2**19, "\u0130" * 2**19]
    for text in shapes:
        vectors = within(120, lambda text=text: ENCODER.encode_chunks([text, text]))
        for vector in vectors:
            well_formed(vector)
