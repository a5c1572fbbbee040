"""The key an OpenAI-compatible client is handed, decided alike for the embedder and the chat client.

The two owners of the `openai` package never import each other, so the rule they share lives here;
this module imports no vendor library.
"""

from __future__ import annotations

import os

from kbsearch.errors import ConfigurationError

# The openai client insists on a key; servers without auth ignore this one.
PLACEHOLDER_KEY = "unused"


def client_api_key(api_key: str | None, base_url: str | None, *, key_setting: str, url_setting: str) -> str | None:
    """`api_key` as given, or None when OPENAI_API_KEY is set (the client reads it); without either, a
    placeholder for a server at `base_url`, and a ConfigurationError for the OpenAI API itself."""
    if api_key is not None or os.environ.get("OPENAI_API_KEY"):
        return api_key
    if base_url is None:
        raise ConfigurationError(
            f"{key_setting} is required for the OpenAI API (a server set with {url_setting} may go without one)"
        )
    return PLACEHOLDER_KEY
