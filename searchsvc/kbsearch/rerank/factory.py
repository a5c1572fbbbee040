"""Builds the configured local or remote reranker (the listwise chat one is built with the services)."""

from __future__ import annotations

from kbsearch.errors import ConfigurationError
from kbsearch.rerank.base import Reranker
from kbsearch.settings import RerankSettings

__all__ = ["build_reranker"]


def build_reranker(reranking: RerankSettings, threads: int) -> Reranker | None:
    """The SEARCHSVC_RERANK=local or remote reranker; None for off and llm.

    `threads`: a local cross-encoder's inference threads (SEARCHSVC_LOCAL_THREADS; 0 is one).
    """
    budget_s = reranking.rerank_timeout_ms / 1000
    if reranking.rerank == "local":
        from kbsearch.rerank.onnx import OnnxCrossEncoder  # onnxruntime loads only when asked for

        assert reranking.rerank_model_dir is not None  # the settings' validator
        try:
            return OnnxCrossEncoder(
                reranking.rerank_model_dir, max_tokens=reranking.rerank_max_tokens, threads=threads or 1
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigurationError(f"SEARCHSVC_RERANK_MODEL_DIR: cannot load the cross-encoder: {exc}") from None
    if reranking.rerank == "remote":
        from kbsearch.rerank.remote import RemoteReranker

        assert reranking.rerank_url is not None
        return RemoteReranker(
            reranking.rerank_url,
            protocol=reranking.rerank_protocol,
            model=reranking.rerank_model,
            api_key=reranking.rerank_api_key.get_secret_value() if reranking.rerank_api_key else None,
            timeout_s=budget_s,
        )
    return None
