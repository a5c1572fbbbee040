"""Markdown chunking: front matter, heading paths, splitter-sized chunks and their embedding text."""

from __future__ import annotations

import bisect
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import yaml
from semantic_text_splitter import MarkdownSplitter

from kbsearch.models import Chunk, ParsedDocument

# Bump when anything below changes chunk boundaries, heading paths or embed_text.
ALGORITHM_VERSION = 1

# Front matter larger than this is not parsed (it is kept as body text): real front matter is a
# few lines, and the cap bounds YAML/TOML parse time on hostile input.
MAX_FRONT_MATTER_CHARS = 64 * 1024
# Heading text is clipped: it is stored in every chunk's payload and repeated in embed_text.
MAX_HEADING_CHARS = 120
# Context lines stay short: every token they take is one the chunk text loses in MiniLM's 256.
MAX_CONTEXT_CHARS = 120
MAX_TAGS_CHARS = 80
# The splitter's cost grows with the square of its input (a 1 MiB line takes 5-16 s), so it is fed
# windows of this many max-size chunks, cut at headings or paragraph starts where possible.
WINDOW_CHUNKS = 20

_YAML_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)
_TOML_CLOSE = re.compile(r"^\+\+\+[ \t]*$", re.MULTILINE)
_ORDERED_ITEM = re.compile(r"\d{1,9}[.)](?:[ \t]|$)")


@dataclass(frozen=True, slots=True)
class _Heading:
    start: int  # offset of the heading's first line
    end: int  # offset just past its last line (the underline, for setext)
    level: int
    text: str


@dataclass(slots=True)
class _Outline:
    """What one linear pass over the body finds outside code fences."""

    headings: list[_Heading]
    heading_starts: list[int]
    block_starts: list[int]  # lines after a blank line, and fence openings: clean window cuts
    line_starts: list[int]  # every line start: fallback window cuts


class MarkdownChunker:
    """Cuts markdown into chunks of `min_chars`..`max_chars` characters, sharing up to `overlap`."""

    def __init__(self, min_chars: int = 500, max_chars: int = 800, overlap: int = 0):
        if not 1 <= min_chars <= max_chars:
            raise ValueError(f"need 1 <= min_chars ({min_chars}) <= max_chars ({max_chars})")
        if not 0 <= overlap < min_chars:
            raise ValueError(f"need 0 <= overlap ({overlap}) < min_chars ({min_chars})")
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.overlap = overlap
        self._splitter = MarkdownSplitter((min_chars, max_chars), overlap=overlap, trim=True)
        self._window = max(16_384, WINDOW_CHUNKS * max_chars)
        # The splitter's version is included: an upgrade may move boundaries, and re-chunking is
        # cheap because unchanged chunk texts keep their vectors.
        self.fingerprint = (
            f"markdown-v{ALGORITHM_VERSION};min={min_chars};max={max_chars};overlap={overlap};"
            f"splitter={version('semantic-text-splitter')}"
        )

    def chunk(self, content: str) -> ParsedDocument:
        text = _normalise(content)
        meta, body = _split_front_matter(text)
        outline = _scan(body)
        title = _title(meta) or next((h.text for h in outline.headings if h.level == 1 and h.text), None)
        tags = _tags(meta)

        pieces = list(self._split(body, outline))
        stacks = _heading_stacks([start for start, _ in pieces], outline.headings)
        chunks: list[Chunk] = []
        for i, (start, piece) in enumerate(pieces):
            end = start + len(piece)
            # A heading-only piece whose headings all reappear in the next chunk's path adds
            # nothing: those headings travel on as context. Otherwise the heading is kept.
            if i + 1 < len(pieces) and _only_headings(body, start, end, outline):
                inside = _headings_between(outline, start, end)
                if all(h in stacks[i + 1] for h in inside):
                    continue
            headings = [h.text for h in stacks[i] if h.text]
            chunks.append(
                Chunk(
                    index=len(chunks),
                    text=piece,
                    embed_text=_embed_text(title, headings, tags, piece),
                    headings=headings,
                    start=start,
                    end=end,
                )
            )
        return ParsedDocument(title=title, tags=tags, body=body, chunks=chunks)

    def _split(self, body: str, outline: _Outline) -> Iterator[tuple[int, str]]:
        """(offset, stripped text) of each piece, splitting the body one bounded window at a time."""
        pos, n = 0, len(body)
        while pos < n:
            hi = _window_end(pos, n, outline, self._window)
            pieces = self._splitter.chunk_indices(body[pos:hi])
            next_pos = hi
            if hi < n and len(pieces) > 1 and _clean_start(body, outline, pos + pieces[-1][0]):
                # The last piece of a window was cut short by the window, not by the markdown:
                # split it again with what follows (unless it starts inside a fence, where a
                # window must not begin).
                next_pos = pos + pieces[-1][0]
                pieces = pieces[:-1]
            for offset, piece in pieces:
                # The splitter's trim keeps some leading indentation; chunks are fully stripped.
                text = piece.strip()
                if text:
                    yield pos + offset + (len(piece) - len(piece.lstrip())), text
            pos = next_pos


