"""One linear pass over a markdown body: its headings and where a window may cut it, with queries over them."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

# Heading text is clipped: it is stored in every chunk's payload and repeated in embed_text.
MAX_HEADING_CHARS = 120

_ORDERED_ITEM = re.compile(r"\d{1,9}[.)](?:[ \t]|$)")


@dataclass(frozen=True, slots=True)
class Heading:
    start: int  # offset of the heading's first line
    end: int  # offset just past its last line (the underline, for setext)
    level: int
    text: str


@dataclass(slots=True)
class Outline:
    """What one linear pass over the body finds outside code fences."""

    headings: list[Heading]
    heading_starts: list[int]
    block_starts: list[int]  # lines after a blank line, and fence openings: clean window cuts
    line_starts: list[int]  # every line start: fallback window cuts


def scan(body: str) -> Outline:
    """Find headings (ATX and setext) and cut points outside fenced code, in one linear pass.

    Only top-level blocks are modelled: a heading nested in a list item or block quote is not a
    section heading of the document.
    """
    headings: list[Heading] = []
    block_starts: list[int] = []
    line_starts: list[int] = []
    fence_char = ""
    fence_len = 0
    para_start = -1  # first line of the open paragraph, -1 when there is none
    para_text = ""
    lazy = False  # after a list item or quote line, until a blank line: lazy continuation text
    prev_blank = True
    pos, n = 0, len(body)
    while pos < n:
        nl = body.find("\n", pos)
        end = n if nl < 0 else nl + 1
        line = body[pos : n if nl < 0 else nl]
        stripped = line.lstrip(" ")
        indent = 4 if stripped.startswith("\t") else len(line) - len(stripped)

        if fence_char:
            if indent <= 3 and stripped.startswith(fence_char * fence_len):
                run = len(stripped) - len(stripped.lstrip(fence_char))
                if run >= fence_len and not stripped[run:].strip(" \t"):
                    fence_char = ""
            pos = end
            continue

        line_starts.append(pos)
        if prev_blank:
            block_starts.append(pos)
        if not stripped.strip(" \t"):
            para_start, lazy, prev_blank = -1, False, True
            pos = end
            continue
        prev_blank = False

        if indent >= 4:
            if para_start >= 0 and len(para_text) < MAX_HEADING_CHARS:
                para_text += " " + stripped.strip()
        elif stripped.startswith(("```", "~~~")):
            char = stripped[0]
            run = len(stripped) - len(stripped.lstrip(char))
            if run >= 3 and (char == "~" or "`" not in stripped[run:]):
                fence_char, fence_len, para_start = char, run, -1
                if not block_starts or block_starts[-1] != pos:
                    block_starts.append(pos)
            else:
                para_start, para_text = _paragraph_line(para_start, para_text, lazy, pos, stripped)
        elif (
            stripped.startswith("#")
            and (level := len(stripped) - len(stripped.lstrip("#"))) <= 6
            and (len(stripped) == level or stripped[level] in " \t")
        ):
            headings.append(Heading(pos, end, level, _atx_text(stripped[level:])))
            para_start, lazy = -1, False
        elif para_start >= 0 and _is_setext_underline(stripped):
            level = 1 if stripped[0] == "=" else 2
            headings.append(Heading(para_start, end, level, _clip(para_text)))
            line_starts.pop()  # cutting between a setext text and its underline would break it
            para_start = -1
        elif _starts_container(stripped):
            para_start, lazy = -1, True
        else:
            para_start, para_text = _paragraph_line(para_start, para_text, lazy, pos, stripped)
        pos = end

    return Outline(headings, [h.start for h in headings], block_starts, line_starts)


def _paragraph_line(para_start: int, para_text: str, lazy: bool, pos: int, stripped: str) -> tuple[int, str]:
    if para_start < 0:
        return (-1, "") if lazy else (pos, stripped.strip())
    if len(para_text) < MAX_HEADING_CHARS:
        para_text += " " + stripped.strip()
    return para_start, para_text


def _is_setext_underline(stripped: str) -> bool:
    underline = stripped.rstrip(" \t")
    return bool(underline) and underline[0] in "=-" and underline.count(underline[0]) == len(underline)


def _starts_container(stripped: str) -> bool:
    """A list item, block quote or thematic break: none can be a setext heading's text."""
    first = stripped[0]
    if first == ">":
        return True
    if first in "-+*" and (len(stripped) == 1 or stripped[1] in " \t"):
        return True
    if first in "*_-" and stripped.count(first) >= 3 and not stripped.replace(first, "").strip(" \t"):
        return True
    return first.isdigit() and _ORDERED_ITEM.match(stripped) is not None


def _atx_text(rest: str) -> str:
    text = rest.strip(" \t")
    if text.endswith("#"):
        bare = text.rstrip("#")
        if not bare:
            text = ""
        elif bare[-1] in " \t":
            text = bare.rstrip(" \t")
    return _clip(text)


def _clip(text: str) -> str:
    text = " ".join(text[: MAX_HEADING_CHARS * 4].split())
    return text if len(text) <= MAX_HEADING_CHARS else text[: MAX_HEADING_CHARS - 1].rstrip() + "…"


def window_end(pos: int, n: int, outline: Outline, size: int) -> int:
    """End of the window of at most `size` chars that starts at `pos`, at the cleanest cut.

    A code fence of up to `size // 2` chars is never cut: no cut point lies inside a fence.
    """
    hard = pos + size
    if hard >= n:
        return n
    floor = pos + size // 2
    return (
        _last_between(outline.heading_starts, floor, hard)
        or _last_between(outline.block_starts, floor, hard)
        or _last_between(outline.line_starts, floor, hard)
        or hard
    )


def clean_start(body: str, outline: Outline, offset: int) -> bool:
    """Whether only indentation precedes `offset` on its line, and that line is outside code fences."""
    # Only indentation may precede it, so looking back a little is enough (and stays cheap on
    # a 1 MiB line).
    line_start = body.rfind("\n", max(0, offset - 256), offset) + 1
    if line_start == 0 and offset > 256:
        return False
    i = bisect.bisect_left(outline.line_starts, line_start)
    on_line = i < len(outline.line_starts) and outline.line_starts[i] == line_start
    return on_line and not body[line_start:offset].strip()


def _last_between(sorted_offsets: list[int], floor: int, ceiling: int) -> int | None:
    i = bisect.bisect_right(sorted_offsets, ceiling) - 1
    return sorted_offsets[i] if i >= 0 and sorted_offsets[i] > floor else None


def heading_stacks(starts: list[int], headings: list[Heading]) -> list[tuple[Heading, ...]]:
    """The open headings at each chunk start; a heading at the very start of a chunk counts."""
    stacks: list[tuple[Heading, ...]] = []
    stack: list[Heading] = []
    i = 0
    for start in starts:
        while i < len(headings) and headings[i].start <= start:
            heading = headings[i]
            while stack and stack[-1].level >= heading.level:
                stack.pop()
            stack.append(heading)
            i += 1
        stacks.append(tuple(stack))
    return stacks


def headings_between(outline: Outline, start: int, end: int) -> list[Heading]:
    lo = bisect.bisect_left(outline.heading_starts, start)
    hi = bisect.bisect_left(outline.heading_starts, end)
    return outline.headings[lo:hi]


def only_headings(body: str, start: int, end: int, outline: Outline) -> bool:
    inside = headings_between(outline, start, end)
    if not inside:
        return False
    cursor = start
    for heading in inside:
        if body[cursor : heading.start].strip():
            return False
        cursor = max(cursor, heading.end)
    return not body[cursor:end].strip()
