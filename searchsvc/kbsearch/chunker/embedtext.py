"""The text a chunk is embedded as: a short context line (title, heading path), tags, then the chunk."""

from __future__ import annotations

# Context lines stay short: every token they take is one the chunk text loses in MiniLM's 256.
MAX_CONTEXT_CHARS = 120
MAX_TAGS_CHARS = 80


def embed_text(title: str | None, headings: list[str], tags: list[str], text: str) -> str:
    """Context line (title and heading path not already in the text), tags, then the text."""
    parts: list[str] = []
    seen: set[str] = set()
    folded = text.casefold()
    for part in [title or "", *headings]:
        key = part.casefold()
        if part and key not in seen and not _mentions(folded, key):
            seen.add(key)
            parts.append(part)
    lines = []
    if parts:
        lines.append(_fit_path(parts, MAX_CONTEXT_CHARS))
    if tags:
        lines.append(_fit_path(["Tags: " + ", ".join(tags)], MAX_TAGS_CHARS))
    lines.append(text)
    return "\n".join(lines)


def _mentions(folded_text: str, folded_phrase: str) -> bool:
    """Whether the phrase occurs as whole words: "Go" is not mentioned by "Google"."""
    start = folded_text.find(folded_phrase)
    while start >= 0:
        end = start + len(folded_phrase)
        if (start == 0 or not _is_word(folded_text[start - 1])) and (
            end == len(folded_text) or not _is_word(folded_text[end])
        ):
            return True
        start = folded_text.find(folded_phrase, start + 1)
    return False


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _fit_path(parts: list[str], limit: int) -> str:
    # Keep the title and the innermost headings: they say most about the chunk.
    parts = list(parts)
    while len(parts) > 2 and len(" > ".join(parts)) > limit:
        del parts[1]
    line = " > ".join(parts)
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
