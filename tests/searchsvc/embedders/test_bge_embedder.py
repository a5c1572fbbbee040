"""bge-small-en-v1.5, the fetched local model: the real int8 graph from Maven Central (`make bge-model`,
a prerequisite of `make test`), its [CLS] pooling, its query instruction, and how settings choose it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kbsearch.embedders.cache import CachedEmbedder
from kbsearch.embedders.catalog import BGE_SMALL, spec_for
from kbsearch.embedders.factory import build_embedder_for
from kbsearch.embedders.onnx import OnnxEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.models import CollectionSignature
from kbsearch.settings import Settings
from tests.support.paths import REPO_ROOT
from tests.support.settings import calibration_of, embedder_of

REPO = REPO_ROOT
# Where `make bge-model` puts it; `make test` exports SEARCHSVC_MODELS_DIR pointing there.
MODELS_DIR = Path(os.environ.get("SEARCHSVC_MODELS_DIR") or REPO / ".tools" / "models")
PREFIX = "Represent this sentence for searching relevant passages: "


@pytest.fixture(scope="module")
def bge(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    if not (MODELS_DIR / BGE_SMALL / "model.onnx").is_file():
        pytest.fail(f"bge-small-en-v1.5 is not in {MODELS_DIR}: run `make bge-model` (make test does)")
    model = OnnxEmbedder(
        BGE_SMALL, variant="int8", export_dir=tmp_path_factory.mktemp("exports"), models_dir=MODELS_DIR
    )
    model.load()
    return model


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


@pytest.mark.slow
def test_the_fetched_model_loads_with_384_unit_vectors(bge):
    assert (bge.provider, bge.model, bge.backend, bge.dimensions) == ("local", BGE_SMALL, "onnx-int8", 384)
    vectors = np.asarray(bge.embed_documents(["Argo CD syncs applications from Git.", "x", ""]))
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert not (bge.export_dir / BGE_SMALL).exists()  # a fetched graph is used as it is, never exported


@pytest.mark.slow
def test_a_paraphrase_is_closer_than_an_unrelated_sentence(bge):
    query = bge.embed_query("How do I reset my password?")
    paraphrase, unrelated, other = bge.embed_documents(
        [
            "Recovering account credentials: if you forgot your login secret, request a recovery link by email.",
            "Baking bread: mix flour, water, yeast and salt, knead the dough, let it rise and bake it.",
            "Scaling a deployment: raise the replica count so that more pods serve the traffic.",
        ]
    )
    assert cosine(query, paraphrase) > max(cosine(query, unrelated), cosine(query, other)) + 0.1
    a, b = bge.embed_documents(["The cat sat on the mat.", "A cat was sitting on the rug."])
    assert cosine(a, b) > 0.8 > cosine(a, unrelated)


@pytest.mark.slow
def test_queries_carry_the_instruction_and_documents_do_not(bge):
    question = "which sync option keeps volumes when an application is deleted"
    as_query = bge.embed_query(question)
    (as_document,) = bge.embed_documents([question])
    (prefixed,) = bge.embed_documents([PREFIX + question])
    assert cosine(as_query, prefixed) == pytest.approx(1.0, abs=1e-6)
    assert cosine(as_query, as_document) < 0.99  # the instruction changes the vector
    # Through the service's cache and a caller's partition, the query still gets it.
    cached = CachedEmbedder(bge, 16).partition("caller")
    assert cosine(cached.embed_query(question), as_query) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
def test_the_vector_is_the_normalised_cls_token_of_the_graphs_output(bge):
    encoding = bge._tokenizer.encode("Prune resources that are no longer defined in Git.")
    ids = np.asarray([encoding.ids], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    (hidden,) = bge._session.run(None, {k: v for k, v in feeds.items() if k in bge._inputs})
    assert hidden.shape == (1, ids.shape[1], 384)  # last_hidden_state: every token
    cls = hidden[0, 0] / np.linalg.norm(hidden[0, 0])
    (ours,) = bge.embed_documents(["Prune resources that are no longer defined in Git."])
    assert cosine(ours, cls.tolist()) == pytest.approx(1.0, abs=1e-6)
    # Batched with longer texts (padding after it), the same vector within int8's activation scaling.
    batched = bge.embed_documents(["Prune resources that are no longer defined in Git.", "word " * 300])
    assert cosine(batched[0], ours) > 0.97
    assert len(bge._tokenizer.encode("word " * 600).ids) == spec_for(BGE_SMALL).max_tokens == 512


def test_settings_choose_bge_with_its_folder_and_only_on_int8(tmp_path):
    # models_dir=None: the default under the data directory, whatever SEARCHSVC_MODELS_DIR `make test` sets.
    chosen = embedder_of(Settings(local_model=BGE_SMALL, data_dir=tmp_path, models_dir=None, embed_cache_size=0))
    assert isinstance(chosen, OnnxEmbedder)
    assert (chosen.models_dir, chosen.query_prefix, chosen.backend) == (tmp_path / ".models", PREFIX, "onnx-int8")
    elsewhere = embedder_of(Settings(local_model=BGE_SMALL, models_dir=tmp_path / "m"))
    assert elsewhere.query_prefix == PREFIX  # seen through the cache the service puts in front
    assert elsewhere.inner.models_dir == tmp_path / "m"  # type: ignore[attr-defined]
    for backend in ("torch", "onnx"):
        with pytest.raises(ConfigurationError, match="SEARCHSVC_LOCAL_BACKEND=onnx-int8"):
            embedder_of(Settings(local_model=BGE_SMALL, local_backend=backend))
    minilm = embedder_of(Settings(data_dir=tmp_path, embed_cache_size=0))
    assert minilm.query_prefix == ""


def test_without_the_fetched_files_loading_says_how_to_get_them(tmp_path):
    missing = OnnxEmbedder(BGE_SMALL, variant="int8", export_dir=tmp_path, models_dir=tmp_path / "models")
    with pytest.raises(ConfigurationError, match="make bge-model") as refused:
        missing.load()
    assert str(tmp_path / "models" / BGE_SMALL) in str(refused.value)


def test_each_model_gets_its_own_relevance_curve_unless_one_is_set():
    minilm, bge = calibration_of(Settings()), calibration_of(Settings(local_model=BGE_SMALL))
    assert minilm == (0.35, 12.0)
    assert bge == spec_for(BGE_SMALL).relevance and bge[0] > minilm[0]  # bge's cosines sit higher
    assert calibration_of(Settings(local_model=BGE_SMALL, relevance_midpoint=0.5)) == (0.5, bge[1])
    assert calibration_of(Settings(embedder="openai", local_model=BGE_SMALL)) == minilm


def test_a_collection_of_the_other_model_is_served_by_it_while_it_is_rebuilt(tmp_path):
    """A model change is an embedder-signature change: the old collection is served by its own model
    (queries with its own instruction) until the background rebuild swaps in the new one."""
    settings = Settings(data_dir=tmp_path, models_dir=tmp_path / "m", embed_cache_size=0)
    bge_collection = CollectionSignature("local", BGE_SMALL, 384, "qdrant-edge-bm25", "onnx-int8")
    serving = build_embedder_for(settings.embedding, tmp_path, bge_collection)
    assert isinstance(serving, OnnxEmbedder)
    assert (serving.model, serving.query_prefix, serving.models_dir) == (BGE_SMALL, PREFIX, tmp_path / "m")
    minilm_collection = CollectionSignature("local", "all-MiniLM-L6-v2", 384, "qdrant-edge-bm25", "onnx-int8")
    back = build_embedder_for(
        settings.embedding.model_copy(update={"local_model": BGE_SMALL}), tmp_path, minilm_collection
    )
    assert (back.model, back.query_prefix) == ("all-MiniLM-L6-v2", "")
