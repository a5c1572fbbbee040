"""BM25 sparse encoder: tokens, stems, stopwords, weights, query vs chunk encoding, determinism, unicode,
the pinned term-id scheme, and the signature that makes a changed encoder refuse an old collection."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import qdrant_edge

from kbsearch.errors import ConfigurationError
from kbsearch.models import CollectionSignature, SparseVector
from kbsearch.store import bm25
from kbsearch.store.bm25 import STOPWORDS, Bm25Encoder
from kbsearch.store.edge.store import EdgeStore


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
    """abs() of the signed hash: fastembed's `abs(mmh3.hash(token))`, computed without mmh3."""
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


def stems(encoder: Bm25Encoder, text: str) -> list[str]:
    return encoder.tokens(text)


def weights(vector: SparseVector) -> dict[int, float]:
    return dict(zip(vector.indices, vector.values, strict=True))


def tf_weight(tf: float, length: float) -> float:
    """The pinned BM25 term-frequency part: k1=1.2, b=0.75, avg_len=120."""
    return tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / 120))


# --- tokens -------------------------------------------------------------------------------------


def test_tokens_are_lowercased_word_stems_in_order(encoder):
    assert stems(encoder, "Running runs RUN") == ["run", "run", "run"]
    assert stems(encoder, "Installing Helm charts") == ["instal", "helm", "chart"]
    # Punctuation and hyphens split words; digits and underscores stay inside a token.
    assert stems(encoder, "IL-6 (covid-19) foo_bar, x.z") == ["il", "6", "covid", "19", "foo_bar", "x", "z"]


def test_over_long_tokens_are_dropped(encoder):
    assert stems(encoder, "a" * 41 + " helm") == ["helm"]
    assert stems(encoder, "q" * 40) == ["q" * 40]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\uff28\uff25\uff2c\uff2d \uff43\uff48\uff41\uff52\uff54", ["helm", "chart"]),  # full-width: NFKC
        ("ﬁle", ["file"]),  # ligature: NFKC
        ("STRASSE straße", ["strass", "strass"]),  # casefold, not lower()
        ("café cafe", ["café", "cafe"]),  # accents are kept: no ASCII folding
        ("\u03b1-synuclein", ["\u03b1", "synuclein"]),  # Greek alpha
        ("Kubernetes\u00a0operator", ["kubernet", "oper"]),  # no-break space separates
    ],
)
def test_unicode_text_is_normalised(encoder, text, expected):
    assert stems(encoder, text) == expected


def test_stopwords_are_nltks_english_list_which_qdrant_uses_too():
    assert len(STOPWORDS) == 179
    edge = qdrant_edge.Bm25()  # its English defaults
    assert all(not edge.embed_query(word).indices for word in STOPWORDS)
    assert {"not", "no", "the", "don't", "you'll"} <= STOPWORDS


def test_stopwords_are_dropped_from_chunks_and_queries(encoder):
    assert stems(encoder, "The cat is on the mat, isn't it?") == ["cat", "mat"]
    assert encoder.encode_query("the cat and the mat").indices == sorted({term_id("cat"), term_id("mat")})


@pytest.mark.parametrize("query", ["the and of to is it", "", "   ", "?!.,", "don't you'll"])
def test_stopword_only_query_is_empty(encoder, query):
    assert encoder.encode_query(query) == SparseVector(indices=[], values=[])


def test_term_ids_match_qdrants_own_bm25_on_plain_words(encoder):
    # Same stems, same hash: the engine's IDF sees the terms fastembed or Qdrant would produce.
    text = "Operators reconcile the desired state of clusters; controllers watch resources and retry."
    assert encoder.encode_query(text).indices == sorted(qdrant_edge.Bm25().embed_query(text).indices)


# --- weights ------------------------------------------------------------------------------------


def test_chunk_weights_are_bm25_term_frequency(encoder):
    [vector] = encoder.encode_chunks(["helm"])
    assert vector.indices == [term_id("helm")]
    assert vector.values[0] == pytest.approx(tf_weight(1, 1), rel=1e-9)
    [repeated] = encoder.encode_chunks(["helm helm helm kubectl"])
    assert weights(repeated) == pytest.approx({term_id("helm"): tf_weight(3, 4), term_id("kubectl"): tf_weight(1, 4)})


def test_length_normalises_weights(encoder):
    short, long = (encoder.encode_chunks([text])[0] for text in ("helm chart", "helm " + "filler " * 200))
    assert weights(short)[term_id("helm")] > weights(long)[term_id("helm")]


