"""Units: the blocks of a body that mean something only together, which the chunker keeps in one chunk.

A heading with the block that follows it; a sentence with the code block, list or table it
introduces. One pass over the blocks: linear.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbsearch.chunker.blocks import Block
from kbsearch.chunker.embedtext import clip_heading
from kbsearch.chunker.sentences import split_sentences

__all__ = ["LEAD_IN_CHARS", "Unit", "units"]

# A paragraph this short before a code block, list or table is its lead-in even without a colon.
LEAD_IN_CHARS = 240


@dataclass(slots=True)
class Unit:
    """Blocks that stay together: [start, end) of the body, and the block that gives its shape."""

    start: int
    end: int
    main: Block
    lead_in: str = ""  # the sentence that introduces `main` (a code block, list or table)
    lead_end: int = -1  # where the lead-in paragraph ends, when the unit holds one
    headings: tuple[str, ...] = ()
    section: int = 0
    opens_section: bool = False  # starts with its section's heading
    heading_starts: tuple[int, ...] = ()  # where the headings it starts with begin, outermost first
    level: int = 7  # that heading's level
    visible: bool = True  # False for raw HTML and comments: nothing worth embedding


def units(body: str, blocks: list[Block], max_chars: int) -> list[Unit]:
    """The body's blocks grouped into units: a heading with what follows, a lead-in with its block."""
    found: list[Unit] = []
    stack: list[tuple[int, str]] = []
    section = 0
    pending: list[Block] = []  # the heading(s) waiting for the section's first block
    previous: Block | None = None
    for block in blocks:
        if block.kind == "heading":
            if pending and block.end - pending[0].start > max_chars:
                # Empty sections running longer than a chunk stand alone: the run would keep
                # only its last heading's words (the others are not in its path).
                found.append(_headings_unit(pending, section, stack))
                pending = []
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, clip_heading(block.text)))
            section += 1
            pending.append(block)
            previous = block
            continue
        headings = tuple(text for _, text in stack if text)
        last = found[-1] if found else None
        if (
            block.kind in ("code", "list", "table")
            and last is not None
            and previous is not None
            and previous.kind == "paragraph"
            and last.end == previous.end
            and last.main is previous
            and _introduces(body[previous.start : previous.end])
        ):
            # The sentence that introduces a code block, list or table stays with it.
            last.lead_in = _last_sentence(body[previous.start : previous.end])
            last.lead_end, last.end, last.main = last.end, block.end, block
            previous = block
            continue
        unit = Unit(
            start=block.start,
            end=block.end,
            main=block,
            headings=headings,
            section=section,
            visible=block.kind not in ("html", "comment"),
        )
        if pending:
            unit.start, unit.opens_section, unit.level = pending[0].start, True, pending[0].level
            unit.heading_starts = tuple(b.start for b in pending)
            pending = []
        found.append(unit)
        previous = block
    if pending:  # headings with nothing after them still say what the document will hold
        found.append(_headings_unit(pending, section, []))
    return found


def _headings_unit(pending: list[Block], section: int, stack: list[tuple[int, str]]) -> Unit:
    tail = pending[-1]
    return Unit(pending[0].start, tail.end, tail, headings=tuple(text for _, text in stack if text),
                 section=section, opens_section=True, level=pending[0].level,
                 heading_starts=tuple(b.start for b in pending))  # fmt: skip


def _introduces(paragraph: str) -> bool:
    text = paragraph.rstrip()
    return text.endswith(":") or len(text) <= LEAD_IN_CHARS


def _last_sentence(paragraph: str) -> str:
    text = " ".join(paragraph.split())
    parts = split_sentences(text.rstrip(":").rstrip())
    sentence = parts[-1] if parts else text
    return sentence[:LEAD_IN_CHARS]