def _normalise(content: str) -> str:
    # Lone surrogates (legal in JSON strings, illegal in UTF-8) would make the Rust splitter raise.
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        content = content.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if "\r" in content:
        content = content.replace("\r\n", "\n").replace("\r", "\n")
    return content.removeprefix("\ufeff")


def _split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Front matter as a mapping, and the body after it.

    Front matter that does not parse, or is not a mapping, stays in the body: a leading `---` is
    also legal markdown (a thematic break, or a setext underline below it), and its text must
    remain searchable rather than vanish silently.
    """
    first = text.find("\n")
    if first < 0:
        return {}, text
    opener = text[:first].rstrip(" \t")
    if opener == "---":
        closer, parse = _YAML_CLOSE, _parse_yaml
    elif opener == "+++":
        closer, parse = _TOML_CLOSE, tomllib.loads
    else:
        return {}, text
    match = closer.search(text, first + 1, first + 1 + MAX_FRONT_MATTER_CHARS + 8)
    # The search window may end mid-line: a closer must be a whole line.
    if match is None or (match.end() < len(text) and text[match.end()] != "\n"):
        return {}, text
    raw = text[first + 1 : match.start()]
    try:
        data = parse(raw)
    except Exception:  # any parser failure (syntax, recursion, bad types) means "not front matter"
        return {}, text
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return {}, text
    body_start = match.end() + 1 if match.end() < len(text) else match.end()
    return data, text[body_start:]


def _parse_yaml(raw: str) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(raw, Loader=loader)  # noqa: S506 - a safe loader, the C one when available


def _title(meta: dict[str, Any]) -> str | None:
    title = meta.get("title")
    if isinstance(title, str) and title.strip():
        return " ".join(title.split())
    return None


def _tags(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("tags")
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list):
        items = [item for item in raw if isinstance(item, str)]
    else:
        return []
    return list(dict.fromkeys(tag.strip() for tag in items if tag.strip()))


def _scan(body: str) -> _Outline:
    """Find headings (ATX and setext) and cut points outside fenced code, in one linear pass.

    Only top-level blocks are modelled: a heading nested in a list item or block quote is not a
    section heading of the document.
    """
    headings: list[_Heading] = []
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
        elif stripped.startswith("#") and (level := len(stripped) - len(stripped.lstrip("#"))) <= 6 and (
            len(stripped) == level or stripped[level] in " \t"
        ):
            headings.append(_Heading(pos, end, level, _atx_text(stripped[level:])))
            para_start, lazy = -1, False
        elif para_start >= 0 and _is_setext_underline(stripped):
            level = 1 if stripped[0] == "=" else 2
            headings.append(_Heading(para_start, end, level, _clip(para_text)))
            line_starts.pop()  # cutting between a setext text and its underline would break it
            para_start = -1
        elif _starts_container(stripped):
            para_start, lazy = -1, True
        else:
            para_start, para_text = _paragraph_line(para_start, para_text, lazy, pos, stripped)
        pos = end

    return _Outline(headings, [h.start for h in headings], block_starts, line_starts)


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


def _window_end(pos: int, n: int, outline: _Outline, size: int) -> int:
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


def _clean_start(body: str, outline: _Outline, offset: int) -> bool:
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


def _heading_stacks(starts: list[int], headings: list[_Heading]) -> list[tuple[_Heading, ...]]:
    """The open headings at each chunk start; a heading at the very start of a chunk counts."""
    stacks: list[tuple[_Heading, ...]] = []
    stack: list[_Heading] = []
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


def _headings_between(outline: _Outline, start: int, end: int) -> list[_Heading]:
    lo = bisect.bisect_left(outline.heading_starts, start)
    hi = bisect.bisect_left(outline.heading_starts, end)
    return outline.headings[lo:hi]


def _only_headings(body: str, start: int, end: int, outline: _Outline) -> bool:
    inside = _headings_between(outline, start, end)
    if not inside:
        return False
    cursor = start
    for heading in inside:
        if body[cursor : heading.start].strip():
            return False
        cursor = max(cursor, heading.end)
    return not body[cursor:end].strip()


def _embed_text(title: str | None, headings: list[str], tags: list[str], text: str) -> str:
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
