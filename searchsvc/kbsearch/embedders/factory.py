"""Builds the configured embedding provider; only the real providers are reachable from settings."""

from __future__ import annotations

from pathlib import Path

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.embedders.cache import CachedEmbedder
from kbsearch.embedders.catalog import spec_for
from kbsearch.embedders.local import LocalEmbedder
from kbsearch.embedders.onnx import OnnxEmbedder
from kbsearch.embedders.onnx_strings import StringGraphEmbedder
from kbsearch.embedders.openai import OpenAIEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.models import CollectionSignature
from kbsearch.settings import EmbedderSettings, SearchSettings


def build_embedder(embedding: EmbedderSettings, data_dir: Path) -> EmbeddingProvider:
    """The provider `embedding` names, not yet loaded; wrapped in a cache when embed_cache_size > 0.

    `data_dir` (SEARCHSVC_DATA_DIR) is where a local model's exports and fetched files live by default.
    """
    inner: EmbeddingProvider
    if embedding.embedder == "local" and embedding.local_backend == "torch":
        if spec_for(embedding.local_model).fetched_backend is not None:
            raise ConfigurationError(
                f"{embedding.local_model} runs only on ONNX Runtime: set SEARCHSVC_LOCAL_BACKEND=onnx-int8"
            )
        inner = LocalEmbedder(
            model=embedding.local_model, batch_size=embedding.local_batch_size, threads=embedding.local_threads
        )
    elif embedding.embedder == "local" and spec_for(embedding.local_model).pooling == "strings":
        if embedding.local_backend != spec_for(embedding.local_model).fetched_backend:
            raise ConfigurationError(
                f"{embedding.local_model} runs only as int8: set SEARCHSVC_LOCAL_BACKEND=onnx-int8"
            )
        inner = StringGraphEmbedder(
            embedding.local_model,
            models_dir=embedding.local_models_dir(data_dir),
            batch_size=embedding.local_batch_size,
            threads=embedding.local_threads,
        )
    elif embedding.embedder == "local":
        # Neither torch nor sentence-transformers is imported on this path (the image has neither).
        inner = OnnxEmbedder(
            model=embedding.local_model,
            variant="int8" if embedding.local_backend == "onnx-int8" else "fp32",
            export_dir=embedding.onnx_export_dir(data_dir),
            models_dir=embedding.local_models_dir(data_dir),
            batch_size=embedding.local_batch_size,
            batch_tokens=embedding.local_batch_tokens,
            threads=embedding.local_threads,
        )
    elif embedding.embedder == "openai":
        key = embedding.openai_api_key.get_secret_value() if embedding.openai_api_key else None
        inner = OpenAIEmbedder(
            model=embedding.openai_model,
            api_key=key,
            base_url=embedding.openai_base_url,
            dimensions=embedding.openai_dimensions,
            batch_size=embedding.openai_batch_size,
            max_retries=embedding.openai_max_retries,
            timeout=embedding.openai_timeout_s,
        )
    else:
        raise ConfigurationError(f"unknown embedder {embedding.embedder!r}: use 'local' or 'openai'")
    if embedding.embed_cache_size > 0:
        return CachedEmbedder(inner, embedding.embed_cache_size)
    return inner


def relevance_calibration(embedding: EmbedderSettings, search: SearchSettings) -> tuple[float, float]:
    """(midpoint, steepness) of the relevance curve: each as set, else the local model's own."""
    own = spec_for(embedding.local_model).relevance if embedding.embedder == "local" else None
    chosen = search.model_fields_set
    midpoint = search.relevance_midpoint if own is None or "relevance_midpoint" in chosen else own[0]
    steepness = search.relevance_steepness if own is None or "relevance_steepness" in chosen else own[1]
    return midpoint, steepness


def relevance_model_name(embedding: EmbedderSettings, search: SearchSettings) -> str | None:
    """The embedder whose fitted relevance model applies (services/search/relevance_models.json's key), None: the curve.

    Only the local models have fitted ones; the curve also when it is chosen, or its midpoint or steepness set."""
    chosen = search.model_fields_set
    if search.relevance_model == "curve" or {"relevance_midpoint", "relevance_steepness"} & chosen:
        return None
    if embedding.embedder != "local":
        return None
    return spec_for(embedding.local_model).name


def build_embedder_for(
    embedding: EmbedderSettings, data_dir: Path, signature: CollectionSignature
) -> EmbeddingProvider:
    """The provider that made a collection's vectors, to serve it while it is rebuilt for `embedding`.

    Built from the signature the collection records; the rest (endpoint, key, batch sizes) from
    `embedding`. A provider this service cannot load is a configuration error naming the way out.
    """
    if signature.embedder_provider == "local":
        backend = signature.embedder_backend or "torch"  # collections from before backends were recorded
        return build_embedder(
            embedding.model_copy(
                update={"embedder": "local", "local_model": signature.embedder_model, "local_backend": backend}
            ),
            data_dir,
        )
    if signature.embedder_provider == "openai":
        same_model = embedding.embedder == "openai" and embedding.openai_model == signature.embedder_model
        update = {
            "embedder": "openai",
            "openai_model": signature.embedder_model,
            "openai_dimensions": embedding.openai_dimensions if same_model else None,
        }
        return build_embedder(embedding.model_copy(update=update), data_dir)
    raise ConfigurationError(
        f"The collection was built with the embedder {signature.embedder_provider}/{signature.embedder_model}, "
        "which this service cannot load to serve it while it is rebuilt. Restore the settings it was built with, "
        "or set SEARCHSVC_REBUILD=off and re-index by hand (see docs/operations/upgrades-and-reindex.md)."
    )
