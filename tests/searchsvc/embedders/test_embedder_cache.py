"""The vector cache in front of embedders, and the factory that builds embedders from settings."""

from __future__ import annotations

import threading
from array import array
from pathlib import Path

import pydantic
import pytest

from kbsearch.embedders.cache import CachedEmbedder
from kbsearch.embedders.factory import build_embedder
from kbsearch.embedders.local import LocalEmbedder
from kbsearch.embedders.onnx import OnnxEmbedder
from kbsearch.embedders.openai import OpenAIEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.settings import EmbedderSettings, Settings
from tests.support.hashing import HashingEmbedder
from tests.support.settings import embedder_of


def f32(vector: list[float]) -> list[float]:
    return array("f", vector).tolist()


def test_hits_and_misses():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=100)
    first = cache.embed_documents(["a", "b"])
    assert (cache.hits, cache.misses, inner.calls) == (0, 2, [2])
    second = cache.embed_documents(["a", "b", "c"])
    assert (cache.hits, cache.misses, inner.calls) == (2, 3, [2, 1])
    assert second[:2] == first
    assert second == [f32(inner._vector(t)) for t in "abc"]


def test_misses_go_to_the_inner_provider_in_one_batched_call_in_order():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=100)
    cache.embed_documents(["cached"])
    texts = ["x", "cached", "y", "x", "z", "cached"]
    result = cache.embed_documents(texts)
    assert inner.calls == [1, 3]  # x, y, z once each, together
    assert result == [f32(inner._vector(t)) for t in texts]
    assert (cache.hits, cache.misses) == (3, 4)  # the repeated "x" counts as a hit


def test_all_hits_make_no_inner_call():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)
    cache.embed_documents(["a", "b"])
    cache.embed_documents(["b", "a"])
    assert cache.embed_documents([]) == []
    assert inner.calls == [2]


def test_hit_and_miss_give_the_same_vector():
    cache = CachedEmbedder(HashingEmbedder(), max_entries=10)
    assert cache.embed_query("text") == cache.embed_query("text")
    assert (cache.hits, cache.misses) == (1, 1)


def test_lru_bound():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=2)
    cache.embed_documents(["a"])
    cache.embed_documents(["b"])
    cache.embed_documents(["a"])  # a is now the most recently used
    cache.embed_documents(["c"])  # evicts b
    assert len(cache) == 2
    misses = cache.misses
    cache.embed_documents(["a"])
    assert cache.misses == misses  # still cached
    cache.embed_documents(["b"])
    assert cache.misses == misses + 1  # was evicted


def test_a_batch_larger_than_the_cache_is_still_answered():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=3)
    texts = [f"t{i}" for i in range(10)]
    assert cache.embed_documents(texts) == [f32(inner._vector(t)) for t in texts]
    assert len(cache) == 3


def test_model_is_part_of_the_key():
    inner = HashingEmbedder(model="hashing-v1")
    cache = CachedEmbedder(inner, max_entries=10)
    cache.embed_documents(["same text"])
    inner.model = "hashing-v2"
    cache.embed_documents(["same text"])
    assert (cache.hits, cache.misses) == (0, 2)


def test_delegates_identity_and_load():
    class Loading(HashingEmbedder):
        loads = 0

        def load(self) -> None:
            self.loads += 1

    inner = Loading(dimensions=16)
    cache = CachedEmbedder(inner, max_entries=10)
    cache.load()
    assert (cache.provider, cache.model, cache.dimensions, inner.loads) == ("hashing", "hashing-v1", 16, 1)


