"""The blocks of a markdown chunk as an answer reads them: a view over `parse_blocks` (markdown-it-py).

Extractive answers keep a code block with the sentence that introduces it and a list item with its
list. So every block carries its content in `text`: a paragraph's inline markdown (lines joined), a
heading's text, a code block's markdown (fences included, dedented; one the chunk cuts off is
closed), a table's rows, a list's markdown with its `items`. Block quotes, admonitions and indented
blocks outside lists give their content's blocks; HTML, comments, rules and shortcodes are left
out. `plain` (chunker/inline.py) turns inline markdown into text.

Bounds: comments and shortcodes are removed by the bounded patterns of chunker/inline.py, the parse
is markdown-it's block pass (linear, nesting capped), and a quote, admonition or indented block is
read again without its markers or indentation at most MAX_DEPTH deep: at most MAX_DEPTH + 1 passes
over any character.
"""

from __future__ import annotations

import re
from dataclasses import replace

from kbsearch.chunker.blocks import Block, ListItem, join_lines, parse_blocks
from kbsearch.chunker.inline import COMMENT, SHORTCODE, plain

__all__ = ["Block", "ListItem", "markdown_blocks", "plain"]

MAX_DEPTH = 8  # quotes, admonitions and indented blocks inside each other; deeper ones are read as their text
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_QUOTE_MARKER = re.compile(r"[ \t]{0,3}>[ \t]?")
_ALERT = re.compile(r"\[!(?:NOTE|TIP|IMPORTANT|WARNING|CAUTION|INFO|DANGER)\][ \t]*", re.IGNORECASE)


def markdown_blocks(markdown: str) -> list[Block]:
    """The blocks of `markdown` an answer can use, in document order, each with its content in `text`.

    Kinds: paragraph, heading, code, list, table. Offsets are into the text parsed, which has
    comments and shortcodes taken out, so they locate a block only roughly in `markdown`.
    """
    # markdown-it ends a line at a lone CR too: normalised, so its line numbers are the text's lines.
    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    text = SHORTCODE.sub("", COMMENT.sub("", text))
    return _read(_without_cut_code(text), 0)


def _read(text: str, depth: int) -> list[Block]:
    found: list[Block] = []
    for block in parse_blocks(text):
        source = text[block.start : block.end]
        if block.kind in ("quote", "admonition") or (block.kind == "code" and not block.fence):
            inner = _unquoted(source) if block.kind == "quote" else _dedented(source, block.kind == "admonition")
            if depth < MAX_DEPTH:
                found.extend(_read(inner, depth + 1))
            elif inner.strip():
                found.append(replace(block, kind="paragraph", text=join_lines(inner)))
        elif block.kind == "paragraph" and not _rows(source):
            found.append(replace(block, text=join_lines(source)))
        elif block.kind == "code":
            found.append(replace(block, text=_code(source, block.fence)))
        elif block.kind in ("table", "paragraph"):  # a paragraph of rows: a table the chunk cut its header off
            found.append(replace(block, kind="table", text="\n".join(line.strip() for line in source.split("\n"))))
        elif block.kind == "heading":  # its text is already the heading's
            found.append(block)
        elif block.kind == "list":  # its markdown, beside the items the parser gave it
            found.append(replace(block, text=source))
    return found


def _rows(source: str) -> bool:
    return all(line.lstrip().startswith("|") and line.count("|") >= 2 for line in source.split("\n"))


def _code(source: str, fence: str) -> str:
    """A fenced code block as markdown, dedented by its fence's indent; an unterminated one is closed."""
    lines = source.split("\n")
    indent = len(lines[0]) - len(lines[0].lstrip())
    body = [line[indent:] if line[:indent].isspace() or not indent else line.lstrip() for line in lines]
    closing = _FENCE.fullmatch(lines[-1]) if len(lines) > 1 else None
    if closing is None or not closing.group(1).startswith(fence) or closing.group(2).strip():
        body.append(fence)  # the chunk ends inside the code: closed here, so the answer stays well-formed
    return "\n".join(body)


def _unquoted(source: str) -> str:
    """A block quote's content: one level of `>` markers off each line, GitHub's `[!NOTE]` marker off its first."""
    lines = [line[m.end() :] if (m := _QUOTE_MARKER.match(line)) else line for line in source.split("\n")]
    lines[0] = _ALERT.sub("", lines[0], count=1)
    return "\n".join(lines)


def _dedented(source: str, admonition: bool) -> str:
    """Indented content out of its indentation: an admonition's (after its `!!! note "Title"` opener), or
    an indented block's. In the docs this reads, an indented block at the top of a chunk is the content
    of a list item or admonition the chunk was cut from, rarely code (code is fenced).
    """
    lines = source.split("\n")[1:] if admonition else source.split("\n")
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def _without_cut_code(text: str) -> str:
    """The text without the tail of a code block the chunk begins inside of (its fence is in the chunk before).

    Told by an odd number of fences whose first is a bare closing one after text: that text is code.
    """
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if _FENCE.fullmatch(line)]
    if not fences or len(fences) % 2 == 0:
        return text
    first = _FENCE.fullmatch(lines[fences[0]])
    if first is not None and not first.group(2).strip() and any(line.strip() for line in lines[: fences[0]]):
        return "\n".join(lines[fences[0] + 1 :])
    return text
