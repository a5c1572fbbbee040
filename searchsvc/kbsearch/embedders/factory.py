"""Builds the configured embedding provider; only the real providers are reachable from settings."""

from __future__ import annotations

from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.embedders.cache import CachedEmbedder
from kbsearch.embedders.local import LocalEmbedder
from kbsearch.embedders.onnx import OnnxEmbedder
from kbsearch.embedders.openai import OpenAIEmbedder
from kbsearch.errors import ConfigurationError
from kbsearch.settings import Settings


def build_embedder(settings: Settings) -> EmbeddingProvider:
    """The provider for `settings`, not yet loaded; wrapped in a cache when embed_cache_size > 0."""
    inner: EmbeddingProvider
    if settings.embedder == "local" and settings.local_backend == "torch":
        inner = LocalEmbedder(
            model=settings.local_model, batch_size=settings.local_batch_size, threads=settings.local_threads
        )
    elif settings.embedder == "local":
        # Neither torch nor sentence-transformers is imported on this path (the image has neither).
        inner = OnnxEmbedder(
            model=settings.local_model,
            variant="int8" if settings.local_backend == "onnx-int8" else "fp32",
            export_dir=settings.onnx_export_dir,
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