def test_thread_safety():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=50)
    texts = [f"text {i}" for i in range(80)]
    expected = {t: f32(inner._vector(t)) for t in texts}
    errors: list[str] = []

    def work(seed: int) -> None:
        for round_ in range(40):
            batch = [texts[(seed * 7 + round_ * 3 + j) % len(texts)] for j in range(5)]
            if cache.embed_documents(batch) != [expected[t] for t in batch]:
                errors.append(f"wrong vectors in thread {seed}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) <= 50
    assert cache.hits + cache.misses == 8 * 40 * 5


def test_rejects_a_non_positive_bound():
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        CachedEmbedder(HashingEmbedder(), max_entries=0)


# --- factory -------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("SEARCHSVC_") or name == "OPENAI_API_KEY":
            monkeypatch.delenv(name)


def test_factory_builds_a_cached_local_embedder_without_loading_it(clean_env):
    embedder = embedder_of(Settings(local_batch_size=8, embed_cache_size=123, local_backend="torch"))
    assert isinstance(embedder, CachedEmbedder) and embedder.max_entries == 123
    inner = embedder.inner
    assert isinstance(inner, LocalEmbedder)
    assert (inner.model, inner.batch_size, inner._st) == ("all-MiniLM-L6-v2", 8, None)
    assert (embedder.provider, embedder.backend) == ("local", "torch")


def test_factory_builds_the_default_onnx_embedder_without_loading_it(clean_env, tmp_path):
    embedder = embedder_of(Settings(local_batch_size=8, data_dir=tmp_path))
    assert isinstance(embedder, CachedEmbedder)
    inner = embedder.inner
    assert isinstance(inner, OnnxEmbedder)
    assert (inner.model, inner.batch_size, inner.variant, inner._session) == ("all-MiniLM-L6-v2", 8, "int8", None)
    assert (embedder.provider, embedder.backend) == ("local", "onnx-int8")
    assert not (tmp_path / ".onnx").exists()  # nothing is exported before load()


def test_factory_builds_an_openai_embedder(clean_env):
    settings = Settings(
        embedder="openai",
        openai_api_key="sk-test",
        openai_base_url="http://127.0.0.1:9/v1",
        openai_model="m",
        openai_dimensions=256,
        openai_batch_size=7,
        openai_max_retries=2,
        embed_cache_size=0,
    )
    embedder = embedder_of(settings)
    try:
        assert isinstance(embedder, OpenAIEmbedder)
        assert (embedder.model, embedder.dimensions, embedder.batch_size, embedder.max_retries) == ("m", 256, 7, 2)
    finally:
        embedder.close()


def test_only_real_providers_are_reachable_from_settings(clean_env):
    with pytest.raises(pydantic.ValidationError):
        Settings(embedder="hashing")
    forced = EmbedderSettings.model_construct(embedder="hashing", embed_cache_size=0)
    with pytest.raises(ConfigurationError):
        build_embedder(forced, Path("data"))


def test_openai_without_a_key_is_a_configuration_error(clean_env):
    with pytest.raises(ConfigurationError, match="SEARCHSVC_OPENAI_API_KEY"):
        embedder_of(Settings(embedder="openai", embed_cache_size=0))


def test_a_text_one_partition_embedded_is_a_miss_for_every_other():
    # A hit answers in a fraction of a miss's time: a caller must never hit on another's text.
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=100)
    team_b = cache.partition("caller\0team-b")
    vector = team_b.embed_query("the sentence team b searched for")
    assert (cache.hits, cache.misses) == (0, 1)
    assert cache.partition("caller\0team-a").embed_query("the sentence team b searched for") == vector
    assert (cache.hits, cache.misses) == (0, 2)  # team a's probe was embedded afresh
    assert cache.embed_documents(["the sentence team b searched for"]) == [vector]
    assert (cache.hits, cache.misses) == (0, 3)  # nor does the shared partition see it
    assert team_b.embed_query("the sentence team b searched for") == vector
    assert (cache.hits, cache.misses) == (1, 3)  # within one partition the cache still works


def test_keyed_items_of_two_partitions_go_to_the_model_in_one_call():
    inner = HashingEmbedder()
    cache = CachedEmbedder(inner, max_entries=100)
    cache.embed_keyed([("a", "same"), ("b", "same"), ("a", "same")])
    assert (cache.hits, cache.misses, inner.calls) == (1, 2, [2])


def test_the_query_lane_shares_the_entries_and_partitions_of_the_document_lane():
    class Lanes(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.lanes: list[str] = []

        def embed_documents(self, texts):
            self.lanes.append("documents")
            return super().embed_documents(texts)

        def embed_query_lane(self, texts):
            self.lanes.append("query")
            return HashingEmbedder.embed_documents(self, texts)

    inner = Lanes()
    cache = CachedEmbedder(inner, max_entries=100)
    team_b = cache.partition("caller\0team-b")
    vectors = team_b.embed_query_lane(["a passage", "another"])
    assert inner.lanes == ["query"]
    assert team_b.embed_documents(["another", "a passage"]) == vectors[::-1]  # hits, whichever lane
    assert inner.lanes == ["query"]
    cache.partition("caller\0team-a").embed_query_lane(["a passage"])  # another partition: a miss
    team_b.embed_query("a question")
    assert inner.lanes == ["query", "query", "query"]
    team_b.embed_documents(["a new chunk"])
    assert inner.lanes[-1] == "documents"
