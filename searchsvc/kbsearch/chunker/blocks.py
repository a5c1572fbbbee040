"""The top-level blocks of a markdown body (CommonMark + GFM tables, by markdown-it-py), as offsets.

Only block structure is parsed (no inline pass), so the cost stays linear in the input. A block
is what the chunker must not cut lightly: a paragraph, a code fence with its language, a list with
its item starts, a table with its row starts, a block quote, raw HTML, a heading. A list also
carries its items (text, depth, first code block), which extractive answers read through mdblocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["Block", "BlockKind", "ListItem", "join_lines", "parse_blocks"]

BlockKind = Literal["heading", "paragraph", "code", "list", "table", "quote", "html", "comment", "admonition", "rule"]

# Deeper nesting is flattened into text by the parser: it bounds the work on hostile input.
MAX_NESTING = 20
# mkdocs-material and Python-Markdown admonitions: `!!! note "Title"` (or `???` collapsible),
# then indented content, which CommonMark would read as an indented code block. Matched at a
# block's offset (re's match anchors there), without copying the rest of the body.
_ADMONITION = re.compile(r"(?:!!!|\?\?\?\+?)[ \t]+\w")
_LIST_MARKER = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")


@dataclass(frozen=True, slots=True)
class ListItem:
    text: str  # the item's own paragraphs (inline markdown), lines joined by spaces; not its nested items
    ordered: bool
    depth: int  # 0 for an item of the top-level list
    code: str | None = None  # the first code block of the item, as fenced markdown, dedented


@dataclass(slots=True)
class Block:
    kind: BlockKind
    start: int  # character offsets into the body, [start, end), whole lines without the final newline
    end: int
    level: int = 0  # heading level
    lang: str = ""  # code fence info's first word
    text: str = ""  # heading text (mdblocks fills it for every kind it returns)
    fence: str = ""  # the opening fence run (``` or ~~~~) of a fenced code block
    parts: list[int] = field(default_factory=list)  # list items / table rows: offsets where a part starts
    items: tuple[ListItem, ...] = ()  # a list's items, nested ones with their depth, in order


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable("table")
    md.core.ruler.disable(["inline", "text_join"])
    return md


_MD: MarkdownIt | None = None


def parse_blocks(body: str) -> list[Block]:
    """The body's top-level blocks in order; blank lines belong to none."""
    global _MD
    if _MD is None:
        _MD = _parser()
    line_starts = [0]
    pos = body.find("\n")
    while pos >= 0:
        line_starts.append(pos + 1)
        pos = body.find("\n", pos + 1)
    line_starts.append(len(body) + 1)  # a virtual line after the last one

    def span(first: int, last: int) -> tuple[int, int]:
        start = line_starts[min(first, len(line_starts) - 1)]
        end = line_starts[min(last, len(line_starts) - 1)] - 1
        return start, max(start, min(end, len(body)))

    tokens = _MD.parse(body)
    blocks: list[Block] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.level != 0 or token.map is None or token.nesting == -1:
            i += 1
            continue
        start, end = span(*token.map)
        close = _closing(tokens, i)
        if token.type == "heading_open":
            inline = tokens[i + 1].content if i + 1 < len(tokens) else ""
            blocks.append(Block("heading", start, end, level=int(token.tag[1:]), text=inline))
        elif token.type == "paragraph_open":
            blocks.append(Block("paragraph", start, end))
        elif token.type == "fence":
            lang = token.info.strip().split(" ")[0] if token.info.strip() else ""
            blocks.append(Block("code", start, end, lang=lang, fence=token.markup))
        elif token.type == "code_block":
            previous = blocks[-1] if blocks else None
            if previous is not None and previous.kind == "paragraph" and _ADMONITION.match(body, previous.start):
                previous.kind, previous.end = "admonition", end
            else:
                blocks.append(Block("code", start, end))
        elif token.type in ("bullet_list_open", "ordered_list_open"):
            starts = [span(*t.map)[0] for t in tokens[i:close] if t.type == "list_item_open" and t.level == 1 and t.map]
            blocks.append(Block("list", start, end, parts=starts, items=_list_items(tokens, i, close, body, span)))
        elif token.type == "table_open":
            rows = [span(*t.map)[0] for t in tokens[i:close] if t.type == "tr_open" and t.map]
            blocks.append(Block("table", start, end, parts=rows))
        elif token.type == "blockquote_open":
            blocks.append(Block("quote", start, end))
        elif token.type == "html_block":
            kind: BlockKind = "comment" if token.content.lstrip().startswith("<!--") else "html"
            blocks.append(Block(kind, start, end))
        elif token.type == "hr":
            blocks.append(Block("rule", start, end))
        else:
            blocks.append(Block("paragraph", start, end))
        i = close + 1
    # A paragraph that is an admonition's opener without indented content is still an admonition.
    for block in blocks:
        if block.kind == "paragraph" and _ADMONITION.match(body, block.start, block.end):
            block.kind = "admonition"
    for block in blocks:  # a list's last line may be the blank line that closes it
        while block.end > block.start and body[block.end - 1] in " \t\n":
            block.end -= 1
    return [b for b in blocks if b.end > b.start or b.kind == "heading"]


