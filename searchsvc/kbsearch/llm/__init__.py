"""Chat models: the one owner of an OpenAI-compatible chat-completions API (kbsearch.llm.chat)."""

from kbsearch.llm.chat import ChatClient, ChatMessage, TextPiece, ToolCall, ToolSpec, TurnEnd

__all__ = ["ChatClient", "ChatMessage", "TextPiece", "ToolCall", "ToolSpec", "TurnEnd"]