def test_neighbouring_chunks_add_context_at_a_quarter_weight(encoder):
    first, second, third = encoder.encode_chunks(["helm", "kubectl kubectl", "pod"])
    # Chunk 0: its own "helm", a quarter of chunk 1's two "kubectl"; length 1 + 0.25 * 2.
    assert weights(first) == pytest.approx(
        {term_id("helm"): tf_weight(1, 1.5), term_id("kubectl"): tf_weight(0.5, 1.5)}
    )
    # Chunk 1 sees both neighbours; chunk 2 sees chunk 1 only, never chunk 0.
    length = 2 + 0.25 * (1 + 1)
    assert weights(second) == pytest.approx(
        {
            term_id("kubectl"): tf_weight(2, length),
            term_id("helm"): tf_weight(0.25, length),
            term_id("pod"): tf_weight(0.25, length),
        }
    )
    assert term_id("helm") not in weights(third)
    # A term of its own outweighs the same term seen in a neighbour.
    assert weights(second)[term_id("kubectl")] > weights(first)[term_id("kubectl")]


def test_chunks_of_separate_documents_do_not_mix(encoder):
    together = encoder.encode_chunks(["helm", "kubectl"])
    assert together != [*encoder.encode_chunks(["helm"]), *encoder.encode_chunks(["kubectl"])]
    assert encoder.encode_chunks([]) == []


def test_query_weights_are_one_per_distinct_stem(encoder):
    query = encoder.encode_query("helm Helm helms chart")
    assert query == SparseVector(indices=sorted({term_id("helm"), term_id("chart")}), values=[1.0, 1.0])
    # The same text as a chunk weighs by frequency instead.
    [chunk] = encoder.encode_chunks(["helm Helm helms chart"])
    assert weights(chunk)[term_id("helm")] == pytest.approx(tf_weight(3, 4))


def test_term_overlap_ranks_documents(encoder):
    docs = [
        "Install the Helm chart into the cluster with helm install.",
        "Baking sourdough bread at home needs flour, water and time.",
        "Upgrade a release: helm upgrade rolls the chart forward.",
        "The cluster autoscaler adds nodes when pods are pending.",
    ]
    vectors = [encoder.encode_chunks([doc])[0] for doc in docs]
    scores = [dot(encoder.encode_query("install helm chart"), v) for v in vectors]
    assert scores[0] > scores[2] > 0
    assert scores[1] == 0 and scores[3] == 0
    # Stemming joins word forms across query and document.
    assert dot(encoder.encode_query("baked breads"), vectors[1]) > 0


def test_vectors_are_sorted_and_positive(encoder):
    for vector in [
        *encoder.encode_chunks(["zeta alpha mid beta gamma delta epsilon", "omega alpha"]),
        encoder.encode_query("zeta alpha mid beta gamma delta epsilon"),
    ]:
        assert vector.indices == sorted(set(vector.indices))
        assert all(v > 0 for v in vector.values)


# --- determinism --------------------------------------------------------------------------------


def test_deterministic_across_calls_instances_and_threads(encoder):
    texts = ["Kubernetes operators reconcile desired state.", "", "ümlaut café naïve 123 foo_bar"]
    first = encoder.encode_chunks(texts)
    assert first == encoder.encode_chunks(texts) == Bm25Encoder().encode_chunks(texts)
    assert encoder.encode_query(texts[0]) == Bm25Encoder().encode_query(texts[0])
    barrier = threading.Barrier(4)

    def encode(_: int) -> list[SparseVector]:
        barrier.wait()
        return [v for _ in range(50) for v in encoder.encode_chunks(texts)]

    with ThreadPoolExecutor(4) as pool:
        assert all(result == first * 50 for result in pool.map(encode, range(4)))


# --- the collection signature -------------------------------------------------------------------


def test_name_is_stable():
    # Part of the collection signature: changing it forces a re-index, so it changes only on purpose.
    # v3: Chinese and Japanese segmented (kbsearch.store.cjk); English terms as in kb-bm25-en-v2.
    assert Bm25Encoder.name == "kb-bm25-cjk-v4"
    assert (bm25.K1, bm25.B, bm25.AVG_LEN, bm25.NEIGHBOUR_WEIGHT) == (1.2, 0.75, 120.0, 0.25)


def test_a_collection_built_with_the_previous_encoder_is_refused_with_reindex_steps(tmp_path):
    old = CollectionSignature("local", "all-MiniLM-L6-v2", 384, "qdrant-edge-bm25-en-v1")
    store = EdgeStore(tmp_path, "knowledge")
    store.open(old)
    store.close()
    with pytest.raises(ConfigurationError) as refused:
        EdgeStore(tmp_path, "knowledge").open(CollectionSignature("local", "all-MiniLM-L6-v2", 384, Bm25Encoder.name))
    message = str(refused.value)
    assert "qdrant-edge-bm25-en-v1" in message and Bm25Encoder.name in message
    assert "To re-index" in message and "SEARCHSVC_COLLECTION" in message
