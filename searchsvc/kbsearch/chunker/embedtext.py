"""The text a chunk is embedded as: a short context line (title, heading path, lead-in), tags, then the chunk.

The chunk's own text is embedded without what a reader never sees as words: HTML comments,
Hugo and mkdocs shortcodes and includes, raw HTML tags, link and image targets. Every token they
took would be one the chunk's words lose in MiniLM's 256.
"""

from __future__ import annotations

import re

from kbsearch.chunker.inline import readable

__all__ = ["MAX_CONTEXT_CHARS", "MAX_HEADING_CHARS", "MAX_TAGS_CHARS", "clip_heading", "embed_text", "readable_name"]

# Context lines stay short: every token they take is one the chunk text loses in MiniLM's 256.
MAX_CONTEXT_CHARS = 120
MAX_TAGS_CHARS = 80
MAX_LEAD_IN_CHARS = 160
# Heading text is clipped: it is stored in every chunk's payload and repeated in embed_text.
MAX_HEADING_CHARS = 120

_BLANK_RUNS = re.compile(r"\n{3,}")


def embed_text(title: str | None, headings: list[str], tags: list[str], text: str, *, lead_in: str = "") -> str:
    """Context line (title and heading path not already in the text), lead-in, tags, then the cleaned text."""
    words = readable_text(text)
    parts: list[str] = []
    seen: set[str] = set()
    folded = words.casefold()
    for part in [title or "", *headings]:
        key = part.casefold()
        if part and key not in seen and not _mentions(folded, key):
            seen.add(key)
            parts.append(part)
    lines = []
    if parts:
        lines.append(_fit_path(parts, MAX_CONTEXT_CHARS))
    if lead_in and not _mentions(folded, lead_in.casefold()):
        lines.append(_clip(lead_in, MAX_LEAD_IN_CHARS))
    if tags:
        lines.append(_tags_line(tags))
    if not words.strip():
        return ""
    lines.append(words)
    return "\n".join(lines)


def _tags_line(tags: list[str]) -> str:
    """ "Tags: a, b, ..." clipped to MAX_TAGS_CHARS, built from only the tags that reach the clip:
    joining them all cost each chunk the whole list (6,500 tags: 64 KB per chunk)."""
    line = "Tags: "
    for n, tag in enumerate(tags):
        line += (", " if n else "") + tag[: MAX_TAGS_CHARS + 1]
        if len(line) > MAX_TAGS_CHARS:
            break
    return _clip(line, MAX_TAGS_CHARS)


def readable_text(text: str) -> str:
    """The chunk as words: markup a reader does not read as text taken out."""
    return _BLANK_RUNS.sub("\n\n", readable(text)).strip()


def clip_heading(text: str) -> str:
    text = " ".join(readable_text(text[: MAX_HEADING_CHARS * 4]).split()).strip("# \t")
    return _clip(text, MAX_HEADING_CHARS)


def readable_name(name: str | None) -> str | None:
    """A title made from a file name: `docs/operator-manual/high_availability.md` -> "High availability".

    `index`, `_index` and `README` pages take their folder's name. None when there is no name.
    """
    if not name:
        return None
    parts = [p for p in re.split(r"[/\\]", name.split("#", 1)[0].split("?", 1)[0]) if p]
    while parts:
        stem = parts.pop()
        stem = re.sub(r"\.[A-Za-z0-9]{1,8}$", "", stem)
        if stem.lower() not in ("index", "_index", "readme", "") and not re.fullmatch(r"[a-z]+:", stem):
            words = " ".join(re.sub(r"[-_.]+", " ", stem).split())
            return _clip(words[:1].upper() + words[1:], MAX_HEADING_CHARS) if words else None
    return None


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


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _fit_path(parts: list[str], limit: int) -> str:
    # Keep the title and the innermost headings: they say most about the chunk.
    parts = list(parts)
    while len(parts) > 2 and len(" > ".join(parts)) > limit:
        del parts[1]
    return _clip(" > ".join(parts), limit)
