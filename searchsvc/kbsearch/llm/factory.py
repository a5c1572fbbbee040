"""Builds the configured chat model, or none: without SEARCHSVC_LLM_MODEL, ask answers extractively."""

from __future__ import annotations

from kbsearch.llm.chat import ChatClient
from kbsearch.metrics import Metrics
from kbsearch.settings import Settings


def build_chat(settings: Settings, metrics: Metrics) -> ChatClient | None:
    if settings.llm_model is None:
        return None
    return ChatClient(
        settings.llm_model,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        base_url=settings.llm_base_url,
        timeout=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        max_wait=settings.llm_max_wait_s,
        max_tokens=settings.llm_max_tokens,
        metrics=metrics,
    )
