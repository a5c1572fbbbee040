"""BM25 sparse encoder: scoring sanity, stopwords, determinism and the pinned term-id scheme."""

from __future__ import annotations

import pytest

from kbsearch.models import SparseVector
from kbsearch.store.bm25 import Bm25Encoder


@pytest.fixture(scope="module")
def encoder() -> Bm25Encoder:
    return Bm25Encoder()


def dot(query: SparseVector, doc: SparseVector) -> float:
    weights = dict(zip(doc.indices, doc.values, strict=True))
    return sum(v * weights.get(i, 0.0) for i, v in zip(query.indices, query.values, strict=True))


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """Reference MurmurHash3 x86_32, to pin the term ids independently of the encoder."""
    mask, c1, c2 = 0xFFFFFFFF, 0xCC9E2D51, 0x1B873593

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = seed
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = rotl((int.from_bytes(data[i : i + 4], "little") * c1) & mask, 15) * c2 & mask
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & mask
    if tail := data[whole:]:
        h ^= rotl((int.from_bytes(tail, "little") * c1) & mask, 15) * c2 & mask
    h ^= len(data)
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & mask
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def term_id(stem: str) -> int:
    """abs() of the signed hash: fastembed's `abs(mmh3.hash(token))`."""
    unsigned = murmur3_32(stem.encode())
    return abs(unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned)


def test_murmur_reference_is_right():
    # Published MurmurHash3 x86_32 test vectors.
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"Hello, world!", 1234) == 0xFAF6CDB3


def test_term_ids_are_abs_signed_murmur3_of_english_stems(encoder):
    assert encoder.encode_query("password").indices == [term_id("password")]
    # Lowercased and stemmed: all three are the stem "run".
    assert encoder.encode_query("Running runs RUN").indices == [term_id("run")]
    vector = encoder.encode_query("Installing Helm charts")
    assert vector.indices == sorted(term_id(s) for s in ("instal", "helm", "chart"))


def test_document_weights_are_bm25_term_frequency(encoder):
    # One token of a one-token document: tf*(k+1) / (tf + k*(1-b+b*len/avg_len)).
    expected = 2.2 / (1 + 1.2 * (0.25 + 0.75 * 1 / 256))
    vector = encoder.encode_documents(["helm"])[0]
    assert vector.indices == [term_id("helm")]
    assert vector.values[0] == pytest.approx(expected, rel=1e-6)
    repeated = encoder.encode_documents(["helm helm helm kubectl"])[0]
    weights = dict(zip(repeated.indices, repeated.values, strict=True))
    assert weights[term_id("helm")] > weights[term_id("kubectl")]


def test_term_overlap_ranks_documents(encoder):
    docs = [
        "Install the Helm chart into the cluster with helm install.",
        "Baking sourdough bread at home needs flour, water and time.",
        "Upgrade a release: helm upgrade rolls the chart forward.",
        "The cluster autoscaler adds nodes when pods are pending.",
    ]
    vectors = encoder.encode_documents(docs)
    scores = [dot(encoder.encode_query("install helm chart"), v) for v in vectors]
    assert scores[0] > scores[2] > 0
    assert scores[1] == 0 and scores[3] == 0
    # Stemming joins word forms across query and document.
    assert dot(encoder.encode_query("baked breads"), vectors[1]) > 0


@pytest.mark.parametrize("query", ["the and of to is it", "", "   ", "?!.,"])
def test_stopword_only_query_is_empty(encoder, query):
    assert encoder.encode_query(query) == SparseVector(indices=[], values=[])


def test_deterministic_across_calls_and_instances(encoder):
    texts = ["Kubernetes operators reconcile desired state.", "", "ümlaut café naïve 123 foo_bar"]
    first = encoder.encode_documents(texts)
    assert first == encoder.encode_documents(texts) == Bm25Encoder().encode_documents(texts)
    assert [encoder.encode_documents([t])[0] for t in texts] == first
    assert encoder.encode_query(texts[0]) == Bm25Encoder().encode_query(texts[0])


def test_vectors_are_sorted_and_positive(encoder):
    for vector in [
        *encoder.encode_documents(["zeta alpha mid beta gamma delta epsilon"]),
        encoder.encode_query("zeta alpha mid beta gamma delta epsilon"),
    ]:
        assert vector.indices == sorted(set(vector.indices))
        assert all(v > 0 for v in vector.values)


def test_name_is_stable():
    # Part of the collection signature: changing it forces a re-index, so it changes only on purpose.
    assert Bm25Encoder.name == "qdrant-edge-bm25-en-v1"
