"""Builds the configured chat model, or none: without SEARCHSVC_LLM_MODEL, ask answers extractively."""

from __future__ import annotations

from kbsearch.llm.chat import ChatClient
from kbsearch.metrics import Metrics
from kbsearch.settings import ChatSettings


def build_chat(chat: ChatSettings, metrics: Metrics) -> ChatClient | None:
    if chat.llm_model is None:
        return None
    return ChatClient(
        chat.llm_model,
        api_key=chat.llm_api_key.get_secret_value() if chat.llm_api_key else None,
        base_url=chat.llm_base_url,
        timeout=chat.llm_timeout_s,
        max_retries=chat.llm_max_retries,
        max_wait=chat.llm_max_wait_s,
        max_tokens=chat.llm_max_tokens,
        metrics=metrics,
    )
