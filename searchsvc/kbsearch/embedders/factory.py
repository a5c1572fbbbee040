"""Builds the configured embedding provider; only the real providers are reachable from settings."""

from __future__ import annotations

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.embedders.cache import CachedEmbedder
from kbsearch.embedders.catalog import spec_for
from kbsearch.embedders.local import LocalEmbedder
from kbsearch.embedders.onnx import OnnxEmbedder
from kbsearch.embedders.openai import OpenAIEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.models import CollectionSignature
from kbsearch.settings import Settings


def build_embedder(settings: Settings) -> EmbeddingProvider:
    """The provider for `settings`, not yet loaded; wrapped in a cache when embed_cache_size > 0."""
    inner: EmbeddingProvider
    if settings.embedder == "local" and settings.local_backend == "torch":
        if spec_for(settings.local_model).fetched_backend is not None:
            raise ConfigurationError(
                f"{settings.local_model} runs only on ONNX Runtime: set SEARCHSVC_LOCAL_BACKEND=onnx-int8"
            )
        inner = LocalEmbedder(
            model=settings.local_model, batch_size=settings.local_batch_size, threads=settings.local_threads
        )
    elif settings.embedder == "local":
        # Neither torch nor sentence-transformers is imported on this path (the image has neither).
        inner = OnnxEmbedder(
            model=settings.local_model,
            variant="int8" if settings.local_backend == "onnx-int8" else "fp32",
            export_dir=settings.onnx_export_dir,
            models_dir=settings.local_models_dir,
            batch_size=settings.local_batch_size,
            batch_tokens=settings.local_batch_tokens,
            threads=settings.local_threads,
        )
    elif settings.embedder == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        inner = OpenAIEmbedder(
            model=settings.openai_model,
            api_key=key,
            base_url=settings.openai_base_url,
            dimensions=settings.openai_dimensions,
            batch_size=settings.openai_batch_size,
            max_retries=settings.openai_max_retries,
            timeout=settings.openai_timeout_s,
        )
    else:
        raise ConfigurationError(f"unknown embedder {settings.embedder!r}: use 'local' or 'openai'")
    if settings.embed_cache_size > 0:
        return CachedEmbedder(inner, settings.embed_cache_size)
    return inner


def relevance_calibration(settings: Settings) -> tuple[float, float]:
    """(midpoint, steepness) of the relevance curve: each as set, else the local model's own."""
    own = spec_for(settings.local_model).relevance if settings.embedder == "local" else None
    chosen = settings.model_fields_set
    midpoint = settings.relevance_midpoint if own is None or "relevance_midpoint" in chosen else own[0]
    steepness = settings.relevance_steepness if own is None or "relevance_steepness" in chosen else own[1]
    return midpoint, steepness


def build_embedder_for(settings: Settings, signature: CollectionSignature) -> EmbeddingProvider:
    """The provider that made a collection's vectors, to serve it while it is rebuilt for `settings`.

    Built from the signature the collection records; the rest (endpoint, key, batch sizes) from
    `settings`. A provider this service cannot load is a configuration error naming the way out.
    """
    if signature.embedder_provider == "local":
        backend = signature.embedder_backend or "torch"  # collections from before backends were recorded
        return build_embedder(
            settings.model_copy(
                update={"embedder": "local", "local_model": signature.embedder_model, "local_backend": backend}
            )
        )
    if signature.embedder_provider == "openai":
        same_model = settings.embedder == "openai" and settings.openai_model == signature.embedder_model
        update = {
            "embedder": "openai",
            "openai_model": signature.embedder_model,
            "openai_dimensions": settings.openai_dimensions if same_model else None,
        }
        return build_embedder(settings.model_copy(update=update))
    raise ConfigurationError(
        f"The collection was built with the embedder {signature.embedder_provider}/{signature.embedder_model}, "
        "which this service cannot load to serve it while it is rebuilt. Restore the settings it was built with, "
        "or set SEARCHSVC_REBUILD=off and re-index by hand (see docs/operations/upgrades-and-reindex.md)."
    )