@dataclass(slots=True)
class _OpenItem:
    index: int  # its place in the list's items
    level: int  # the list_item_open token's nesting level
    lines: tuple[int, int] | None
    text: list[str] = field(default_factory=list)
    code: str | None = None
    parsed: bool = False  # whether the parser gave it any content (it does not past its nesting limit)


def _list_items(
    tokens: list[Token], first: int, close: int, body: str, span: Callable[[int, int], tuple[int, int]]
) -> tuple[ListItem, ...]:
    """The items of the list tokens[first..close], in order: each with its own text, depth and first fence.

    One pass over the list's tokens. An item past the parser's nesting limit has no tokens inside:
    its lines are its text, flattened, so nothing of a hostile list is lost.
    """
    items: list[ListItem] = []
    ordered: list[bool] = []  # per open list: whether it is ordered
    stack: list[_OpenItem] = []
    for token in tokens[first : close + 1]:
        if token.type in ("bullet_list_open", "ordered_list_open"):
            ordered.append(token.type == "ordered_list_open")
        elif token.type in ("bullet_list_close", "ordered_list_close"):
            ordered.pop()
        elif token.type == "list_item_open":
            stack.append(_OpenItem(len(items), token.level, (token.map[0], token.map[1]) if token.map else None))
            items.append(ListItem("", ordered[-1], len(ordered) - 1))  # its place, filled at its close
        elif token.type == "list_item_close":
            item = stack.pop()
            if not item.parsed and item.lines is not None:  # past the nesting limit
                start, end = span(*item.lines)
                item.text.append(_LIST_MARKER.sub("", join_lines(body[start:end]), count=1))
            items[item.index] = ListItem(
                " ".join(item.text), items[item.index].ordered, items[item.index].depth, item.code
            )
        if stack and token.level == stack[-1].level + 1:
            stack[-1].parsed = True
        if stack and token.type == "inline" and token.level == stack[-1].level + 2:
            stack[-1].text.append(join_lines(token.content))
        elif stack and token.type in ("fence", "code_block") and token.level == stack[-1].level + 1:
            stack[-1].code = stack[-1].code or _fenced(token)
    return tuple(items)


def _fenced(token: Token) -> str:
    """A code token as fenced markdown: an indented block is given fences, so it shows as code."""
    fence = token.markup or "```"
    return f"{fence}{token.info}\n{token.content}{fence}"


def join_lines(lines: str) -> str:
    """Non-blank lines, stripped and joined by spaces: a paragraph as one line."""
    return " ".join(line.strip() for line in lines.split("\n") if line.strip())


def _closing(tokens: list[Token], i: int) -> int:
    """Index of the token that closes tokens[i] (itself for a self-contained token)."""
    if tokens[i].nesting != 1:
        return i
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1
