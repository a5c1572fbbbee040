"""Result snippets as a reader reads them, with the query's meaningful words marked.

A chunk is markdown: a snippet shows its prose as plain text (links by their text, no emphasis
marks, tags or entities), list items and table cells as text, and code with its line breaks (a
YAML block stays a YAML block). Stop-words ("how", "with") are never marked: the keyword lane
ignores them too. Every piece of text is escaped before a <mark> goes around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markupsafe import Markup, escape

from kbsearch.chunker.inline import CODE_SPAN
from kbsearch.chunker.mdblocks import markdown_blocks, plain
from kbsearch.store.bm25 import STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)
SNIPPET_CHARS = 280
CODE_LINES = 4  # of a code block in a snippet
CODE_LINE_CHARS = 100
MAX_TERMS = 16


def query_terms(query: str) -> list[str]:
    """The words worth marking: two characters or more, no stop-words, longest first so `config` wins over `con`."""
    words = {w.lower() for w in _WORD.findall(query) if len(w) >= 2} - STOPWORDS
    return sorted(words, key=lambda w: (-len(w), w))[:MAX_TERMS]


def _pattern(terms: list[str]) -> re.Pattern[str] | None:
    if not terms:
        return None
    # Word starts only: `log` marks `logging` but not `catalog`.
    return re.compile(r"\b(?:" + "|".join(re.escape(t) for t in terms) + r")\w*", re.IGNORECASE | re.UNICODE)


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    code: bool = False


def pieces(markdown: str) -> list[Piece]:
    """The chunk's blocks as readable pieces; headings only when there is nothing else (results show them apart)."""
    found: list[Piece] = []
    headings: list[Piece] = []
    for block in markdown_blocks(markdown):
        if block.kind == "heading":
            headings.append(Piece(plain(block.text)))
        elif block.kind == "code":
            lines = block.text.split("\n")[1:-1]  # without its fences
            code = "\n".join(line.rstrip() for line in lines).strip("\n")
            if code:
                found.append(Piece(code, code=True))
        elif block.kind == "list":
            found.extend(Piece("• " + plain(item.text)) for item in block.items if item.text.strip())
        elif block.kind == "table":
            rows = [line.strip().strip("|").split("|") for line in block.text.split("\n")]
            cells = [" · ".join(plain(cell) for cell in row) for row in rows if not _is_rule(row)]
            found.append(Piece("; ".join(cell for cell in cells if cell.strip(" ·"))))
        else:
            found.append(Piece(plain(block.text)))
    return [piece for piece in (found or headings) if piece.text]


def _is_rule(row: list[str]) -> bool:
    return all(set(cell.strip()) <= set(":-") for cell in row)


def _clip_code(code: str) -> tuple[str, bool]:
    lines = code.split("\n")
    kept = [line if len(line) <= CODE_LINE_CHARS else line[:CODE_LINE_CHARS] + "…" for line in lines[:CODE_LINES]]
    return "\n".join(kept), len(lines) > CODE_LINES or kept != lines[: len(kept)]


def _window(text: str, pattern: re.Pattern[str] | None, size: int) -> tuple[int, int]:
    """About `size` characters of `text` around its first match, cut at spaces."""
    first = pattern.search(text) if pattern else None
    start = 0
    if first is not None and first.start() > size // 3:
        start = text.rfind(" ", 0, first.start() - size // 3) + 1
    end = min(len(text), start + size)
    if end < len(text):
        space = text.rfind(" ", start + size // 2, end)
        end = space if space > 0 else end
    return start, end


def snippet(text: str, query: str, size: int = SNIPPET_CHARS) -> Markup:
    """About `size` characters of the chunk from its first piece that matches, terms marked, all else escaped."""
    pattern = _pattern(query_terms(query))
    readable = pieces(text)
    first = next((i for i, p in enumerate(readable) if pattern and pattern.search(p.text)), 0)
    # Text left out before it is marked with "…"; a code block shows as a block of its own anyway.
    shown: list[Markup] = [Markup("… ")] if first > 0 and readable and not readable[first].code else []
    budget, after_text = size, False
    for index, piece in enumerate(readable[first:]):
        if budget <= 0:
            shown.append(Markup(" …"))
            break
        if piece.code:  # a block of its own (CSS), its lines kept
            code, clipped = _clip_code(piece.text)
            shown.append(Markup('<code class="snippet-code">{}</code>').format(mark(code + "\n…" * clipped, pattern)))
            budget, after_text = budget - len(code), False
            continue
        start, end = _window(piece.text, pattern if index == 0 else None, budget)
        cut = end < len(piece.text)
        prefix = Markup("… ") if start > 0 else Markup("")
        shown.append(Markup(" ") * after_text + prefix + _prose(piece.text[start:end], pattern) + Markup(" …") * cut)
        budget, after_text = budget - (end - start), True
        if cut:
            break
    return Markup("").join(shown)


def _prose(text: str, pattern: re.Pattern[str] | None) -> Markup:
    """Marked text whose inline code spans show as code, without their backticks."""
    pieces: list[Markup] = []
    position = 0
    for span in CODE_SPAN.finditer(text):
        pieces.append(mark(text[position : span.start()], pattern))
        inner = span.group(0)[len(span.group(1)) : -len(span.group(1))].strip()
        pieces.append(Markup("<code>{}</code>").format(mark(inner, pattern)))
        position = span.end()
    pieces.append(mark(text[position:], pattern))
    return Markup("").join(pieces)


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
