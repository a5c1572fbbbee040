"""The chunker: normalised text, front matter, then markdown blocks packed into chunks that keep their meaning.

A body is parsed into its top-level blocks (blocks.py). Blocks that mean something only together
become one unit: a heading with what follows it, a sentence with the code block, list or table it
introduces. Units are packed into chunks of at most `max_chars`, cutting at section starts; a unit
larger than that is split at its own boundaries (code at lines, each part re-opened with its fence;
tables at rows, each part repeating the header; lists at items), and a part that is not the first
carries the lead-in sentence and heading path in its embedded text. No chunk is shorter than
`floor_chars` unless its whole section is: a fragment joins its neighbour.

Bounds on untrusted input (issue 27), for a body of n characters and a chunker of max_chars M:
- Work is O(n) for a given M: markdown-it parses blocks in one pass with nesting capped at
  blocks.MAX_NESTING; front matter is at most 64 KiB and its YAML is measured before it is built;
  the prose splitter, superlinear on a long run of text, sees windows of PROSE_WINDOW_CHUNKS * M
  characters; a fragment merge resumes where it left off; every loop's variant is stated. Measured
  (bench/hostile.py): about 1-2 s per MiB of prose, up to 20 s per MiB of tiny blocks (rows,
  headings, fences) on a loaded 2-core machine, growing 4x for 4x the input.
- Output: no chunk text is longer than M. All chunk text together is at most
  OUTPUT_FACTOR * n + M + overlap * chunks characters: a frame (a table header, a fence's lines)
  is repeated only when it takes at most half a chunk, so each part holds at least a quarter
  chunk of its own; each chunk repeats at most `overlap` characters of the one before it.
  embed_text adds at most a 370-character context to a chunk's words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version

from semantic_text_splitter import TextSplitter

from kbsearch.chunker.blocks import Block, parse_blocks
from kbsearch.chunker.embedtext import MAX_HEADING_CHARS, clip_heading, embed_text, readable_name
from kbsearch.chunker.frontmatter import front_matter_tags, front_matter_title, split_front_matter
from kbsearch.chunker.spans import line_spans, pack_spans, rstrip_end, windowed
from kbsearch.chunker.units import Unit, units
from kbsearch.models import Chunk, ParsedDocument

__all__ = ["ALGORITHM_VERSION", "FLOOR_CHARS", "MarkdownChunker"]

# Bump when anything below changes chunk boundaries, heading paths or embed_text.
ALGORITHM_VERSION = 3  # 3: a frame wider than half a chunk is not repeated
# No chunk is shorter unless its whole section is (a lone "```yaml" or "> **Notice:**" says nothing).
FLOOR_CHARS = 150

# The bound on all chunk text over the body (see the module's docstring;
# tests/searchsvc/chunker/test_chunker_properties.py).
OUTPUT_FACTOR = 3
_WORDS = re.compile(r"\w+")
# The prose splitter's cost grows with the square of a run of text without structure (one 1 MB
# line: 15 s); it is fed windows of this many chunks, so its work is linear in the body.
PROSE_WINDOW_CHUNKS = 8


@dataclass(slots=True)
class _Piece:
    start: int
    end: int
    text: str
    headings: tuple[str, ...]
    section: int
    context: str = ""  # the lead-in sentence a split part carries in its embedded text
    plain: bool = True  # text == body[start:end] (False for a re-opened fence or a repeated table header)


class MarkdownChunker:
    """Cuts markdown into chunks of at most `max_chars`, filled towards `min_chars`, sharing up to `overlap`."""

    def __init__(self, min_chars: int = 500, max_chars: int = 800, overlap: int = 0):
        if not 1 <= min_chars <= max_chars:
            raise ValueError(f"need 1 <= min_chars ({min_chars}) <= max_chars ({max_chars})")
        if not 0 <= overlap < min_chars:
            raise ValueError(f"need 0 <= overlap ({overlap}) < min_chars ({min_chars})")
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.overlap = overlap
        self.floor_chars = min(FLOOR_CHARS, min_chars)
        self._prose = TextSplitter((min_chars, max_chars), overlap=overlap, trim=True)
        self.window = max(PROSE_WINDOW_CHUNKS * max_chars, 4096)
        # The parser's and splitter's versions are included: an upgrade may move boundaries, and
        # re-chunking is cheap because unchanged chunk texts keep their vectors.
        self.fingerprint = (
            f"markdown-v{ALGORITHM_VERSION};min={min_chars};max={max_chars};overlap={overlap};"
            f"splitter={version('semantic-text-splitter')};parser={version('markdown-it-py')}"
        )

    def chunk(self, content: str, *, name: str | None = None) -> ParsedDocument:
        """Chunks of `content`; `name` (a path or URI) gives the title when the document names none."""
        text = _normalise(content)
        meta, body = split_front_matter(text)
        blocks = parse_blocks(body)
        headings = [(b.level, clip_heading(b.text)) for b in blocks if b.kind == "heading" and b.text.strip()]
        first_heading = next((text for level, text in headings if level == 1), None) or next(
            (text for _, text in headings), None
        )
        title = front_matter_title(meta) or first_heading or readable_name(name)
        tags = front_matter_tags(meta)

        pieces = self._merge_fragments(body, list(self._pack(body, units(body, blocks, self.max_chars))))
        chunks: list[Chunk] = []
        for piece in pieces:
            embedded = embed_text(title, list(piece.headings), tags, piece.text, lead_in=piece.context)
            if not embedded.strip():
                continue
            chunks.append(
                Chunk(
                    index=len(chunks),
                    text=piece.text,
                    embed_text=embedded,
                    headings=list(piece.headings),
                    start=piece.start,
                    end=piece.end,
                )
            )
        return ParsedDocument(title=title, tags=tags, body=body, chunks=chunks)

    # --- packing -----------------------------------------------------------------------------

    def _pack(self, body: str, grouped: list[Unit]) -> Iterator[_Piece]:
        current: _Piece | None = None
        for unit in grouped:
            size = unit.end - unit.start
            if current is not None:
                joined = unit.end - current.start
                if unit.opens_section and self._cut_before(current, unit):
                    yield current
                    current = None
                elif current.plain and joined <= self.max_chars:
                    current = _Piece(current.start, unit.end, body[current.start : unit.end], current.headings,
                                     current.section)  # fmt: skip
                    continue
                else:
                    yield current
                    current = None
            if size <= self.max_chars:
                current = _Piece(unit.start, unit.end, body[unit.start : unit.end], unit.headings, unit.section)
                current = self._with_overlap(body, current, unit)
                continue
            parts = list(self._split(body, unit))
            yield from parts[:-1]
            current = parts[-1]
        if current is not None:
            yield current

    def _cut_before(self, current: _Piece, unit: Unit) -> bool:
        """Whether a new section starts a new chunk: yes, unless what came before is a fragment.

        A fragment (a section shorter than the floor) runs on into the next section when that one is
        its sibling or below it, never into a section of a higher level.
        """
        if current.end - current.start >= self.floor_chars:
            return True
        return len(unit.headings) < len(current.headings)

    def _with_overlap(self, body: str, piece: _Piece, unit: Unit) -> _Piece:
        """Start up to `overlap` characters early, at a line or sentence start, within the same section."""
        if not self.overlap or unit.opens_section or piece.start == 0:
            return piece
        window = body[max(0, piece.start - self.overlap) : piece.start]
        cut = next((m.end() for m in re.finditer(r"(?:\n|(?<=[.!?])\s+)(?=\S)", window)), None)
        if cut is None:
            return piece
        start = piece.start - len(window) + cut
        if piece.end - start > self.max_chars:
            return piece
        return _Piece(start, piece.end, body[start : piece.end], piece.headings, piece.section)

    def _split(self, body: str, unit: Unit) -> Iterator[_Piece]:
        """A unit larger than max_chars, cut at its own boundaries."""
        main = unit.main
        head = ""
        if unit.start < main.start and main.end - main.start <= self.max_chars:
            # The block fits alone: what leads to it (a lead-in, headings) goes before it, and the
            # block stays whole, carrying its lead-in sentence in its embedded text.
            start = main.start
            if unit.lead_end < 0 and unit.heading_starts and main.end - unit.heading_starts[-1] <= self.max_chars:
                start = unit.heading_starts[-1]  # the section's own heading still fits: it opens the chunk
                unit = Unit(unit.start, start, main, headings=unit.headings, section=unit.section,
                             heading_starts=unit.heading_starts[:-1])  # fmt: skip
            if unit.start < start:
                yield from self._lead(body, unit)
            yield _Piece(start, main.end, body[start : main.end], unit.headings, unit.section, context=unit.lead_in)
            return
        by_parts = (main.kind == "code" and bool(main.fence) and "\n" in body[main.start : main.end]) or (
            main.kind in ("table", "list") and len(main.parts) >= 2
        )
        if unit.start < main.start:
            # A block that must be split takes what precedes it (the section's heading, a lead-in)
            # into its first part when there is room; otherwise the lead goes first on its own.
            lead_text = body[unit.start : main.start].rstrip()
            # Only a block cut at its own boundaries takes the lead into its first part; one split
            # as prose (a one-item list, an indented code block) would drop it.
            splits_by_parts = by_parts
            if splits_by_parts and len(lead_text) + 2 + self._first_part_room(body, main) <= self.max_chars:
                head = lead_text + "\n\n"
            elif splits_by_parts or unit.lead_end >= 0:
                yield from self._lead(body, unit)
        if by_parts and main.kind == "code":
            yield from self._code_parts(body, unit, head)
        elif by_parts and main.kind == "table":
            yield from self._table_parts(body, unit, head)
        elif by_parts:
            yield from self._list_parts(body, unit, head)
        else:
            yield from self._prose_with_heading(body, unit)

    def _lead(self, body: str, unit: Unit) -> Iterator[_Piece]:
        """What precedes a unit's main block, alone: a lead-in paragraph as prose; headings only when
        their text is longer than the heading path keeps (otherwise the path says it all)."""
        end = unit.lead_end if unit.lead_end >= 0 else min(unit.end, unit.main.start)
        # Headings the path does not name (siblings of the section's own) are words a chunk must keep.
        path = set(_WORDS.findall(" ".join(unit.headings)))
        if (
            unit.lead_end >= 0
            or any(word not in path for word in _WORDS.findall(body[unit.start : end]))
            or len(body[unit.start : end].strip()) > len(unit.heading_starts) * (MAX_HEADING_CHARS + 8)
        ):
            yield from self._prose_pieces(body, unit.start, end, unit)

    def _prose_with_heading(self, body: str, unit: Unit) -> Iterator[_Piece]:
        """Prose pieces whose first one starts with as many of the section's headings as fit."""
        main = unit.main
        if unit.heading_starts and unit.lead_end < 0:
            outer = Unit(unit.start, unit.heading_starts[-1], main, headings=unit.headings, section=unit.section,
                          heading_starts=unit.heading_starts[:-1])  # fmt: skip
            if outer.start < outer.end:
                yield from self._lead(body, outer)
        for start in unit.heading_starts[-1:] if unit.lead_end < 0 else ():
            room = self.max_chars - (main.start - start)
            if room < max(self.floor_chars, self.max_chars // 2):
                break
            window = body[main.start : min(unit.end, main.start + self.window)]
            first = next(iter(TextSplitter(room, trim=True).chunk_indices(window)), None)
            if first is None:
                break
            end = main.start + first[0] + len(first[1].rstrip())
            if end - start > self.max_chars:  # the splitter trimmed leading space the room did not count
                yield from self._prose_pieces(body, start, main.start, unit)  # the heading alone
                yield from self._prose_pieces(body, main.start, unit.end, unit)
                return
            yield _Piece(start, end, body[start:end], unit.headings, unit.section)
            yield from self._prose_pieces(body, end, unit.end, unit)
            return
        yield from self._prose_pieces(body, main.start, unit.end, unit)

    def _first_part_room(self, body: str, main: Block) -> int:
        """Room the first part of a split block needs besides its lead."""
        if main.kind == "table" and len(main.parts) >= 2:
            return main.parts[1] - main.start + self.floor_chars
        return len(main.fence) * 2 + len(main.lang) + 2 + self.floor_chars

    def _code_parts(self, body: str, unit: Unit, head: str) -> Iterator[_Piece]:
        main = unit.main
        opener_end = body.find("\n", main.start, main.end)
        opener = body[main.start : opener_end]
        closer_start = body.rfind("\n", main.start, main.end) + 1
        if not body[closer_start : main.end].strip().startswith(main.fence[:1] * 3):
            closer_start = main.end + 1  # unterminated: the fence runs to the end, no closer line
        frame = len(opener) + len(main.fence) + 2
        if not self._repeats(frame):
            yield from self._unframed_parts(body, unit, head)
            return
        room = self.max_chars - frame
        lines = line_spans(body, opener_end + 1, closer_start - 1)
        for n, (start, end) in enumerate(pack_spans(body, lines, room - len(head), room)):
            text = f"{head if n == 0 else ''}{opener}\n{body[start:end]}\n{main.fence}"
            yield _Piece(unit.start if n == 0 and head else start, end, text, unit.headings, unit.section,
                         context=unit.lead_in if n else "", plain=False)  # fmt: skip

    def _table_parts(self, body: str, unit: Unit, head: str) -> Iterator[_Piece]:
        main = unit.main
        header = body[main.start : main.parts[1]].rstrip("\n")
        if not self._repeats(len(header) + 1):
            yield from self._unframed_parts(body, unit, head)
            return
        room = self.max_chars - len(header) - 1
        rows = [(s, e) for s, e in line_spans(body, main.parts[1], main.end) if e > s]
        for n, (start, end) in enumerate(pack_spans(body, rows, room - len(head), room)):
            text = f"{head if n == 0 else ''}{header}\n{body[start:end]}"
            yield _Piece(unit.start if n == 0 and head else start, end, text, unit.headings, unit.section,
                         context=unit.lead_in if n else "", plain=False)  # fmt: skip

    def _repeats(self, frame: int) -> bool:
        """Whether each part of a split block repeats its frame (a fence's lines, a table's header).

        Only a frame of at most half a chunk is repeated: every part then holds at least a quarter
        chunk of the block's own text (_pack_spans balances parts to at least half the room), so
        the repeated text stays within a constant multiple of the input.
        """
        return frame <= self.max_chars // 2

    def _unframed_parts(self, body: str, unit: Unit, head: str) -> Iterator[_Piece]:
        """A block whose frame does not fit twice in a chunk: its lines, frame included, cut like any
        others and never repeated (a table header padded wider than a chunk, a fence with a huge info)."""
        main = unit.main
        lines = line_spans(body, main.start, main.end)
        for n, (start, end) in enumerate(pack_spans(body, lines, self.max_chars - len(head), self.max_chars)):
            lead = head if n == 0 else ""
            while start < end and body[start].isspace():
                start += 1
            end = rstrip_end(body, start, end)
            if start == end:
                continue
            yield _Piece(unit.start if lead else start, end, lead + body[start:end], unit.headings, unit.section,
                         context=unit.lead_in if n else "", plain=not lead)  # fmt: skip

    def _list_parts(self, body: str, unit: Unit, head: str) -> Iterator[_Piece]:
        """Items grouped up to max_chars; an item larger than that is split as prose."""
        main = unit.main
        bounds = [*main.parts, main.end + 1]
        items = [(bounds[i], rstrip_end(body, bounds[i], bounds[i + 1] - 1)) for i in range(len(main.parts))]
        group_start: int | None = unit.start if head else main.start
        group_end: int | None = None
        first = True
        for start, end in items:
            if group_start is None:
                group_start = start
            if end - group_start <= self.max_chars:
                group_end = end
                continue
            if group_end is not None:
                yield _Piece(group_start, group_end, body[group_start:group_end], unit.headings, unit.section,
                             context="" if first else unit.lead_in)  # fmt: skip
                first = False
            elif group_start < start:  # a lead with no room for the first item
                yield from self._prose_pieces(body, group_start, start, unit)
            group_start, group_end = start, None
            if end - start <= self.max_chars:
                group_end = end
            else:
                yield from self._prose_pieces(body, start, end, unit)
                group_start = None
        if group_start is not None and group_end is not None:
            yield _Piece(group_start, group_end, body[group_start:group_end], unit.headings, unit.section,
                         context="" if first else unit.lead_in)  # fmt: skip

    def _prose_pieces(self, body: str, start: int, end: int, unit: Unit) -> Iterator[_Piece]:
        for offset, piece in windowed(self._prose, body[start:end], self.window):
            stripped = piece.strip()
            if stripped:
                at = start + offset + (len(piece) - len(piece.lstrip()))
                yield _Piece(at, at + len(stripped), stripped, unit.headings, unit.section)

    # --- fragments ---------------------------------------------------------------------------

    def _merge_fragments(self, body: str, pieces: list[_Piece]) -> list[_Piece]:
        """A piece under the floor joins a neighbour of its section when the two fit in one chunk.

        After a merge only the piece before the merged one has a new neighbour, so the scan resumes
        there instead of at the start (which made many fragments quadratic).
        """
        i = 0
        while i < len(pieces):
            piece = pieces[i]
            if piece.end - piece.start < self.floor_chars and piece.plain:
                j = next((j for j in (i - 1, i + 1) if 0 <= j < len(pieces) and self._joinable(pieces[j], piece)), None)
                if j is not None:
                    a, b = sorted((pieces[j], piece), key=lambda p: p.start)
                    pieces[min(i, j)] = _Piece(a.start, b.end, body[a.start : b.end], a.headings, a.section)
                    del pieces[max(i, j)]
                    i = max(0, min(i, j) - 1)
                    continue
            i += 1
        return pieces

    def _joinable(self, neighbour: _Piece, piece: _Piece) -> bool:
        return (
            neighbour.plain
            and neighbour.section == piece.section
            and max(neighbour.end, piece.end) - min(neighbour.start, piece.start) <= self.max_chars
        )


def _normalise(content: str) -> str:
    # Lone surrogates (legal in JSON strings, illegal in UTF-8) would make the Rust splitter raise.
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        content = content.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if "\r" in content:
        content = content.replace("\r\n", "\n").replace("\r", "\n")
    return content.removeprefix("\ufeff")
