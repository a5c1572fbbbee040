"""Builds the configured local or remote reranker (the listwise chat one is built with the services)."""

from __future__ import annotations

from kbsearch.errors import ConfigurationError
from kbsearch.rerank.base import Reranker
from kbsearch.settings import Settings

__all__ = ["build_reranker"]


def build_reranker(settings: Settings) -> Reranker | None:
    """The SEARCHSVC_RERANK=local or remote reranker; None for off and llm."""
    budget_s = settings.rerank_timeout_ms / 1000
    if settings.rerank == "local":
        from kbsearch.rerank.onnx import OnnxCrossEncoder  # onnxruntime loads only when asked for

        assert settings.rerank_model_dir is not None  # the settings' validator
        try:
            return OnnxCrossEncoder(
                settings.rerank_model_dir, max_tokens=settings.rerank_max_tokens, threads=settings.local_threads or 1
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigurationError(f"SEARCHSVC_RERANK_MODEL_DIR: cannot load the cross-encoder: {exc}") from None
    if settings.rerank == "remote":
        from kbsearch.rerank.remote import RemoteReranker

        assert settings.rerank_url is not None
        return RemoteReranker(
            settings.rerank_url,
            protocol=settings.rerank_protocol,
            model=settings.rerank_model,
            api_key=settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None,
            timeout_s=budget_s,
        )
    return None
