"""Result snippets with the query's terms marked: every piece of text is escaped before a <mark> goes around it."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_WORD = re.compile(r"\w+", re.UNICODE)
_HEADING_MARK = re.compile(r"^#{1,6}[ \t]+", re.MULTILINE)
SNIPPET_CHARS = 280
MAX_TERMS = 16


def query_terms(query: str) -> list[str]:
    """The words worth marking: two characters or more, longest first so `config` wins over `con`."""
    words = {w.lower() for w in _WORD.findall(query) if len(w) >= 2}
    return sorted(words, key=lambda w: (-len(w), w))[:MAX_TERMS]


def _pattern(terms: list[str]) -> re.Pattern[str] | None:
    if not terms:
        return None
    # Word starts only: `log` marks `logging` but not `catalog`.
    return re.compile(r"\b(?:" + "|".join(re.escape(t) for t in terms) + r")\w*", re.IGNORECASE | re.UNICODE)


def snippet(text: str, query: str, size: int = SNIPPET_CHARS) -> Markup:
    """About `size` characters of `text` around its first matching term, terms marked, all else escaped."""
    # A snippet is one paragraph: markdown heading marks and line breaks are noise here.
    text = " ".join(_HEADING_MARK.sub("", text).split())
    pattern = _pattern(query_terms(query))
    first = pattern.search(text) if pattern else None
    start = 0
    if first is not None and first.start() > size // 3:
        start = text.rfind(" ", 0, first.start() - size // 3) + 1
    end = min(len(text), start + size)
    if end < len(text):
        space = text.rfind(" ", start + size // 2, end)
        end = space if space > 0 else end
    window = text[start:end]
    marked = mark(window, pattern)
    prefix = Markup("… ") if start > 0 else Markup("")
    suffix = Markup(" …") if end < len(text) else Markup("")
    return prefix + marked + suffix


def mark(text: str, pattern: re.Pattern[str] | None) -> Markup:
    if pattern is None:
        return Markup(escape(text))
    pieces: list[Markup] = []
    position = 0
    for match in pattern.finditer(text):
        pieces.append(Markup(escape(text[position : match.start()])))
        pieces.append(Markup("<mark>") + escape(match.group(0)) + Markup("</mark>"))
        position = match.end()
    pieces.append(Markup(escape(text[position:])))
    return Markup("").join(pieces)


def highlight(text: str, query: str) -> Markup:
    """All of `text`, escaped, with the query's terms marked (headings, titles)."""
    return mark(text, _pattern(query_terms(query)))
