"""The blocks of a markdown chunk, in order: prose paragraphs, lists, fenced code, tables and headings.

Line-based, for the chunks the chunker makes (a few hundred to a few thousand characters): enough
structure for an extractive answer to keep a code block with the sentence that introduces it and a
list item with its list. Blockquote markers and mkdocs admonition lines are dropped (their content
is parsed like any other text); HTML lines, HTML comments and shortcodes are left out. `plain`
drops inline markdown syntax from prose and keeps inline code as written (chunker/inline.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from kbsearch.chunker.inline import COMMENT, SHORTCODE, plain

__all__ = ["Block", "ListItem", "markdown_blocks", "plain"]

BlockKind = Literal["prose", "list", "code", "table", "heading"]

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,3}[.)])\s+(.*)$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_RULE = re.compile(r"^\s*([-*_=])(\s*\1){2,}\s*$")
_ADMONITION = re.compile(r"^\s*(!!!|\?\?\?\+?)\s")
_QUOTE = re.compile(r"^\s*(>\s?)+")
_HTML_LINE = re.compile(r"^\s*</?[A-Za-z!][^>]*>\s*$")
_ALERT = re.compile(r"^\s*\[!(NOTE|TIP|IMPORTANT|WARNING|CAUTION|INFO|DANGER)\]\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ListItem:
    text: str  # the item's inline markdown, continuation lines joined
    ordered: bool
    depth: int  # 0 for a top-level item
    code: str | None = None  # a fenced block inside the item, dedented


@dataclass(frozen=True, slots=True)
class Block:
    kind: BlockKind
    text: str  # prose: the paragraph's inline markdown; heading: its text; list, code, table: the markdown
    items: tuple[ListItem, ...] = field(default=())


def markdown_blocks(markdown: str) -> list[Block]:
    """The blocks of `markdown`, in document order."""
    lines = _clean_lines(markdown)
    blocks: list[Block] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append(Block("prose", " ".join(paragraph)))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or _RULE.match(line):
            flush()
            i += 1
            continue
        if _FENCE.match(line):
            flush()
            code, i = _fenced(lines, i)
            blocks.append(Block("code", code))
            continue
        heading = _HEADING.match(stripped)
        if heading:
            flush()
            blocks.append(Block("heading", heading.group(1)))
            i += 1
            continue
        if _is_table_start(lines, i):
            flush()
            start = i
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                i += 1
            blocks.append(Block("table", "\n".join(s.strip() for s in lines[start:i])))
            continue
        item = _LIST_ITEM.match(line)
        if item and not (paragraph and item.group(1)):  # an indented marker inside a paragraph is its text
            flush()
            block, i = _list(lines, i)
            blocks.append(block)
            continue
        if _HTML_LINE.match(line):
            flush()
            i += 1
            continue
        paragraph.append(stripped)
        i += 1
    flush()
    return blocks


def _clean_lines(markdown: str) -> list[str]:
    text = COMMENT.sub("", markdown.replace("\r\n", "\n"))
    lines = []
    for line in text.split("\n"):
        if _ADMONITION.match(line):
            lines.append("")  # `!!! note "Title"`: the marker, not content
            continue
        quote = _QUOTE.match(line)
        if quote and not line.lstrip().startswith(">="):
            line = _ALERT.sub("", line[quote.end() :])  # `> [!WARNING]`: GitHub's admonition marker
        lines.append(SHORTCODE.sub("", line))
    return _without_cut_code(lines)


def _without_cut_code(lines: list[str]) -> list[str]:
    """Lines without the tail of a code block the chunk begins inside of (its fence is in the chunk before).

    Told by an odd number of fences whose first is a bare closing one after text: that text is code.
    """
    fences = [i for i, line in enumerate(lines) if _FENCE.match(line)]
    if not fences or len(fences) % 2 == 0:
        return lines
    first = _FENCE.match(lines[fences[0]])
    if first is not None and not first.group(3).strip() and any(line.strip() for line in lines[: fences[0]]):
        return lines[fences[0] + 1 :]
    return lines


def _fenced(lines: list[str], i: int) -> tuple[str, int]:
    """The fenced block opening at line i (verbatim, dedented by its fence's indent) and the line after it."""
    opening = _FENCE.match(lines[i])
    assert opening is not None
    indent, fence = len(opening.group(1)), opening.group(2)
    body = [lines[i][indent:]]
    i += 1
    while i < len(lines):
        line = lines[i]
        body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
        i += 1
        closing = _FENCE.match(line)
        if closing and closing.group(2).startswith(fence[0] * len(fence)) and not closing.group(3).strip():
            return "\n".join(body), i
    body.append(fence)  # unterminated: closed here, so the answer stays well-formed
    return "\n".join(body), i


def _is_table_start(lines: list[str], i: int) -> bool:
    line = lines[i].strip()
    if line.startswith("|") and line.count("|") >= 2:
        return True
    return "|" in line and i + 1 < len(lines) and bool(_TABLE_SEPARATOR.match(lines[i + 1]))


def _list(lines: list[str], i: int) -> tuple[Block, int]:
    """The list starting at line i: its items (nested ones with their depth) and the line after it."""
    items: list[ListItem] = []
    raw: list[str] = []
    indents: list[int] = []  # the marker indentation of each open nesting level
    current: dict[str, object] | None = None

    def close() -> None:
        if current is not None:
            items.append(
                ListItem(
                    text=" ".join(current["text"]),  # type: ignore[arg-type]
                    ordered=bool(current["ordered"]),
                    depth=int(current["depth"]),  # type: ignore[call-overload]
                    code=current["code"],  # type: ignore[arg-type]
                )
            )

    while i < len(lines):
        line = lines[i]
        marker = _LIST_ITEM.match(line)
        if marker:
            close()
            indent = len(marker.group(1))
            while indents and indent < indents[-1]:
                indents.pop()
            if not indents or indent > indents[-1] + 1:
                indents.append(indent)
            current = {
                "text": [marker.group(3).strip()],
                "ordered": marker.group(2)[0].isdigit(),
                "depth": len(indents) - 1,
                "code": None,
            }
            raw.append(line)
            i += 1
            continue
        if not line.strip():
            following = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
            if following is None or not (_LIST_ITEM.match(lines[following]) or lines[following].startswith("  ")):
                break
            raw.append(line)
            i += 1
            continue
        if _FENCE.match(line):
            if not line.startswith(" ") or current is None:
                break  # a fence at the margin ends the list
            code, end = _fenced(lines, i)
            if current["code"] is None:
                current["code"] = code
            raw.extend(lines[i:end])
            i = end
            continue
        if (
            _HEADING.match(line.strip())
            or _is_table_start(lines, i)
            or _HTML_LINE.match(line)
            or (not line.startswith(" ") and raw and not raw[-1].strip())
        ):
            break  # a heading, a table, or an unindented line after a blank one: the list is over
        assert current is not None
        current["text"].append(line.strip())  # type: ignore[attr-defined]
        raw.append(line)
        i += 1
    close()
    while raw and not raw[-1].strip():
        raw.pop()
    return Block("list", "\n".join(raw), tuple(items)), i
